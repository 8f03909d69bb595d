"""`corral/DeepShare-v0`: DeepShare's RL formulation (ICPADS'23) over Corral's simulator, as a baseline.

Same episodes as `corral/Placement-v0` (`agents.scenarios`), so the two agents are trained and evaluated on the same
jobs and clusters; the state, actions and reward are DeepShare's (`policies.deepshare`).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agents.scenarios import SYNTHETIC, Scenario, ScenarioSource, is_synthetic, scale_to_load
from policies.deepshare import (
    MAX_NODES,
    N_ACTIONS,
    OBS_HIGH,
    OBS_LOW,
    OBS_SIZE,
    DeepSharePoint,
    DeepSharePolicy,
    check_cluster,
)
from scheduler.core.model import Cluster, JobSpec, parse_cluster
from scheduler.core.simulator import Simulator


class DeepShareEnv(gym.Env[np.ndarray, np.int64]):
    """Place pending jobs on node pairs of a fixed GPU grid, trading contention against utilisation (DeepShare).

    ## Description
    Each episode replays a window of jobs (a synthetic workload, or a random window of the training part of a real
    trace) on a cluster sized for an offered load drawn from a range, exactly as `corral/Placement-v0` builds it, but
    never larger than `MAX_NODES` (16) nodes: DeepShare's grid is fixed. Pending jobs are visited in arrival order;
    whenever one fits somewhere, the agent picks a node pair for it or waits (`policies.deepshare` has the details,
    shared with the `deepshare:` policy). Gangs larger than two nodes are placed by best fit without a decision.

    ## Action Space
    `Discrete(137)`: node pairs (i, j), i <= j < 16, in `policies.deepshare.PAIRS` order, then 136 = wait (the job is
    passed over until the clock moves). There are no action masks (DeepShare trains plain PPO): an action naming an
    absent node or one that does not fit is invalid, costs `invalid_penalty` and makes the job wait (on an idle
    cluster it takes the best fit instead, since waiting there would never end); `info["invalid_action"]` reports it.

    ## Observation Space
    `Box(0, 8, (661,), float32)`: a 16 x 8 grid of GPUs with 5 features each (present, free share, memory in use,
    tenants, mean predicted slowdown of its tenants - 1), each node's NIC load, and the job's gang size, share,
    gradient volume, time waited and memory need. Absent nodes and GPUs are zeros.

    ## Rewards
    DeepShare's mix of contention and utilisation, accumulated over the simulated time until the next decision:
    the integral of `-contention_weight * (mean predicted slowdown of the running jobs - 1) + utilisation_weight *
    (GPU share allocated / GPUs) - slo_weight * (inference services over their latency SLO)` dt, in units of
    `reward_scale_s` seconds, minus `invalid_penalty` on a step whose action was invalid. The SLO term is Corral's
    addition (pass `slo_weight=0` for DeepShare's own reward). Note that the utilisation integral over an episode is
    the GPU-share-seconds held divided by the GPUs: contention, by stretching jobs, inflates it; the contention term
    is what holds that in check.

    ## Starting State and Episode End
    The episode starts at the first decision and terminates when every job of the window has completed
    (`info["metrics"]` then holds the simulator's metrics); it is truncated after `max_decisions` decisions.

    ## Arguments
    As `corral/Placement-v0`: `workloads` ("synthetic" and/or trace paths); `presets`; `nodes` (inclusive range, capped
    at 16) for synthetic clusters; `window` jobs per episode; `load` the range of offered load; `part` of traces to draw
    from ("train", "test" or "all"); `scenarios` a fixed list to cycle through instead of drawing; `reward_scale_s`;
    `slo_weight`; `max_decisions`. Plus the reward's `contention_weight`, `utilisation_weight` and `invalid_penalty`.
    `reset(options=...)` may give a `scenario` (a `Scenario` or its dict), a `workload` or `window` to draw with, or
    a fixed `cluster` spec (refused with `SpecError` beyond the grid). A trace window whose load-sized cluster needs
    more than 16 nodes runs on 16 (at a higher load than asked); `info["capped"]` says so.
    """

    metadata = {"render_modes": []}  # noqa: RUF012  (gymnasium declares it an instance attribute)

    def __init__(
        self,
        workloads: Sequence[str] = (SYNTHETIC,),
        presets: Sequence[str] = ("dgx-a100", "pcie-v100"),
        nodes: tuple[int, int] = (2, 8),
        window: int = 200,
        load: tuple[float, float] = (0.6, 1.0),
        part: str = "train",
        scenarios: Sequence[Scenario] | None = None,
        reward_scale_s: float = 36_000.0,
        slo_weight: float = 1.0,
        max_decisions: int = 50_000,
        contention_weight: float = 1.0,
        utilisation_weight: float = 1.0,
        invalid_penalty: float = 0.01,
    ) -> None:
        super().__init__()
        capped = (min(nodes[0], MAX_NODES), min(nodes[1], MAX_NODES))  # the grid holds no more
        self.source = ScenarioSource(workloads, presets, capped, window, load, part, scenarios)
        self.reward_scale_s = reward_scale_s
        self.slo_weight = slo_weight
        self.max_decisions = max_decisions
        self.contention_weight = contention_weight
        self.utilisation_weight = utilisation_weight
        self.invalid_penalty = invalid_penalty
        self.observation_space = spaces.Box(OBS_LOW, OBS_HIGH, shape=(OBS_SIZE,), dtype=np.float32)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self.sim: Simulator | None = None
        self.scenario: Scenario | None = None
        self._point: DeepSharePoint | None = None
        self._rounds: Generator[DeepSharePoint, int, int] | None = None  # the ask-apply loop at the current instant
        self._decisions = 0

    # ---- episode set-up ---------------------------------------------------------------------------------------------

    def rewind(self) -> None:
        """Start the fixed scenario list over (an evaluation runs each of them once, in order)."""
        self.source.rewind()

    def _cluster(self, scenario: Scenario, options: dict[str, Any]) -> tuple[Cluster, list[JobSpec], str | None]:
        """The scenario's cluster and jobs, within the grid; the third item says what was capped, if anything."""
        cluster, jobs = scenario.build()
        if "cluster" in options:  # a fixed cluster: synthetic arrivals are rescaled to the scenario's load on it
            cluster = parse_cluster(options["cluster"])
            check_cluster(cluster)  # a cluster the caller chose is refused, not silently shrunk
            if is_synthetic(scenario.workload):
                jobs = scale_to_load(jobs, cluster.num_gpus, scenario.load)
            return cluster, jobs, None
        if cluster.num_nodes <= MAX_NODES:
            return cluster, jobs, None
        capped = parse_cluster(f"{scenario.preset}:{MAX_NODES}")
        note = (f"{cluster.num_nodes} nodes capped at {MAX_NODES} (DeepShare's grid): offered load above the "
                f"{scenario.load:.2f} asked")
        if is_synthetic(scenario.workload):  # synthetic arrivals can be rescaled to the load on the smaller cluster
            jobs = scale_to_load(jobs, capped.num_gpus, scenario.load)
            note = f"{cluster.num_nodes} nodes capped at {MAX_NODES} (DeepShare's grid), arrivals rescaled"
        return capped, jobs, note

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        options = options or {}
        scenario = self.source.next(self.np_random, options)
        cluster, jobs, capped = self._cluster(scenario, options)
        self.scenario = scenario
        # The agent's seat: the deepshare: policy's own logic (its visiting order, its passed-over jobs), whose
        # questions the environment answers with the agent's actions, one `step` at a time.
        self.sim = Simulator(cluster, jobs, DeepSharePolicy(None, "env"))
        self._rounds = self.sim.rounds()
        self._decisions = 0
        self._advance()
        info: dict[str, Any] = {"cluster": cluster.name, "scenario": scenario.label, "jobs": len(jobs)}
        if capped is not None:
            info["capped"] = capped
        return self._obs(), info

    # ---- stepping ---------------------------------------------------------------------------------------------------

    def _obs(self) -> np.ndarray:
        if self._point is None or self._point.obs is None:
            return np.zeros(OBS_SIZE, dtype=np.float32)
        return self._point.obs

    def _reward_rate(self) -> float:
        """DeepShare's reward per second in the current state (it holds until the next event)."""
        sim = self.sim
        assert sim is not None
        view = sim.view
        running = sim.running
        contention = sum(view.slowdown(j) for j in running) / len(running) - 1.0 if running else 0.0
        utilisation = 1.0 - view.free_capacity / sim.cluster.num_gpus
        return (self.utilisation_weight * utilisation - self.contention_weight * contention
                - self.slo_weight * sim.slo_violations())

    def _advance(self, action: int | None = None) -> float:
        """Answer the current decision point with `action` (None: there is none yet) and run the simulator to the
        next one (or the end), through the ask-apply loop of `corral simulate` (`Simulator.rounds`); returns the reward
        accrued on the way."""
        sim = self.sim
        assert sim is not None and self._rounds is not None
        reward = 0.0
        while True:
            try:
                self._point = next(self._rounds) if action is None else self._rounds.send(action)
                return reward
            except StopIteration:
                action = None
            rate, t0 = self._reward_rate(), sim.now
            if not sim.advance():
                self._point = None
                return reward
            reward += rate * (sim.now - t0) / self.reward_scale_s
            self._rounds = sim.rounds()

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._point is None or self.sim is None:
            raise RuntimeError("step() called on a finished episode: call reset()")
        point = self._point
        action = int(action)
        info: dict[str, Any] = {}
        _, invalid = point.outcome(action, idle=not self.sim.running)  # what the policy will make of it
        reward = 0.0
        if invalid:
            info["invalid_action"] = action
            reward -= self.invalid_penalty
        self._decisions += 1
        reward += self._advance(action)
        terminated = self._point is None
        truncated = not terminated and self._decisions >= self.max_decisions
        if terminated or truncated:  # a truncated episode's metrics cover only the jobs that finished
            info["metrics"] = self.sim.metrics() | {"truncated": truncated}
        return self._obs(), reward, terminated, truncated, info

"""`corral/Placement-v0`: the placement decision as a Gymnasium environment over Corral's simulator."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agents.scenarios import SYNTHETIC, Scenario, ScenarioSource, is_synthetic, scale_to_load
from policies.gittins import SizeDistribution, default_sizes
from policies.rl import RLPolicy
from policies.rl_encoding import N_ACTIONS, OBS_HIGH, OBS_LOW, OBS_SIZE, WAIT, DecisionPoint
from scheduler.core.decisions import Policy
from scheduler.core.model import Job, parse_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.tenancy import TenancyFrame

DEFAULT_TEAM_SHARE = 0.3  # training windows shared by teams (`corral train --team-share`)
DEFAULT_PRIORITY_SHARE = 0.3  # training windows with priorities (`corral train --priority-share`)


class PlacementEnv(gym.Env[np.ndarray, np.int64]):
    """Start the pending jobs of a replayed workload, one decision at a time, so as to minimise average JCT.

    ## Description
    Each episode replays a window of jobs (a synthetic workload, or a random window of the training part of a real
    trace) on a cluster brought to an offered load drawn from a range (`agents.scenarios`), through the same simulator
    and contention model `corral simulate` uses. With probability `team_share` the window's jobs belong to 2 to 4
    teams with skewed demand, each with an equal share of the cluster as quota, and the agent acts inside the tenancy
    frame (`scheduler.core.tenancy`) as the `rl:` policy does with teams: it is asked about the jobs the frame makes
    eligible, then about the jobs that may start only by a swap, and sees each job's team standing in the
    observation. Whenever a pending job can start (preempting lower-priority jobs if
    it must), the agent decides which of a few candidate jobs (the heads of several queue orders) starts, on which of
    its candidate placements, or waits. The encoding is `policies.rl_encoding`, shared with the `rl:` policy, so a
    trained agent acts identically in the simulator and the live controller.

    ## Action Space
    `Discrete(45)`: action `j * 4 + k` starts the job of slot `j` (0..10: one per queue order, then three
    preempting, then `grow` and `shrink`) on its placement `k` (0..3), preempting the slot's victims if it has any; the
    `grow` slot resizes a running elastic job to its placement `k` instead, and the `shrink` slot starts its job on GPUs
    elastic jobs give back (`policies.rl_elastic`); 44 = wait (nothing more starts until the next event).
    `action_masks()` gives the valid ones, for MaskablePPO; waiting is offered only when every start would preempt or
    resize (so it declines those; it never idles GPUs a job could start on). An invalid action is
    not an error: it is taken as wait (or, where wait is masked, as the first valid action) and reported in `info`.

    ## Observation Space
    `Box(0, 8, (962,), float32)`: per job slot, which orders the job heads, its size, share, kind, gradient volume,
    wait, attained service, queue, Gittins index, expected remaining service, the preemption it needs, its team's
    standing (borrowing or within quota, swap, the team's borrowed GPUs and fair-share rank) and its priority (the
    GPUs running at a lower one, whether it is pinned) and its sizes (elastic or not, their span, its size now), and
    per placement slot its predicted slowdowns, spread, link load, fragmentation, sharing, the racks it spans beyond
    the fewest, the load of the busiest fabric link it would cross and its size against the job's (grown, shrunk, speed
    per GPU); cluster, queue, teams, priority, fabric and elastic summaries. Nothing depends on the cluster's or the queue's size,
    or on the number of teams.

    ## Rewards
    Minus the number of jobs in the system times the time until the next decision, minus `slo_weight` times the
    number of inference services over their latency SLO times that time, in units of `reward_scale_s` job-seconds;
    by default (`reward_scale_s=None`) the unit is the episode's total isolated run time, so an episode's return is
    minus its total JCT over the least it could be (about minus the mean slowdown) whatever the window's size, load
    or job lengths: returns of different regimes are on one scale.

    ## Starting State and Episode End
    The episode starts at the first decision and terminates when every job of the window has completed; it is
    truncated after `max_decisions` decisions.

    ## Arguments
    `workloads`: "synthetic" and/or trace paths; `presets`; `nodes` (inclusive range) for synthetic clusters;
    `window` jobs per episode; `load` the range of offered load; `part` the part of traces to draw windows from
    ("train", "test" or "all"); `scenarios` a fixed list to cycle through instead of drawing (for evaluation);
    `team_share` the probability that a drawn window is shared by teams (0: never, the default); `priority_share` the
    probability that a drawn window's jobs carry priorities (`agents.scenarios.PRIORITY_DRAW`; 0: never, the default);
    `elastic_share` the probability that a drawn window is an elastic mix (`agents.scenarios.ELASTIC_DRAW`; 0: never).
    `reset(options=...)` may give a `scenario` (a `Scenario` or its dict), a `workload` or `window` to draw with, a
    fixed `cluster` spec, or `outages` (node drains and GPU faults, `scheduler.core.outages.Outage`; one that never
    ends must leave room for every job).
    """

    # gymnasium's Env declares this a plain attribute, so it cannot be a ClassVar here; read per class, never mutated
    metadata = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        workloads: Sequence[str] = (SYNTHETIC,),
        presets: Sequence[str] = ("dgx-a100", "pcie-v100"),
        nodes: tuple[int, int] = (2, 8),
        window: int = 200,
        load: tuple[float, float] = (0.6, 2.5),
        part: str = "train",
        scenarios: Sequence[Scenario] | None = None,
        reward_scale_s: float | None = None,
        slo_weight: float = 1.0,
        max_decisions: int = 50_000,
        team_share: float = 0.0,
        priority_share: float = 0.0,
        elastic_share: float = 0.0,
    ) -> None:
        super().__init__()
        self.source = ScenarioSource(workloads, presets, nodes, window, load, part, scenarios, team_share,
                                     priority_share, elastic_share)
        self.reward_scale_s = reward_scale_s
        self.slo_weight = slo_weight
        self.max_decisions = max_decisions
        self.observation_space = spaces.Box(OBS_LOW, OBS_HIGH, shape=(OBS_SIZE,), dtype=np.float32)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self.sim: Simulator | None = None
        self.scenario: Scenario | None = None
        self._point: DecisionPoint | None = None
        self._scale = 1.0
        self._decisions = 0
        self.sizes: SizeDistribution = default_sizes()
        # The agent's seat: the rl: policy's own decision logic (its waits, its wake-ups), whose questions the
        # environment answers with the agent's actions, one `step` at a time; inside the tenancy frame with teams.
        self.frame: TenancyFrame | None = None
        self.policy: Policy = RLPolicy(None, "env", self.sizes, explain=False)
        self._rounds: Generator[DecisionPoint, int, int] | None = None  # the ask-apply loop at the current instant

    # ---- episode set-up ---------------------------------------------------------------------------------------------

    def rewind(self) -> None:
        """Start the fixed scenario list over (an evaluation runs each of them once, in order)."""
        self.source.rewind()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        options = options or {}
        scenario = self.source.next(self.np_random, options)
        cluster, jobs = scenario.build()
        if "cluster" in options:  # a fixed cluster: synthetic arrivals are rescaled to the scenario's load on it
            cluster = parse_cluster(options["cluster"])
            if is_synthetic(scenario.workload):
                jobs = scale_to_load(jobs, cluster.num_gpus, scenario.load)
        self.scenario = scenario
        # Drains and GPU faults over the episode (`scheduler.core.outages.Outage`): the closed GPUs look full in the
        # view, so the masks offer no placement on them, as the live controller's rule has it.
        teams = scenario.tenancy(cluster)
        agent = RLPolicy(None, "env", self.sizes, explain=False)
        self.frame = TenancyFrame(agent, teams) if teams is not None else None
        self.policy = self.frame if self.frame is not None else agent
        self.sim = Simulator(cluster, jobs, self.policy, outages=options.get("outages", ()))
        self._rounds = self.sim.rounds()
        self._scale = self.reward_scale_s or max(sum(j.duration_s for j in jobs), 1.0)
        self._decisions = 0
        self._advance()
        info = {"cluster": cluster.name, "scenario": scenario.label, "jobs": len(jobs), "teams": scenario.teams}
        return self._obs(), info

    # ---- stepping ---------------------------------------------------------------------------------------------------

    def _obs(self) -> np.ndarray:
        return self._point.obs if self._point is not None else np.zeros(OBS_SIZE, dtype=np.float32)

    def action_masks(self) -> np.ndarray:
        if self._point is None:
            mask = np.zeros(N_ACTIONS, dtype=bool)
            mask[WAIT] = True
            return mask
        return self._point.mask.copy()

    @property
    def decision_queue(self) -> list[Job]:
        """The pending jobs the current decision is about: all of them, or inside the frame those it asks about."""
        return self._point.queue if self._point is not None else []

    @property
    def decision_is_swap(self) -> bool:
        """Inside the frame, the current decision is about jobs that may start only by a swap (the frame's standing
        is on the view while its policy decides)."""
        tenancy = self.sim.view.tenancy if self.sim is not None else None
        return self._point is not None and tenancy is not None and tenancy.swap_call

    def _advance(self, action: int | None = None) -> float:
        """Answer the current decision point with `action` (None: there is none yet) and run the simulator to the
        next one (or the end), through the same ask-apply loop as `corral simulate` (`Simulator.rounds`); returns
        the reward accrued on the way."""
        sim = self.sim
        assert sim is not None and self._rounds is not None
        reward = 0.0
        while True:
            try:
                self._point = next(self._rounds) if action is None else self._rounds.send(action)
                return reward
            except StopIteration:
                action = None
            in_system, late, t0 = sim.jobs_in_system(), sim.slo_violations(), sim.now
            if not sim.advance():
                self._point = None
                return reward
            reward -= (in_system + self.slo_weight * late) * (sim.now - t0) / self._scale
            self._rounds = sim.rounds()

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._point is None or self.sim is None:
            raise RuntimeError("step() called on a finished episode: call reset()")
        point = self._point
        action = int(action)
        info: dict[str, Any] = {}
        if not (0 <= action < N_ACTIONS and point.mask[action]):
            info["invalid_action"] = action
            action = WAIT if point.mask[WAIT] else int(np.flatnonzero(point.mask)[0])
        self._decisions += 1
        reward = self._advance(action)
        terminated = self._point is None
        truncated = not terminated and self._decisions >= self.max_decisions
        if terminated or truncated:  # a truncated episode's metrics cover only the jobs that finished
            info["metrics"] = self.sim.metrics() | {"truncated": truncated}
        return self._obs(), reward, terminated, truncated, info

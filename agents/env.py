"""`corral/Placement-v0`: the placement decision as a Gymnasium environment over Corral's simulator."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import cache
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from policies.placement import PassedOver
from policies.rl_encoding import (
    N_ACTIONS, OBS_HIGH, OBS_LOW, OBS_SIZE, WAIT, DecisionPoint, decision_points, next_demotion,
)
from scheduler.decisions import WakeAt
from scheduler.model import JobSpec, parse_cluster
from scheduler.simulator import Simulator
from scheduler.traces import load_trace, synthetic


@cache
def _trace_jobs(path: str, seed: int) -> tuple[JobSpec, ...]:
    return tuple(load_trace(path, seed=seed).jobs)


class PlacementEnv(gym.Env[np.ndarray, np.int64]):
    """Place the pending jobs of a replayed workload, one decision at a time, so as to minimise average JCT.

    ## Description
    Each episode replays a window of jobs (a synthetic workload, or a random window of a real trace) on a cluster
    drawn from a range of presets and sizes, through the same simulator and contention model `corral simulate` uses.
    Whenever a pending job could start, the agent decides for it (jobs in arrival order): one of its candidate
    placements, or wait. The encoding is `policies.rl_encoding`, shared with the `rl:` policy, so a trained agent acts
    identically in the simulator and the live controller.

    ## Action Space
    `Discrete(7)`: candidate placements 0..5 (fewer may exist), 6 = wait (the job is passed over until the next event).
    `action_masks()` gives the valid ones, for MaskablePPO; waiting is masked on an idle cluster. An invalid action is
    not an error: it is taken as wait (or, where wait is masked, as candidate 0) and reported in `info`.

    ## Observation Space
    `Box(0, 8, (60,), float32)`: per candidate slot its predicted slowdowns, spread, link load, fragmentation and
    sharing; the job's size, share, kind, gradient volume, wait and attained service; cluster and queue summaries.
    Nothing depends on the cluster's size.

    ## Rewards
    Minus the number of jobs in the system times the time until the next decision, in units of `reward_scale_s`
    job-seconds (its sum over an episode is minus the total JCT), minus `slo_weight` times the number of inference
    services over their latency SLO times that time.

    ## Starting State and Episode End
    The episode starts at the first decision and terminates when every job of the window has completed; it is
    truncated after `max_decisions` decisions.

    ## Arguments
    `workloads`: "synthetic" and/or trace paths to draw windows from; `presets` and `nodes` (inclusive range) for the
    cluster; `window` jobs per episode; `load` (range) the offered load synthetic windows are scaled to.
    `reset(options=...)` may fix `cluster` (a spec string), `workload`, `start` (window start in a trace) and `window`.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        workloads: Sequence[str] = ("synthetic",),
        presets: Sequence[str] = ("dgx-a100", "pcie-v100"),
        nodes: tuple[int, int] = (2, 8),
        window: int = 200,
        load: tuple[float, float] = (0.6, 1.1),
        reward_scale_s: float = 36_000.0,
        slo_weight: float = 1.0,
        max_decisions: int = 50_000,
    ) -> None:
        super().__init__()
        self.workloads = list(workloads)
        self.presets = list(presets)
        self.nodes = nodes
        self.window = window
        self.load = load
        self.reward_scale_s = reward_scale_s
        self.slo_weight = slo_weight
        self.max_decisions = max_decisions
        self.observation_space = spaces.Box(OBS_LOW, OBS_HIGH, shape=(OBS_SIZE,), dtype=np.float32)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self.sim: Simulator | None = None
        self._point: DecisionPoint | None = None
        self._passed = PassedOver()  # as in the rl: policy: jobs told to wait at this instant
        self._decisions = 0

    # ---- episode set-up ---------------------------------------------------------------------------------------------

    def _draw_jobs(self, workload: str, window: int, cluster_gpus: int, start: int | None) -> list[JobSpec]:
        rng = self.np_random
        if workload == "synthetic":
            jobs = synthetic(window, seed=int(rng.integers(2**31)), mean_interarrival_s=1.0).jobs
            # Scale arrivals so the offered load (GPU-seconds asked per second per GPU) lands in the drawn range.
            work = sum(j.duration_s * j.num_gpus for j in jobs)
            span = max(jobs[-1].submit_s, 1.0)
            target = float(rng.uniform(*self.load))
            factor = work / (target * cluster_gpus * span)
            return [dataclasses.replace(j, submit_s=j.submit_s * factor) for j in jobs]
        trace = _trace_jobs(workload, int(rng.integers(4)))
        window = min(window, len(trace))
        first = start if start is not None else int(rng.integers(0, len(trace) - window + 1))
        chosen = trace[first:first + window]
        t0 = chosen[0].submit_s
        return [dataclasses.replace(j, submit_s=j.submit_s - t0) for j in chosen]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        options = options or {}
        rng = self.np_random
        if "cluster" in options:
            cluster = parse_cluster(options["cluster"])
        else:
            preset = self.presets[int(rng.integers(len(self.presets)))]
            cluster = parse_cluster(f"{preset}:{int(rng.integers(self.nodes[0], self.nodes[1] + 1))}")
        workload = options.get("workload") or self.workloads[int(rng.integers(len(self.workloads)))]
        jobs = self._draw_jobs(workload, int(options.get("window", self.window)), cluster.num_gpus,
                               options.get("start"))
        self.sim = Simulator(cluster, jobs, None)
        self._passed = PassedOver()
        self._decisions = 0
        self._advance()
        info = {"cluster": cluster.name, "workload": workload, "jobs": len(jobs)}
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

    def _advance(self) -> float:
        """Run the simulator to the next decision (or the end); returns the reward accrued on the way."""
        sim = self.sim
        assert sim is not None
        reward = 0.0
        while True:
            if sim.pending:
                passed = self._passed.refresh(sim.view, sim.now)
                point = next(decision_points(sim.view, sim.pending.values(), sim.now, passed), None)
                if point is not None:
                    self._point = point
                    return reward
            if sim.pending and (wake := next_demotion(sim.view, sim.now)) is not None:
                sim.apply([WakeAt(wake)])  # as the rl: policy does: a demoted job may become a victim
            in_system, late, t0 = sim.jobs_in_system(), sim.slo_violations(), sim.now
            if not sim.advance():
                self._point = None
                return reward
            reward -= (in_system + self.slo_weight * late) * (sim.now - t0) / self.reward_scale_s

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._point is None or self.sim is None:
            raise RuntimeError("step() called on a finished episode: call reset()")
        point = self._point
        action = int(action)
        info: dict[str, Any] = {}
        if not (0 <= action < N_ACTIONS and point.mask[action]):
            info["invalid_action"] = action
            action = WAIT if point.mask[WAIT] else 0
        decisions = point.decisions(action, "rl")
        if decisions:
            self.sim.apply(decisions)
        else:
            self._passed.ids.add(point.job.id)
        self._decisions += 1
        reward = self._advance()
        terminated = self._point is None
        truncated = not terminated and self._decisions >= self.max_decisions
        if terminated:
            info["metrics"] = self.sim.metrics()
        return self._obs(), reward, terminated, truncated, info

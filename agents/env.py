"""`corral/Placement-v0`: the placement decision as a Gymnasium environment over Corral's simulator."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agents.scenarios import SYNTHETIC, Scenario, ScenarioSource, is_synthetic, scale_to_load
from policies.gittins import SizeDistribution, default_sizes
from policies.rl import RLPolicy
from policies.rl_encoding import (
    N_ACTIONS,
    OBS_HIGH,
    OBS_LOW,
    OBS_SIZE,
    WAIT,
    DecisionPoint,
    decision_point,
    next_demotion,
)
from scheduler.core.decisions import Decision, WakeAt
from scheduler.core.model import Job, parse_cluster
from scheduler.core.simulator import MAX_ROUNDS, SimulationError, Simulator
from scheduler.core.state import ClusterView
from scheduler.core.tenancy import TenancyFrame

DEFAULT_TEAM_SHARE = 0.3  # training windows shared by teams (`corral train --team-share`)


class _NeedAction(Exception):
    """The tenancy frame asked the agent's seat at a decision point its script had no action for."""

    def __init__(self, point: DecisionPoint, queue: list[Job], swap: bool) -> None:
        super().__init__("the agent's action is needed")
        self.point = point
        self.queue = queue
        self.swap = swap


class _Seat(RLPolicy):
    """The agent's place inside the tenancy frame: the `rl:` policy's own decision logic, whose actions come from
    the agent, one `step` at a time.

    The frame calls its wrapped policy from the middle of its own work (perhaps several times at one instant: again
    after holding back a job, then about swaps), so the environment cannot hand control back to the agent from
    there. Instead, every call of the frame at an instant replays the actions the agent has taken at this call
    (`script`, in order) and raises `_NeedAction` at the first decision point beyond them; the frame is deterministic
    and changes nothing before its policy has answered every question, so a replay reaches the same points."""

    def __init__(self, sizes: SizeDistribution) -> None:
        super().__init__(None, "env", sizes)
        self.script: list[int] = []
        self._used = 0
        self._queue: list[Job] = []
        self._swap = False

    def replay(self) -> None:
        self._used = 0

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        self._queue = list(queue)
        self._swap = view.tenancy is not None and view.tenancy.swap_call
        return super().schedule(view, self._queue, now)

    def choose(self, point: DecisionPoint) -> int:
        if self._used < len(self.script):
            self._used += 1
            return self.script[self._used - 1]
        raise _NeedAction(point, self._queue, self._swap)

    @staticmethod
    def _with_candidates(view: ClusterView, job: Job, cands: list, decisions: list[Decision]) -> list[Decision]:
        return decisions  # what the agent chose between is for explanations; training needs none


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
    `Discrete(37)`: action `j * 4 + k` starts the job of slot `j` (0..8, one per queue order, the last three
    preempting) on its placement `k` (0..3), preempting the slot's victims if it has any; 36 = wait (nothing more
    starts until the next event). `action_masks()` gives the valid ones, for MaskablePPO; waiting is offered only when
    every start would preempt (so it declines a preemption; it never idles GPUs a job could use). An invalid action is
    not an error: it is taken as wait (or, where wait is masked, as the first valid action) and reported in `info`.

    ## Observation Space
    `Box(0, 8, (542,), float32)`: per job slot, which orders the job heads, its size, share, kind, gradient volume,
    wait, attained service, queue, Gittins index, expected remaining service, the preemption it needs and its team's
    standing (borrowing or within quota, swap, the team's borrowed GPUs and fair-share rank), and per placement slot
    its predicted slowdowns, spread, link load, fragmentation and sharing; cluster, queue and teams summaries.
    Nothing depends on the cluster's or the queue's size, or on the number of teams.

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
    `team_share` the probability that a drawn window is shared by teams (0: never, the default).
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
    ) -> None:
        super().__init__()
        self.source = ScenarioSource(workloads, presets, nodes, window, load, part, scenarios, team_share)
        self.reward_scale_s = reward_scale_s
        self.slo_weight = slo_weight
        self.max_decisions = max_decisions
        self.observation_space = spaces.Box(OBS_LOW, OBS_HIGH, shape=(OBS_SIZE,), dtype=np.float32)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self.sim: Simulator | None = None
        self.scenario: Scenario | None = None
        self._point: DecisionPoint | None = None
        self._waited: tuple[float, int] | None = None  # as in the rl: policy: the instant the agent chose to wait
        self._scale = 1.0
        self._decisions = 0
        self.sizes: SizeDistribution = default_sizes()
        self.frame: TenancyFrame | None = None  # with teams: the frame the agent's seat acts in
        self._seat = _Seat(self.sizes)
        self._asked: list[Job] = []  # the queue of the current decision point, inside the frame
        self._asked_swap = False  # and whether the frame asks about swaps there

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
        self.sim = Simulator(cluster, jobs, None, outages=options.get("outages", ()))
        teams = scenario.tenancy(cluster)
        self._seat = _Seat(self.sizes)
        self.frame = TenancyFrame(self._seat, teams) if teams is not None else None
        self._waited = None
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
        if self.frame is not None:
            return self._asked
        return list(self.sim.pending.values()) if self.sim is not None else []

    @property
    def decision_is_swap(self) -> bool:
        """Inside the frame, the current decision is about jobs that may start only by a swap."""
        return self.frame is not None and self._asked_swap

    def _framed(self) -> bool:
        """Inside the tenancy frame: let it act at this instant (its reclaims, and the agent's choices replayed by
        the seat) until the agent must choose (True) or nothing more happens now (False)."""
        sim, frame = self.sim, self.frame
        assert sim is not None and frame is not None
        for _ in range(MAX_ROUNDS):
            if not sim.pending:
                return False
            self._seat.replay()
            try:
                decisions = frame.schedule(sim.view, sim.pending.values(), sim.now)
            except _NeedAction as need:
                self._point, self._asked, self._asked_swap = need.point, need.queue, need.swap
                return True
            self._seat.script = []  # this call's questions are answered; the next call asks afresh
            if not sim.apply(decisions):
                return False
        raise SimulationError(f"the tenancy frame kept acting at t={sim.now} for {MAX_ROUNDS} rounds")

    def _advance(self) -> float:
        """Run the simulator to the next decision (or the end); returns the reward accrued on the way."""
        sim = self.sim
        assert sim is not None
        reward = 0.0
        while True:
            if self.frame is not None:
                if self._framed():
                    return reward
            elif sim.pending and self._waited != (sim.now, len(sim.running)):
                point = decision_point(sim.view, sim.pending.values(), sim.now, self.sizes)
                if point is not None:
                    self._point = point
                    return reward
            if self.frame is None and sim.pending and (wake := next_demotion(sim.view, sim.now)) is not None:
                sim.apply([WakeAt(wake)])  # as the rl: policy does (inside the frame, the seat asks for it itself)
            in_system, late, t0 = sim.jobs_in_system(), sim.slo_violations(), sim.now
            if not sim.advance():
                self._point = None
                return reward
            reward -= (in_system + self.slo_weight * late) * (sim.now - t0) / self._scale

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._point is None or self.sim is None:
            raise RuntimeError("step() called on a finished episode: call reset()")
        point = self._point
        action = int(action)
        info: dict[str, Any] = {}
        if not (0 <= action < N_ACTIONS and point.mask[action]):
            info["invalid_action"] = action
            action = WAIT if point.mask[WAIT] else int(np.flatnonzero(point.mask)[0])
        if self.frame is not None:
            self._seat.script.append(action)  # replayed by the frame's next call (`_framed`)
        elif decisions := point.decisions(action, "rl"):
            self.sim.apply(decisions)
        else:
            self._waited = (self.sim.now, len(self.sim.running))
        self._decisions += 1
        reward = self._advance()
        terminated = self._point is None
        truncated = not terminated and self._decisions >= self.max_decisions
        if terminated or truncated:  # a truncated episode's metrics cover only the jobs that finished
            info["metrics"] = self.sim.metrics() | {"truncated": truncated}
        return self._obs(), reward, terminated, truncated, info

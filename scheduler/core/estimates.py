"""Start estimates by the rules that decide: replay the present forward under the active policy, in the simulator.

A pending job's start estimate is when the simulator, started from the cluster as it is now (`scheduler.core.replay`'s
`Present`: the running jobs on their GPUs with their work left, the queue in its order arriving at t=0), with
the active policy itself and the rules every caller applies around it (priorities, reservations, the tenancy frame,
dependencies and arrays, known outages), starts it. So a backfilled job is estimated as backfilled, a shortest-first
policy's order is the estimates' order, and a job the rules never let run gets no time: the replay ends with it still
pending and nothing left to happen, and its estimate says so, with the last reason the replay gave it (as data).

What the replay assumes (the estimate's `basis` says it): **arrivals like the last hour's** (`expected_arrivals`: the
jobs submitted in the last `ARRIVALS_WINDOW_S` arrive again, as submitted, over the next as many seconds, and nothing
after; without them, nothing new arrives, and a later job a policy prefers, shorter or newer, overtakes every
estimate it passes: under tiresias, gittins and sjf that was most of the misses); **durations as estimated** (every
job runs its `duration_s`, less the work done; no noise: a user's wrong estimate moves every start behind it); the
contention model predicts rates as it does for the controller; admission is the simulator's on arrival (an elastic
job whose submitted size the cluster cannot hold is replayed at the largest size it accepts that it can:
`scheduler.core.admission.elastic_admission`).

What comes along with the state, and what does not:

* carried: the running jobs' placements, work left, attained service (Tiresias), what is left of their time limits
  and their teams; each pending job's work left, attained service and how long it has queued (`queued_since`, which
  starvation rules and reservations read), in queue order; priorities and preemptibility (in the specs); the teams
  (quotas, borrowing limits, and their decayed fair-share usage); the reservation rule; dependencies (a dependency
  on a job already ended and met is dropped; on a running or pending job, it is replayed); arrays' running limits;
  outages in effect or scheduled (shifted to the replay's clock), with the fault rule.
* not carried: a policy's private state beyond the above (the replay runs a fresh policy: Tiresias' queue
  demotions restart from the attained service, an RL agent's recurrent state if any); the tenancy frame's reclaim
  bookkeeping of the current instant; an elastic run's history (it runs on at its current size, its work counted in
  that size's seconds); jobs held by their owner (not in the queue: no estimate), retry back-offs.

**Bounded cost**: the replay stops at `Bounds.horizon_s` of simulated time and after `Bounds.max_events` events; it
replays at most `Bounds.max_jobs` pending jobs (the first in queue order); a job not started by then is "not within
the bounds" (`Outlook.BEYOND`), never a guess. `track` stops the replay as soon as the jobs asked about are settled.

Reasons are data (`scheduler.core.reasons.Reason`); `Estimate.text` is the one place their words are put together.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from scheduler.core.decisions import Decision, Policy, Wait
from scheduler.core.dependencies import readiness
from scheduler.core.model import Job, JobPhase, JobSpec
from scheduler.core.reasons import Code, Reason, duration_words
from scheduler.core.replay import Present, simulator
from scheduler.core.simulator import Simulator

# How far back the arrivals a replay repeats reach, and so how far ahead they arrive (`expected_arrivals`). Chosen on
# the development windows (`benchmarks/estimates.py --dev`: Philly's first three quarters, synthetic seeds training
# draws), among 0.5, 1, 2 and 4 hours.
ARRIVALS_WINDOW_S = 3600.0


class Outlook(StrEnum):
    STARTS = "starts"  # at `start_s` seconds from now, if arrivals go as assumed
    NEVER = "never"  # the replay ended with it pending and nothing left to happen: the rules never start it
    BEYOND = "beyond"  # not started within the replay's bounds (`bound` says which)


@dataclass(frozen=True, slots=True)
class Estimate:
    outlook: Outlook
    start_s: float | None = None  # STARTS: seconds from now
    why: Reason | None = None  # NEVER: the last reason the replay gave it (None: the policy gave none)
    bound: str | None = None  # BEYOND: "horizon", "events" or "queue"
    bound_s: float | None = None  # BEYOND: the simulated time the replay reached

    @property
    def text(self) -> str:
        """The estimate in a user's words (the one place they are made)."""
        if self.outlook is Outlook.STARTS:
            assert self.start_s is not None
            return "starts now" if self.start_s <= 0 else f"starts in about {duration_words(self.start_s)}"
        if self.outlook is Outlook.NEVER:
            why = self.why.text if self.why is not None else "the policy gives no reason"
            return f"never starts under the current rules and cluster ({why})"
        if self.bound == "queue":
            return "not estimated: it is past the jobs the replay simulates in queue order"
        if self.bound == "events":
            return (f"not within the replay's event budget (it reached {duration_words(self.bound_s or 0.0)} "
                    "from now)")
        return f"not within {duration_words(self.bound_s or 0.0)} from now"


@dataclass(frozen=True)
class Bounds:
    horizon_s: float = 7 * 86400.0  # simulated time
    max_events: int = 200_000  # instants replayed (each one event or more)
    max_jobs: int = 2_000  # pending jobs replayed (the first in queue order)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.horizon_s) and self.horizon_s > 0):
            raise ValueError(f"horizon_s must be a positive number of seconds, got {self.horizon_s}")
        if self.max_events < 1:
            raise ValueError(f"max_events must be at least 1, got {self.max_events}")
        if self.max_jobs < 1:
            raise ValueError(f"max_jobs must be at least 1, got {self.max_jobs}")


@dataclass(frozen=True)
class Estimates:
    """Each pending job's estimate by its key, how they were made (`basis`), and what the replay cost."""

    by_key: dict[Hashable, Estimate]
    basis: str
    reached_s: float  # the simulated time the replay reached
    events: int  # instants replayed (each one event or more)
    wall_s: float


class _Replay(Simulator):
    """The simulator, keeping each wait's reason as data (the simulator keeps its words)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.whys: dict[int, Reason] = {}

    def apply(self, decisions: Sequence[Decision]) -> bool:
        for d in decisions:
            if isinstance(d, Wait):
                self.whys[d.job_id] = d.why
        return super().apply(decisions)

    def blocked_why(self, job: Job) -> Reason | None:
        """Why a job held back by its dependencies waits, as data."""
        return readiness(job.spec.depends_on, self._outcome).reason


def expected_arrivals(recent: Sequence[tuple[float, JobSpec]], now: float,
                      window_s: float = ARRIVALS_WINDOW_S) -> list[JobSpec]:
    """The arrivals a replay starting at `now` assumes: each job submitted in the last `window_s` seconds (`recent`:
    (submitted at, spec), on the same clock as `now`) arrives again `window_s` after it did, on the replay's clock
    (0 = now), in submission order. Only their size, model, duration, priority and team matter: they depend on
    nothing, and nothing depends on them."""
    lo = now - window_s
    made = [replace(spec, name=f"expected-{k}", submit_s=at - lo, depends_on=(), array=None)
            for k, (at, spec) in enumerate(sorted(recent, key=lambda r: r[0])) if lo < at <= now]
    return made


def estimate(present: Present, policy: Policy, bounds: Bounds | None = None,
             track: Collection[Hashable] | None = None, arrivals: Sequence[JobSpec] = ()) -> Estimates:
    """Replay `present` under `policy` (a fresh instance: the replay changes its state) and estimate each pending
    job's start (see the module docstring). `track`: only these keys' estimates are wanted; the replay stops once they
    are settled (the others may then read BEYOND, bound "events"). `arrivals`: jobs arriving during the replay
    (`expected_arrivals`; their `submit_s` on its clock), which take their turn but get no estimate. ValueError for an
    inconsistent present (the simulator's own checks: overlapping placements, a cycle of dependencies)."""
    wall0 = time.perf_counter()
    bounds = bounds or Bounds()
    kept, left_out = present.pending[:bounds.max_jobs], present.pending[bounds.max_jobs:]
    sim = simulator(present, kept, policy, arrivals, cls=_Replay)
    assert isinstance(sim, _Replay)
    jobs = sim.jobs[:len(kept)]
    watched = {i for i, w in enumerate(kept) if track is None or w.key in track}
    bound: str | None = None
    steps = 0  # instants at which something happened (each one event or more)
    while True:
        watched = {i for i in watched if jobs[i].first_start_s is None and jobs[i].state is JobPhase.PENDING}
        if not watched:
            break
        if sim.done:  # nothing left to happen: what still waits never starts
            break
        if sim.next_event_time() > bounds.horizon_s:
            bound = "horizon"
            break
        if steps >= bounds.max_events:
            bound = "events"
            break
        sim.advance()
        sim.schedule()
        steps += 1
    reached = bounds.horizon_s if bound == "horizon" else sim.now
    out: dict[Hashable, Estimate] = {}
    for w, job in zip(kept, jobs, strict=True):
        out[w.key] = _outcome(sim, job, bound or "events", reached)
    for w in left_out:
        out[w.key] = Estimate(Outlook.BEYOND, bound="queue")
    return Estimates(out, _basis(present, policy, bounds, len(left_out), len(arrivals)), reached, steps,
                     time.perf_counter() - wall0)


def _outcome(sim: _Replay, job: Job, bound: str, reached: float) -> Estimate:
    if job.first_start_s is not None:
        return Estimate(Outlook.STARTS, start_s=max(job.first_start_s, 0.0))
    if job.state is JobPhase.REJECTED:
        return Estimate(Outlook.NEVER, why=Reason(Code.REJECTED, {"text": job.reject_reason}))
    if job.state is JobPhase.CANCELLED:
        return Estimate(Outlook.NEVER, why=sim.blocked_why(job))
    if sim.done:
        if job.id in sim.blocked:
            return Estimate(Outlook.NEVER, why=sim.blocked_why(job))
        why = sim.whys.get(job.id)
        words = sim.pending_reasons.get(job.id)  # (a reason the simulator keeps only in words: quoted, not read)
        if why is None and words is not None:
            why = Reason(Code.POLICY, {"text": words})
        return Estimate(Outlook.NEVER, why=why)
    return Estimate(Outlook.BEYOND, bound=bound, bound_s=reached)


def _basis(present: Present, policy: Policy, bounds: Bounds, left_out: int, arriving: int) -> str:
    window = duration_words(ARRIVALS_WINDOW_S)
    coming = (f"the {arriving} job(s) submitted in the last {window} arriving again over the next {window}"
              if arriving else "nothing new arriving")
    text = (f"replaying {len(present.running)} running and {len(present.pending) - left_out} pending job(s) under "
            f"{policy.name} in the simulator, as the rules decide (priorities"
            + (", teams" if present.teams is not None else "")
            + (", reservations" if present.reservations is not None else "")
            + f", dependencies), with durations as estimated and {coming}; "
            f"bounded at {duration_words(bounds.horizon_s)} and {bounds.max_events} events")
    if left_out:
        text += f"; {left_out} pending job(s) past the first {bounds.max_jobs} in queue order are not estimated"
    return text


__all__ = ["ARRIVALS_WINDOW_S", "Bounds", "Estimate", "Estimates", "Outlook", "estimate", "expected_arrivals"]

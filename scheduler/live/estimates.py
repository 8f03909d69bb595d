"""Start estimates in the live service: the core's replay (`scheduler.core.estimates`) of the store's present under
the active policy, one replay shared by every request.

**The present** is read by what-if's reader (`scheduler.live.snapshot`) and carried as `scheduler.core.replay.Present`:

* the cluster model the controller builds (every node as recorded, on the recorded fabric); GPUs closed now (a down
  node's, a drained node's, a faulty one's) stay closed for the whole replay, the runs on drained and faulty ones
  keep going;
* the running jobs on their GPUs, with their work left (an emulated job's by its reported progress; a command job's
  estimate less what its run has done), attained service, what is left of their time limits, their teams; a run past
  its predicted end counts as ending within `OVERDUE_FLOOR_S` (it ends some time: not at once, at every look); a run
  on a node that is down is queued again first, as the controller requeues it;
* the pending jobs not held, in queue order, with their work left, attained service and time queued; priorities and
  preemptibility, teams, arrays' running limits and dependencies in their specs (a dependency met by a job that
  ended is dropped; one that can never be met is a `never` without a replay; a job waiting on a held job is not
  estimated, as a held job is not);
* the teams' quotas and borrowing limits with their fair-share usage integrated from the allocation history (as a
  freshly started controller does), the reservation rule and the MPS rule of `corral serve`;
* the last hour's submissions (the latest `snapshot.MAX_RECENT`), arriving again over the next hour
  (`arrivals_of`, `scheduler.core.estimates.expected_arrivals`).

Not carried (the basis says so): a policy's private state (the replay asks a fresh instance), retry back-offs, the
policy's topology holds beyond what the replayed policy decides again, an elastic run's history.

**Bounded cost, shared**: `LiveEstimator.current()` returns the last replay while the store's state is unchanged
(`state_version`: a few indexed aggregates) and it is younger than `refresh_s`; else one thread replays (at most
`Bounds`' jobs, events and horizon) while the others wait for it, or, if a replay exists already, answer from it.
So however fast anyone changes the state and reads pages, a server process runs at most one replay at a time: its
cost is one thread's, never one per request. A start estimate is kept as an instant: it reads `start_s - age` later on.

This module takes `make_policy` as an argument rather than importing the policies package (the import arrows).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from scheduler.core.decisions import Policy
from scheduler.core.dependencies import Condition, Dependency, holds
from scheduler.core.estimates import Bounds, Estimate, Outlook, estimate, expected_arrivals
from scheduler.core.generic import known_profiles
from scheduler.core.model import JobSpec, Placement, SpecError
from scheduler.core.outages import OnFault, Outage
from scheduler.core.reasons import Code, Reason
from scheduler.core.replay import Present, Waiting
from scheduler.core.reservations import ReservationRule
from scheduler.core.simulator import Placed, SimulationError
from scheduler.core.state import PlacementError
from scheduler.core.tenancy import DEFAULT_HALF_LIFE_S, Team, Teams
from scheduler.core.workloads import ModelProfile
from scheduler.live.explain import OVERDUE_FLOOR_S
from scheduler.live.job_states import outcome
from scheduler.live.snapshot import LiveJob, Snapshot, dependencies, framed, live_spec, snapshot
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import JobEvent, Node
from scheduler.live.whatif import DEFAULT_POLICY  # the controller's default while the store names none

log = logging.getLogger(__name__)

# What one live replay may cost at most: the first 500 pending jobs in queue order, 50,000 instants, a week ahead.
# Under rl:default, 500 pending 1-GPU jobs on 16 GPUs replay in about 10 s (scheduler.live.whatif's figures); the
# heuristics in milliseconds (docs/estimates.md).
DEFAULT_BOUNDS = Bounds(horizon_s=7 * 86400.0, max_events=50_000, max_jobs=500)
REFRESH_S = 5.0  # the longest a replay is reused while the store's state does not change

MakePolicy = Callable[[str, int], Policy]


@dataclass(frozen=True)
class LiveEstimates:
    """Each pending job's estimate by its id, as of `at` (wall clock), and how they were made (`basis`)."""

    at: float
    by_job: Mapping[int, Estimate]
    basis: str
    policy: str | None = None
    wall_s: float = 0.0
    version: tuple[Any, ...] = ()

    def get(self, job_id: int, now: float | None = None) -> Estimate | None:
        """The job's estimate now (a start counted from now), None if it has none (held, or not pending then)."""
        est = self.by_job.get(job_id)
        if est is None or est.outlook is not Outlook.STARTS or est.start_s is None:
            return est
        age = max(0.0, (time.time() if now is None else now) - self.at)
        return Estimate(Outlook.STARTS, start_s=max(0.0, est.start_s - age))

    def fields(self, job_id: int, now: float | None = None) -> dict[str, Any]:
        """The API's `start_estimate_*` fields of a pending job."""
        est = self.get(job_id, now)
        why = est.why if est is not None and est.outlook is Outlook.NEVER else None
        return {
            "start_estimate_s": est.start_s if est is not None and est.outlook is Outlook.STARTS else None,
            "start_estimate_outlook": est.outlook.value if est is not None else None,
            "start_estimate_code": why.code.value if why is not None else None,
            "start_estimate_params": dict(why.params) if why is not None else None,
            "start_estimate_text": est.text if est is not None else None,
            "start_estimate_basis": self.basis,
        }


NO_FIELDS: dict[str, Any] = {"start_estimate_s": None, "start_estimate_outlook": None, "start_estimate_code": None,
                             "start_estimate_params": None, "start_estimate_text": None, "start_estimate_basis": None}


# ---- the present -------------------------------------------------------------------------------------------------


@dataclass
class _Carried:
    present: Present
    settled: dict[int, Estimate] = field(default_factory=dict)  # decided without a replay (a dependency never met)
    notes: list[str] = field(default_factory=list)


def carry(snap: Snapshot, profiles: Mapping[str, ModelProfile], *, reservations: ReservationRule | None = None,
          mps_one_user: bool = False, half_life_s: float = DEFAULT_HALF_LIFE_S) -> _Carried:
    """`snap` as the core's replay takes it (see the module docstring). ValueError for a model the catalog does not
    know or a preset no longer known (the replay cannot be built: no estimates)."""
    cluster = snap.cluster()
    model_gpu = snap.model_gpus(cluster)
    notes: list[str] = []
    outages = [Outage(0.0, gpu=model_gpu[g], reason=why) for g, why in sorted(snap.closed.items()) if g in model_gpu]
    down = snap.down_gpus()
    if down:
        nodes = sum(not n.alive for n in snap.nodes)
        notes.append(f"the {len(down)} GPU(s) of {nodes} node(s) that are down stay closed (a job only they could hold "
                     "never starts in the replay: it waits for them to come back)")
    if len(outages) > len(down):
        notes.append(f"{len(outages) - len(down)} GPU(s) drained or faulty now stay closed")
    unknown = sorted({j.model for j in [*snap.running, *snap.pending]} - set(profiles))
    if unknown:
        raise ValueError(f"live jobs use models the catalog does not know: {', '.join(unknown)}")
    prof = dict(profiles)

    def spec_of(j: LiveJob, work: float, deps: tuple[Dependency, ...] = ()) -> JobSpec:
        return _spec(j, work, prof, deps)

    running: list[Placed] = []
    requeued: list[LiveJob] = []
    overdue = 0
    for j in snap.running:
        gpus = tuple(model_gpu.get(g, -1) for g in j.gpus)
        if not gpus or -1 in gpus or not down.isdisjoint(j.gpus):
            requeued.append(j)  # on a node that is down: the controller requeues it
            continue
        work = max(j.work_left, OVERDUE_FLOOR_S) if j.overdue else j.work_left
        overdue += j.overdue
        running.append(Placed(spec_of(j, work), Placement(tuple(sorted(gpus)), j.share), work, j.attained_gpu_s))
    if overdue:
        notes.append(f"{overdue} run(s) past their predicted end counted as ending within {OVERDUE_FLOOR_S:.0f} s")
    if requeued:
        notes.append(f"{len(requeued)} run(s) on nodes that are down queued again first")
    queue = [*requeued, *snap.pending]
    status = _dependency_status(snap, queue)
    settled = {i: e for i, e in status.items() if e is not None}
    left_out = sum(e is None for e in status.values())
    if left_out:
        notes.append(f"{left_out} job(s) waiting on a held job not estimated")
    pending: list[Waiting] = []
    now = snap.taken_at
    replayed = {j.id for j in queue if j.id not in status} | {j.id for j in snap.running}
    for j in queue:
        if j.id in status:
            continue
        deps = tuple(d for d in dependencies(j) if int(d.job) in replayed)  # the others are met (see _status)
        pending.append(Waiting(j.id, spec_of(j, j.work_left, deps), j.attained_gpu_s,
                               max(0.0, now - j.queued_since) if j.queued_since else 0.0))
    teams = Teams({n: Team(n, quota, borrow) for n, quota, borrow in snap.teams}, half_life_s) \
        if framed(snap.teams) else None
    present = Present(cluster, running, pending, teams=teams, usage=snap.usage if teams is not None else None,
                      reservations=reservations, outages=outages, on_fault=OnFault.KEEP, profiles=prof,
                      mps_one_user=mps_one_user)
    return _Carried(present, settled, notes)


def _spec(j: LiveJob, work: float, profiles: dict[str, ModelProfile], deps: tuple[Dependency, ...] = ()) -> JobSpec:
    """A live job as the replay takes it, with `work` seconds to run and the dependencies `deps`."""
    return live_spec(str(j.id), j.model, j.num_gpus, work, profiles, user=j.user, priority=j.priority,
                     slo_ms=j.slo_ms, preemptible=j.preemptible, time_limit_s=j.time_limit_s, elastic=j.elastic,
                     team=j.team, depends_on=deps, array=j.array, array_max_running=j.array_max_running,
                     constraints=j.constraints)


def arrivals_of(snap: Snapshot, profiles: Mapping[str, ModelProfile]) -> list[JobSpec]:
    """The arrivals the replay assumes (`scheduler.core.estimates.expected_arrivals`): the last hour's submissions, as
    submitted (size, model, estimated duration, priority, team, constraints), arriving again."""
    prof = dict(profiles)
    recent = [(at, _spec(j, j.work_left, prof)) for at, j in snap.recent if j.model in prof]
    return expected_arrivals(recent, snap.taken_at)


def _dependency_status(snap: Snapshot, queue: list[LiveJob]) -> dict[int, Estimate | None]:
    """The queued jobs the replay does not take: those whose dependency can never be met (a `never` estimate, as the
    controller ends them) and those waiting on a job outside the replay that has not ended (None: a held job's
    dependents are not estimated). A dependency met by a job that ended is dropped."""
    live = {j.id for j in queue} | {j.id for j in snap.running}
    out: dict[int, Estimate | None] = {}
    changed = True
    while changed:  # a job left out leaves its own dependents out too
        changed = False
        for j in queue:
            if j.id in out:
                continue
            for dep, cond in j.depends_on:
                if dep in out and out[dep] is None:
                    out[j.id] = None
                elif dep in out or dep in snap.ended:
                    # Ended, or will be ended by the controller (a `never`: it ends without succeeding).
                    ended = outcome(snap.ended[dep]) if dep in snap.ended else outcome("cancelled")
                    if holds(Condition(cond), ended) is False:
                        out[j.id] = Estimate(Outlook.NEVER, why=Reason(Code.DEPENDENCY_NEVER, {
                            "on": f"job {dep}", "condition": cond, "succeeded": dep in snap.ended
                            and snap.ended[dep] == "succeeded"}))
                elif dep not in live:
                    out[j.id] = None  # held, being cancelled, or unknown
                if j.id in out:
                    changed = True
                    break
    return out


# ---- the replay ----------------------------------------------------------------------------------------------------


def live_estimates(snap: Snapshot, make_policy: MakePolicy, *, default_policy: str = DEFAULT_POLICY,
                   reservations: ReservationRule | None = None, mps_one_user: bool = False,
                   half_life_s: float = DEFAULT_HALF_LIFE_S, bounds: Bounds = DEFAULT_BOUNDS,
                   profiles: Mapping[str, ModelProfile] | None = None) -> LiveEstimates:
    """One replay of `snap` under its active policy (a fresh instance from `make_policy(name, 0)`). Never raises for
    the live state: a present that cannot be replayed gives no estimates, and the basis says why."""
    name = snap.active_policy or default_policy
    wall0 = time.perf_counter()
    if not snap.nodes:
        return LiveEstimates(snap.taken_at, {}, "no estimate: no live nodes are registered", name)
    try:
        prof = profiles if profiles is not None else known_profiles()
        carried = carry(snap, prof, reservations=reservations, mps_one_user=mps_one_user, half_life_s=half_life_s)
        est = estimate(carried.present, make_policy(name, 0), bounds, arrivals=arrivals_of(snap, prof))
    except (SimulationError, PlacementError, SpecError, ValueError) as exc:
        log.warning("start estimates: the present cannot be replayed: %s", exc)
        return LiveEstimates(snap.taken_at, {}, f"no estimate: the present cannot be replayed ({exc})", name)
    except Exception:  # an estimate is advice: a bug in a replay must not fail the job pages that show it
        log.exception("start estimates: the replay failed")
        return LiveEstimates(snap.taken_at, {}, "no estimate: the replay failed (the server's log says why)", name)
    by_job: dict[int, Estimate] = {int(k): e for k, e in est.by_key.items()}  # type: ignore[call-overload]
    by_job.update(carried.settled)
    basis = est.basis
    if carried.notes:
        basis += "; " + "; ".join(carried.notes)
    basis += ("; not carried: the policy's private state (a fresh one replays), retry back-offs, held jobs, "
              "an elastic run's history")
    return LiveEstimates(snap.taken_at, by_job, basis, name, time.perf_counter() - wall0)


def state_version(s: Session) -> tuple[Any, ...]:
    """What changes when the present the replay reads changes (cheap: indexed maxima and a few small tables): every
    state change of a job writes an event, a submission a job, and the policy, the teams and the nodes (up, drained)
    are read whole. Progress is not in it, nor the GPUs' health: node agents push it every few seconds, which would
    make every request replay; `refresh_s` bounds how long a replay misses either."""
    return (s.scalar(select(func.max(JobEvent.id))), s.scalar(select(func.max(JobRow.id))),
            s.scalar(select(func.max(JobRow.changed_at))), q.active_policy(s), q.team_quotas(s),
            tuple(tuple(r) for r in s.execute(select(Node.id, Node.alive, Node.drained_at))))


class LiveEstimator:
    """The store's start estimates, one replay shared by every request (see the module docstring). Thread-safe."""

    def __init__(self, store: Any, make_policy: MakePolicy, *, default_policy: str = DEFAULT_POLICY,
                 reservations: ReservationRule | None = None, mps_one_user: bool = False,
                 half_life_s: float = DEFAULT_HALF_LIFE_S, bounds: Bounds = DEFAULT_BOUNDS,
                 refresh_s: float = REFRESH_S, clock: Callable[[], float] = time.monotonic) -> None:
        if not refresh_s >= 0:
            raise ValueError(f"refresh_s must be >= 0, got {refresh_s}")
        self.store = store
        self.make_policy = make_policy
        self.default_policy = default_policy
        self.reservations = reservations
        self.mps_one_user = mps_one_user
        self.half_life_s = half_life_s
        self.bounds = bounds
        self.refresh_s = refresh_s
        self.clock = clock
        self.replays = 0  # how many replays ran (the cache's cost, for tests and logs)
        self._last: LiveEstimates | None = None
        self._made_at = 0.0  # on `clock`
        self._lock = threading.Lock()  # guards the fields above
        self._replaying = threading.Lock()  # held by the one thread replaying

    def current(self) -> LiveEstimates:
        """The estimates of the store as it is now, at most `refresh_s` old and of the present state."""
        with self.store.session() as s:
            version = state_version(s)
        with self._lock:
            last, made_at = self._last, self._made_at
        if last is not None and last.version == version and self.clock() - made_at < self.refresh_s:
            return last
        if last is not None and not self._replaying.acquire(blocking=False):
            return last  # another thread is replaying: this answer may be a moment old, never slow
        if last is None:
            self._replaying.acquire()  # the first replay: wait for it (another thread may be making it)
            with self._lock:
                if self._last is not None and self._last.version == version:
                    self._replaying.release()
                    return self._last
        try:
            est = live_estimates(snapshot(self.store, half_life_s=self.half_life_s), self.make_policy,
                                 default_policy=self.default_policy, reservations=self.reservations,
                                 mps_one_user=self.mps_one_user, half_life_s=self.half_life_s, bounds=self.bounds)
            est = LiveEstimates(est.at, est.by_job, est.basis, est.policy, est.wall_s, version)
            with self._lock:
                self._last, self._made_at = est, self.clock()
                self.replays += 1
            return est
        finally:
            self._replaying.release()

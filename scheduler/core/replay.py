"""A replay from the present: the cluster as it is now (its running jobs on their GPUs with the work they have left,
and its queue), carried into a new simulation that starts there (t=0 is now), with later arrivals on top if any.

One way to carry the present, for everything that replays it: start estimates (`scheduler.core.estimates`, which
replay the queue under the active policy) and the guard of learned policies (`scheduler.core.guard`, which replays a
window of arrivals under two policies from the same present). A present is taken

* from what a policy sees (`present`: its `ClusterView` and queue; all the guard has), or
* from a running simulator (`present_of`: also its teams and their fair-share usage, its reservation rule, its
  outages and its jobs held back by dependencies; the estimates benchmark's).

Carried for every running job: its placement, its work left (brought up to now at its present rate; an elastic run's
in its current size's seconds: it runs on at that size), what is left of its time limit and its attained service.
For every pending job, in queue order: its work left, its attained service and how long it has queued (which
starvation rules and reservations read); all arrive at t=0. Not carried: a policy's private state (a replay asks a
fresh policy), the tenancy frame's bookkeeping of the current instant, an elastic run's history, jobs held by their
owner and retry back-offs.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduler.core.contention import ContentionParams
from scheduler.core.decisions import Policy
from scheduler.core.dependencies import Condition, Dependency
from scheduler.core.heap import heap_frozen
from scheduler.core.model import Cluster, Job, JobPhase, JobSpec
from scheduler.core.outages import OnFault, Outage
from scheduler.core.reservations import ReservationFrame, ReservationRule
from scheduler.core.runner import PolicyFrame
from scheduler.core.sim_result import Placed
from scheduler.core.simulator import SimulationError, Simulator
from scheduler.core.state import ClusterView
from scheduler.core.tenancy import Teams, TenancyFrame
from scheduler.core.workloads import ModelProfile

MIN_WORK_S = 1.0  # a job (almost) done still has this much left: it has not finished yet


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pending job as the replay takes it: its spec (its `duration_s`: the work it has left), its attained service,
    how long it has queued so far, and the caller's key for it (a store id, a simulator's job id)."""

    key: Hashable
    spec: JobSpec
    attained_gpu_s: float = 0.0
    queued_for_s: float = 0.0


@dataclass
class Present:
    """The state a replay starts from. `pending` in queue order; `usage`: the teams' decayed fair-share usage."""

    cluster: Cluster
    running: list[Placed]
    pending: list[Waiting]
    teams: Teams | None = None
    usage: Mapping[str, float] | None = None
    reservations: ReservationRule | None = None
    outages: list[Outage] = field(default_factory=list)
    on_fault: OnFault = OnFault.REQUEUE
    profiles: Mapping[str, ModelProfile] | None = None
    contention: bool = True
    params: ContentionParams | None = None
    preempt_overhead_s: float = 30.0
    mps_one_user: bool = False


def running_now(view: ClusterView, job: Job, now: float) -> Placed:
    """A running job as a replay starting at `now` takes it."""
    assert job.placement is not None
    # Its work left now: progress is brought up to date only when rates change.
    work = job.work_left - max(0.0, now - job.last_update) * job.rate
    work = max(work / job.speedup, MIN_WORK_S)  # an elastic run's work in its current size's seconds
    limit = job.spec.time_limit_s
    if limit is not None and job.start_s is not None:
        limit = max(MIN_WORK_S, limit - (now - job.start_s))
    spec = replace(job.spec, submit_s=0.0, duration_s=work, time_limit_s=limit, depends_on=())
    return Placed(spec, job.placement, work, view.attained_gpu_s(job))


def waiting_now(job: Job, now: float, depends_on: tuple[Dependency, ...] = ()) -> Waiting:
    """A pending job as a replay starting at `now` takes it (keyed by its id), waiting on `depends_on` still."""
    spec = replace(job.spec, submit_s=0.0, duration_s=max(job.work_left, MIN_WORK_S), depends_on=depends_on)
    return Waiting(job.id, spec, job.attained_gpu_s, max(0.0, now - job.queued_since))


def present(view: ClusterView, queue: Collection[Job], now: float) -> Present:
    """The present a policy sees at `now`: its view's running jobs and its queue (no teams, reservations or outages:
    a policy is not shown them)."""
    return Present(view.cluster, [running_now(view, j, now) for j in view.running.values()],
                   [waiting_now(j, now) for j in queue])


def present_of(sim: Simulator) -> Present:
    """The present of a running simulator, to replay from its `now`: what the live controller's state gives a
    replay, taken from a simulation instead. Keys are `sim`'s job ids."""
    now = sim.now
    queued = [*sim.pending.values(), *sorted(sim.blocked.values(), key=lambda j: (j.spec.submit_s, j.id))]
    frame = sim.policy
    teams = usage = None
    if isinstance(frame, TenancyFrame):
        teams, usage = frame.teams, dict(frame.share.usage)
    outages = [replace(o, start_s=max(o.start_s - now, 0.0), end_s=o.end_s - now)
               for o in sim.outages if o.end_s > now]
    return Present(sim.cluster, [running_now(sim.view, j, now) for j in sim.running.values()],
                   [waiting_now(j, now, tuple(d for d in j.spec.depends_on if not _met(sim, d))) for j in queued],
                   teams, usage, _rule_of(frame), outages, sim.on_fault, sim.profiles, sim._contention_on,
                   sim._params, sim.preempt_overhead_s, sim.mps_one_user)


def _met(sim: Simulator, dep: Dependency) -> bool:
    """A dependency on a job that has ended and met it (it need not come along)."""
    job = sim.jobs[sim._by_name[dep.job]] if dep.job in sim._by_name else None
    if job is None or job.state in (JobPhase.PENDING, JobPhase.RUNNING):
        return False
    ok = job.state is JobPhase.DONE
    return dep.condition is Condition.AFTERANY or ok == (dep.condition is Condition.AFTEROK)


def _rule_of(policy: Policy | None) -> ReservationRule | None:
    """The reservation rule among a simulator's frames around its policy (None: none)."""
    while isinstance(policy, PolicyFrame):
        if isinstance(policy, ReservationFrame):
            return policy.rule
        policy = policy.inner
    return None


def simulator(present: Present, pending: Sequence[Waiting], policy: Policy, arrivals: Sequence[JobSpec] = (), *,
              cls: type[Simulator] = Simulator) -> Simulator:
    """A simulator (of class `cls`) starting from `present` with `pending` (some of its pending jobs, in queue order)
    and `arrivals` on top (their `submit_s` already on the replay's clock), under `policy` (a fresh instance: the
    replay changes its state). Its first `len(pending)` jobs are `pending`'s, then the arrivals'."""
    specs = [*(w.spec for w in pending), *arrivals]
    sim = cls(present.cluster, specs, policy, contention=present.contention, profiles=present.profiles,
              params=present.params, preempt_overhead_s=present.preempt_overhead_s, initial=present.running,
              teams=present.teams, outages=present.outages, on_fault=present.on_fault,
              reservations=present.reservations, mps_one_user=present.mps_one_user)
    if present.usage is not None and isinstance(sim.policy, TenancyFrame):
        for name, used in present.usage.items():
            if name in sim.policy.share.usage:
                sim.policy.share.usage[name] = used
    # The simulator takes the specs in submission order, stably: the pending all arrive at 0, first.
    for w, job in zip(pending, sim.jobs, strict=False):
        job.attained_gpu_s = w.attained_gpu_s
        job.queued_since = -w.queued_for_s
    return sim


MAX_JOBS = 5_000  # pending jobs and arrivals one `replay` carries at most (the queue's first): its cost is bounded


def replay(start: Present, at: float, arrivals: Sequence[JobSpec], policy: Policy,
           until: float = math.inf) -> list[Job]:
    """`policy` from `start` (taken at `at`), with `arrivals` (their submission times as they were, after `at`) on
    top, up to `until` seconds after the start (by then some jobs may not have ended: `projected_end` reads them).
    Returns the replay's own jobs (the pending ones, then the arrivals), as they stand at its end. SimulationError if
    the policy strands them."""
    later = [replace(s, submit_s=max(0.0, s.submit_s - at), depends_on=()) for s in arrivals]
    # Bounded by leaving out the queue's tail (never a running job: its GPUs would look free).
    pending = start.pending[:max(0, MAX_JOBS - len(later))]
    sim = simulator(start, pending, policy, later)
    with heap_frozen():
        while sim.next_event_time() <= until and sim.advance():
            sim.schedule()
            if sim.idle_forever():
                raise SimulationError(f"{getattr(policy, 'name', 'the policy')} left jobs queued on an idle cluster")
    return sim.jobs[:len(pending) + len(later)]


def projected_end(job: Job, at: float) -> float:
    """When a replay's job ends, seen at `at` (the replay's `until`): its end if it ended; a running job's at its rate
    then (`Job.last_update` may lie before `at`: nothing changed since); a waiting job's no sooner than its work left
    after `at`. What a replay cut short says of each job, without running it to the end."""
    if job.end_s is not None:
        return job.end_s
    if job.placement is not None and job.rate > 0:
        left = job.work_left - max(0.0, at - job.last_update) * job.rate
        return max(at, job.last_update) + max(0.0, left) / job.rate
    return at + job.work_left

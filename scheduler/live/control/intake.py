"""What users asked, taken in at every pass: submissions, cancels, changes of live jobs, holds, dependencies and
requeue requests. The API writes them to the store; this room reads them into memory and, for the ones that end or
move a job, carries them out through the life cycle."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from sqlalchemy import and_, bindparam, or_, select
from sqlalchemy.orm import Session, joinedload

from scheduler.core.admission import Refusal
from scheduler.core.dependencies import Outcome, readiness
from scheduler.core.model import Cluster, Job
from scheduler.core.reasons import Code, Reason
from scheduler.core.workloads import ModelProfile
from scheduler.live.control.memory import Memory
from scheduler.live.control.workers import Workers
from scheduler.live.job_states import outcome as job_outcome
from scheduler.live.lifecycle import LifeCycle
from scheduler.live.rows import admission_of, job_of, sized_down
from scheduler.live.store import queries
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import JobState as S

FULL_SYNC_S = 5.0  # a full scan of the pending jobs at least this often
# The API's changes of live jobs are read again for this long after they were made: the API stamps a change before its
# transaction ends (it also computes the job's answer, start estimate included), so on PostgreSQL a change can commit
# well after a pass read past its stamp. Reading one again changes nothing.
CHANGES_REREAD_S = 60.0

# The statements every pass runs, built once (building one costs as much as running it on SQLite).
_NEW_OR_CANCELLED = select(JobRow.id, JobRow.state).where(or_(
    and_(JobRow.state == S.PENDING, JobRow.id > bindparam("max_seen")),
    and_(JobRow.state == S.CANCELLED, JobRow.finished_at >= bindparam("since"))))
_CANCEL_REQUESTED = select(JobRow).where(JobRow.state == S.RUNNING, JobRow.cancel_requested.is_(True))
_ON_HOLD = select(JobRow.id, JobRow.held_by).where(JobRow.held_at.is_not(None), JobRow.state == S.PENDING)
_CHANGED = select(JobRow.id, JobRow.time_limit_s, JobRow.priority, JobRow.requeue_by).where(
    JobRow.changed_at >= bindparam("since"))


class Intake:
    def __init__(self, memory: Memory, lifecycle: LifeCycle, workers: Workers, cluster: Cluster,
                 profiles: Mapping[str, ModelProfile], now: float) -> None:
        self.m = memory
        self.lifecycle = lifecycle
        self.workers = workers
        self.cluster = cluster
        self.profiles = profiles
        self.max_seen = 0  # highest job id taken in
        self.last_sync = 0.0
        self.last_full_sync = 0.0
        # The API's changes of live jobs (`PATCH /jobs/ID`) are read from this time on: the state rebuilt from the
        # store holds the earlier ones. `changes` counts those taken in, for the policy's scene.
        self.changes_read = now
        self.changes = 0
        self.requeues: dict[int, str] = {}  # running job -> who asked to requeue it (`take_requeues`)
        self.arrays_pending = False  # some pending job is a task of an array with max_running

    def scene(self) -> tuple[object, ...]:
        return (self.changes,)

    def take_submissions(self, s: Session, now: float) -> None:
        """Take in new submissions and drop jobs the API cancelled while pending.

        Each pass reads only jobs above the highest id seen, and recent cancellations; every few seconds a full scan
        catches what that can miss (on PostgreSQL a smaller id can commit after a larger one)."""
        full = now - self.last_full_sync >= FULL_SYNC_S
        if full:
            self.last_full_sync = now
            ids = set(s.scalars(select(JobRow.id).where(JobRow.state == S.PENDING)))
            gone = [j for j in self.m.pending if j not in ids]
            self.max_seen = max(self.max_seen, *ids) if ids else self.max_seen
        else:  # one query for both: new submissions, and recent cancellations
            rows = s.execute(_NEW_OR_CANCELLED, {"max_seen": self.max_seen, "since": self.last_sync - 1.0}).all()
            gone = [i for i, st in rows if st == S.CANCELLED]
            ids = {i for i, st in rows if st == S.PENDING}
        new = ids - self.m.pending.keys()
        self.last_sync = now
        for job_id in gone:  # the API cancelled them (`lifecycle.cancel_pending`): memory follows
            self.m.dequeued(job_id)
        if not new:
            return
        fresh = s.scalars(select(JobRow).where(JobRow.id.in_(new)).options(joinedload(JobRow.user))
                          .order_by(JobRow.id)).all()
        in_order = True
        last = next(reversed(self.m.pending.values())).spec.submit_s if self.m.pending else float("-inf")
        for row in fresh:
            job = self.admit(s, row, now)
            if job is None:
                continue
            in_order = in_order and job.spec.submit_s >= last
            last = job.spec.submit_s
            self.m.book.append(job)
        if not in_order:  # the queue stays in submission order, as the simulator keeps it
            self.m.book.sort_queue()

    def admit(self, s: Session, row: JobRow, now: float, reject: bool = True) -> Job | None:
        """A pending job taken into the controller's queue: a new submission (`take_submissions`) or, when the
        controller recovers, every job the store holds pending (`Controller.recover`: the cluster may have changed
        while no controller ran, or it was accepted while no node was recorded alive). Admitted on the model
        (`rows.admission_of`): one it can never run fails with a `rejected` event saying why (None is returned); an
        elastic one whose stored size it cannot hold is stored at the largest size it can (`rows.sized_down`). The
        model holds every node of the cluster, down ones included (their GPUs are closed, not removed; on a shared Ray
        cluster every node the store records), so a node that is down for a restart fails no job. Without `reject`, one
        it can never run stays queued as it was (a recovery in this process after a node joined or was relabelled: an
        operator's change, perhaps undone soon, must not fail accepted jobs). Returns the job to queue."""
        self.max_seen = max(self.max_seen, row.id)
        verdict = admission_of(row, self.cluster, self.profiles)
        if isinstance(verdict, Refusal):
            if not reject:
                return job_of(row, self.profiles)
            self.lifecycle.to_terminal(s, row, S.FAILED, now, event="rejected",
                                       why=Reason(Code.REJECTED, {"text": verdict.why}))
            return None
        if verdict is not None:  # an elastic job larger than the model holds: at the largest size it can
            sized_down(s, row, verdict, self.m.contention, now)
        return job_of(row, self.profiles)

    def take_cancels(self, s: Session, now: float) -> None:
        """Stop the runs the API was asked to cancel (a pending job's cancel is the API's own move)."""
        if not self.m.running:
            return
        for row in s.scalars(_CANCEL_REQUESTED).all():
            if row.id in self.m.running:
                self.workers.stop(row.id)
                self.lifecycle.to_terminal(s, row, S.CANCELLED, now, event="cancelled",
                                           message="cancelled while running; workers stopped")

    def take_changes(self, s: Session, now: float) -> None:
        """Take in the time limits and priorities the API changed (`queries.change_job`) for the jobs in memory, and
        its requeue requests (for `take_requeues`). A running job's run is then held to its new limit (the time
        limits' step, just after), and the policy is asked again (a reservation backfills by time limits; priorities
        order the queue and decide preemptions). One indexed query a pass, over the changes of the last
        CHANGES_REREAD_S."""
        rows = s.execute(_CHANGED, {"since": self.changes_read - CHANGES_REREAD_S}).all()
        self.changes_read = now
        for job_id, limit, priority, requeue_by in rows:
            job = self.m.running.get(job_id) or self.m.pending.get(job_id)
            if job is not None and (job.spec.time_limit_s, job.spec.priority) != (limit, priority):
                self.m.book.respec(job, replace(job.spec, time_limit_s=limit, priority=priority))
                self.changes += 1
            if requeue_by is not None:
                self.requeues[job_id] = requeue_by

    def take_requeues(self, s: Session, now: float) -> None:
        """Checkpoint and requeue the runs the API was asked to (`queries.request_requeue`, Slurm's `scontrol
        requeue`): their workers get SIGTERM and the stop's grace period to save, and their jobs go back to the queue
        in their old places, spending no restart (held, if asked so: `read_holds` then keeps them waiting). A run
        that ended meanwhile is left ended. Either way the request is cleared."""
        requeues, self.requeues = self.requeues, {}
        for job_id, by in requeues.items():
            row = s.get(JobRow, job_id)
            if row is None or row.requeue_by is None:
                continue
            if row.state == S.RUNNING and job_id not in self.m.running:
                continue  # not adopted yet: asked again at the next pass
            row.requeue_by = None
            if row.state == S.RUNNING:
                self.workers.stop(job_id)
                self.lifecycle.to_pending(s, row, now, event="checkpointed", reason=Reason(Code.REQUEUED, {"by": by}),
                                          attempt=row.attempt)
            elif row.state != S.PENDING:  # ended first: a hold asked with the requeue has nothing left to hold
                row.held_at = row.held_by = None

    def read_holds(self, s: Session) -> set[int]:
        """The pending jobs their owners or admins hold (`queries.hold`): they wait, in their place, saying who holds
        them, until released. One indexed query a pass while jobs are pending. Returns the jobs held or released since
        the last pass: their reasons are given anew (the API wrote its own). A hold that lands while this pass places
        the job is caught by the placement's conditional update (`lifecycle.claim`)."""
        held = {i: by for i, by in s.execute(_ON_HOLD) if i in self.m.pending} if self.m.pending else {}
        changed = held.keys() ^ self.m.gates.holds.keys()
        for job_id in changed:
            self.m.reasons.forget(job_id)
        self.m.gates.holds = {i: queries.held_reason(i, by or "?") for i, by in held.items()}
        for job_id, why in self.m.gates.holds.items():
            self.m.reasons.set(job_id, why)
        return set(changed)

    def resolve_dependencies(self, s: Session, now: float) -> None:
        """The pending jobs whose dependencies do not hold yet wait, saying for what; those whose never will are
        cancelled with the reason (Slurm's DependencyNeverSatisfied), and so, in the same pass, is every pending job
        that depended on one of those (a chain of 300 ends at once, not a level a pass). One query a pass for the
        other jobs' states, only while some pending job has dependencies. The same scan of the queue notes whether a
        task of a bounded array waits (the queue is throttled only then)."""
        dependent: list[Job] = []
        arrays = False
        for job in self.m.pending.values():
            if job.spec.depends_on:
                dependent.append(job)
            arrays = arrays or job.spec.array_max_running is not None
        self.arrays_pending = arrays
        if not dependent:
            self.m.gates.dependencies = {}
            return
        keys = {int(d.job) for job in dependent for d in job.spec.depends_on}
        found = s.execute(select(JobRow.id, JobRow.state).where(JobRow.id.in_(keys)))
        states: dict[int, str] = {i: st for i, st in found}

        def outcome(key: str) -> Outcome | None:
            state = states.get(int(key))
            return Outcome.FAILED if state is None else job_outcome(state)  # (a job gone: it cannot succeed)

        dependents: dict[int, list[Job]] = {}  # a job -> the pending jobs that depend on it
        for job in dependent:
            for d in job.spec.depends_on:
                dependents.setdefault(int(d.job), []).append(job)
        waiting: dict[int, Reason] = {}
        todo, cancelled = list(dependent), set()
        while todo:  # each job is looked at once, and again only when a job it depends on was cancelled just now
            job = todo.pop()
            if job.id in cancelled:
                continue
            ready = readiness(job.spec.depends_on, outcome)
            if ready.never:
                row = s.get(JobRow, job.id)
                if row is not None and row.state == S.PENDING:
                    self.lifecycle.to_terminal(s, row, S.CANCELLED, now, event="cancelled",
                                               message=f"cancelled: {ready.why}", why=ready.reason)
                    states[job.id] = S.CANCELLED
                    todo.extend(dependents.get(job.id, ()))
                cancelled.add(job.id)
                waiting.pop(job.id, None)
                self.m.dequeued(job.id)
            elif ready.ready:  # (looked at again: a job it waited for was cancelled just now, which it may run after)
                waiting.pop(job.id, None)
            else:
                assert ready.reason is not None  # (waiting: it says for what)
                waiting[job.id] = ready.reason
        for job_id, why in waiting.items():
            if job_id not in self.m.gates.holds:  # who holds it says more: it would wait after its dependencies too
                self.m.reasons.set(job_id, why)
        self.m.gates.dependencies = waiting

"""What the controller knows between passes: rebuilt from the store by `Controller.recover()`, emptied when it stands
by. The store is the truth; this is the copy the policy reads, kept in step by the life cycle
(`scheduler.live.lifecycle`), which calls `end_run`, `queued` and `dequeued` here."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import Table, bindparam, update
from sqlalchemy.orm import Session

from scheduler.core.book import Book
from scheduler.core.contention import ContentionModel, ContentionParams
from scheduler.core.model import Cluster, Job, Placement
from scheduler.core.progress import progress_rate
from scheduler.core.reasons import Reason
from scheduler.core.state import ClusterState
from scheduler.core.workloads import ModelProfile
from scheduler.live.control.workers import Workers
from scheduler.live.runs import JobStatus
from scheduler.live.slowdown import SlowdownLedger
from scheduler.live.store.models import Allocation
from scheduler.live.store.models import Job as JobRow


class PendingReasons:
    """Each pending job's reason as last written to the store, with the time the policy holds it until at the latest
    (a `Wait`'s `until`; None: not bounded, or not the policy's reason), stored beside it as `pending_until`. A reason
    set during a pass is written at its end (`write`), in one statement."""

    def __init__(self) -> None:
        self.said: dict[int, tuple[Reason, float | None]] = {}
        self.unwritten: dict[int, tuple[Reason, float | None]] = {}

    def set(self, job_id: int, reason: Reason, until: float | None = None) -> None:
        if self.said.get(job_id) != (reason, until):
            self.said[job_id] = self.unwritten[job_id] = (reason, until)

    def written(self, job_id: int, reason: Reason) -> None:
        """`reason` was written with the job's row (a move of the life cycle)."""
        self.said[job_id] = (reason, None)

    def forget(self, job_id: int) -> None:
        self.said.pop(job_id, None)

    def clear(self) -> None:
        self.said.clear()

    def write(self, s: Session, pending: Mapping[int, Job]) -> None:
        """The reasons that changed this pass, each with its `pending_until`, in one statement (a thousand jobs'
        reasons change at once when the cluster does), for the jobs still pending."""
        # A queue's jobs of one size and model share one reason object (`Placing.explain_waits`): its words and
        # parameters are made once per object, not once per job.
        columns: dict[int, tuple[str, str, dict[str, Any]]] = {}
        rows = []
        for i, (why, until) in self.unwritten.items():
            if i not in pending:
                continue
            made = columns.get(id(why))
            if made is None:
                made = columns[id(why)] = (why.text, why.code.value, dict(why.params))
            rows.append({"job": i, "why": made[0], "code": made[1], "params": made[2], "until": until})
        self.unwritten.clear()
        if rows:  # Core's executemany: the ORM's bulk update costs a millisecond more for the usual one or two rows
            jobs = cast(Table, JobRow.__table__)  # declared a FromClause; a mapped class's table is a Table
            s.execute(update(jobs).where(jobs.c.id == bindparam("job")).values(
                pending_reason=bindparam("why"), pending_code=bindparam("code"), pending_params=bindparam("params"),
                pending_until=bindparam("until")), rows)


class Gates:
    """The pending jobs held back from the policy, each gate with its own words: a retry's backoff (until when), the
    dependencies that do not hold yet, a user's or an admin's hold, an array's tasks beyond what it may run now. Every
    feature that holds jobs back is one gate here: the queue the policy is offered (`Controller._ready`), what makes it
    be asked again (`scene`) and the jobs whose reason is theirs to give (`all`) follow from this one list."""

    def __init__(self) -> None:
        self.backoff: dict[int, float] = {}  # retrying job -> until when its backoff holds it
        self.dependencies: dict[int, Reason] = {}  # job -> what its dependencies wait for
        self.holds: dict[int, Reason] = {}  # job its owner or an admin holds -> its reason
        self.throttled: set[int] = set()  # an array's tasks beyond what it may run now

    def all(self) -> tuple[Mapping[int, object] | set[int], ...]:
        return (self.backoff, self.dependencies, self.holds, self.throttled)

    def scene(self) -> tuple[frozenset[int], ...]:
        return tuple(frozenset(g) for g in self.all())

    def sizes(self) -> tuple[int, ...]:
        return tuple(len(g) for g in self.all())


class Memory:
    """The queue (submission order), the runs, the cluster state and contention model they hold, and per run its
    attempt, whether its workers are up and what they last reported."""

    def __init__(self, cluster: Cluster, profiles: Mapping[str, ModelProfile], params: ContentionParams | None,
                 workers: Workers, *, mps_one_user: bool) -> None:
        # The simulator's book (`scheduler.core.book`): a run starts and stops in the cluster state, the contention
        # model and the maps at once, by the same code in both. Jobs of different users run as different OS
        # accounts: one node's MPS daemon serves one of them at a time.
        self.book = Book(ClusterState(cluster, profiles, mps_one_user=mps_one_user),
                         ContentionModel(cluster, profiles, params))
        self.state = self.book.state
        self.contention = self.book.contention
        self.running = self.book.running  # one dict for the book's life
        self.view = self.book.view
        self.workers = workers
        self.attempt: dict[int, int] = {}  # running job -> its current attempt
        self.started: dict[int, bool] = {}  # running job -> its workers have started
        self.reported: dict[int, JobStatus] = {}  # running job -> the last status its workers reported
        self.slowdowns = SlowdownLedger()
        self.reasons = PendingReasons()
        self.gates = Gates()

    @property
    def pending(self) -> dict[int, Job]:
        """The queue, in submission order (the book rebuilds it when it puts a job back in its place)."""
        return self.book.pending

    def scene(self) -> tuple[object, ...]:
        """What the policy sees of the queue and the runs: the queue in its order, the runs and whether their workers
        are up, the GPUs closed, the jobs held back."""
        return (tuple(self.pending), tuple(self.started.get(j, False) for j in self.running), tuple(self.running),
                frozenset(self.state.closed), *self.gates.scene())

    def ran_from(self, job_id: int) -> float | None:
        """When the job's current run's workers started (None: not running, or its workers are not up yet)."""
        job = self.running.get(job_id)
        return job.start_s if job is not None and self.started.get(job_id) else None

    # ---- the life cycle's side (`scheduler.live.lifecycle.Runs`) --------------------------------------------------

    def start(self, job: Job, placement: Placement, attempt: int, now: float, *, adopt: bool = False) -> set[int]:
        """A run on `placement` (adopt: one recovered as it is): returns the runs whose rates its arrival changed."""
        self.attempt[job.id] = attempt
        return self.book.start(job, placement, now, adopt=adopt)

    def end_run(self, s: Session, row: JobRow, now: float) -> Job:
        """Take a run off its GPUs: close its allocations, account its service, and re-rate its neighbours."""
        ended = self._close_workers(s, row, now)
        job = self.running[row.id]
        job.end_s = now  # the fair share counts its GPUs up to here, even if the frame looks later
        self.attempt.pop(row.id)
        affected = self.book.stop(job, now)
        row.attained_gpu_s = job.attained_gpu_s  # (the job's was the row's: `job_of` read it, nothing else adds)
        for j in affected:
            if j in self.running:
                self.set_rate(self.running[j], s, since=ended)
        return job

    def resize(self, s: Session, row: JobRow, placement: Placement, attempt: int, now: float) -> set[int]:
        """An elastic run to `placement` (`Book.resize`), as its next attempt: the present workers' allocations and run
        time are closed as at the end of a run, the job stays running (its run, service and time limit go on), and
        the runs whose rates changed are returned (the job's own included)."""
        job = self.running[row.id]
        affected = self.book.resize(job, placement, now)  # (first: a refused resize changes nothing)
        row.attained_gpu_s = job.attained_gpu_s  # its service up to now: a restarted controller goes on from here
        self._close_workers(s, row, now)
        self.attempt[row.id] = attempt
        return affected

    def _close_workers(self, s: Session, row: JobRow, now: float) -> float:
        """The end of a run's present workers: their allocations released, their run time and what the model expected
        of it accounted on the row. Returns when they ended."""
        # The run's workers stopped when they said so (every rank's end, as they report it), not when this pass read
        # it: a busy controller would otherwise count its own delay as the job's run time and observed slowdown.
        last = self.reported.pop(row.id, None)
        ends = [t for t in last.ended_at if t is not None] if last is not None else []
        ended = min(now, max(ends)) if last is not None and ends and len(ends) == len(last.ended_at) else now
        slow_integral = self.slowdowns.close(row.id, ended, self.ran_from(row.id))
        self.started.pop(row.id, None)
        if row.started_at is not None:  # the workers ran: account the run and what the model expected of it
            ran = max(0.0, ended - row.started_at)
            before = (row.predicted_slowdown_avg or 0.0) * row.run_s
            row.run_s += ran
            if row.run_s > 0:
                row.predicted_slowdown_avg = (before + slow_integral) / row.run_s
        s.execute(update(Allocation).where(Allocation.job_id == row.id, Allocation.attempt == self.attempt[row.id],
                                           Allocation.released_at.is_(None)).values(released_at=now))
        row.started_at = None
        return ended

    def queued(self, job_id: int, reason: Reason | None) -> None:
        if reason is None:
            self.reasons.forget(job_id)
        else:
            self.reasons.written(job_id, reason)

    def enqueue(self, job: Job) -> None:
        self.book.enqueue(job)

    def dequeued(self, job_id: int) -> None:
        self.book.dequeue(job_id)
        self.reasons.forget(job_id)

    def set_rate(self, job: Job, s: Session | None = None, *, since: float | None = None) -> None:
        """The run's progress rate from its predicted slowdown, to its (emulated) workers and, in a pass, the store.
        `since`: when the contention changed, if earlier than now (a neighbour whose workers ended before this pass)."""
        slow = self.contention.slowdown(job.id)
        self.slowdowns.set(job.id, slow, time.time() if since is None else since, self.ran_from(job.id))
        job.rate = progress_rate(job.spec.kind, slow, job.speedup)
        self.workers.set_rate(job.id, job.rate)
        if s is not None:
            s.execute(update(JobRow).where(JobRow.id == job.id).values(predicted_slowdown=slow))

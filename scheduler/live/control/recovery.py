"""Recovery's first half: the runs the store says are running, adopted with their workers (still alive: kept as they
are) or lost (no allocation this cluster has, or no worker left). `Controller.recover` then loses the lost ones
through the life cycle, applies the nodes' health and takes the queue back."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload, selectinload

from scheduler.core.model import Job, Placement
from scheduler.core.workloads import ModelProfile
from scheduler.live.control.memory import Memory
from scheduler.live.control.workers import Workers
from scheduler.live.rows import job_of
from scheduler.live.runs import Launch, actor_name
from scheduler.live.store import queries
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import JobEvent
from scheduler.live.store.models import JobState as S


def adopt_runs(s: Session, m: Memory, workers: Workers, num_gpus: int, profiles: Mapping[str, ModelProfile],
               launch_of: Callable[[JobRow, Job, int], Launch], now: float, *, tracked: set[int],
               adopted_words: str) -> tuple[set[str], list[int]]:
    """Put every running job's run back in memory on the GPUs its allocations record and ask the backend to adopt its
    workers. Returns the workers' names to keep and the jobs whose runs are lost. A job in `tracked` (this same
    process ran it before a failed pass) gets no `adopted` event; the others' say `adopted_words`."""
    keep: set[str] = set()
    lost: list[int] = []
    # Each run's allocations and user read with it, not by a query per run (a restart on 32,768 GPUs adopts thousands).
    runs = (select(JobRow).where(JobRow.state == S.RUNNING).order_by(JobRow.id)
            .options(selectinload(JobRow.allocations), joinedload(JobRow.user)))
    for row in s.scalars(runs).unique().all():
        allocs = [a for a in row.allocations if a.attempt == row.attempt and a.released_at is None]
        gpus = tuple(a.gpu for a in sorted(allocs, key=lambda a: a.gpu))
        job = job_of(row, profiles)
        if not gpus or gpus[-1] >= num_gpus:
            # None recorded, or GPUs this cluster does not have (restarted with fewer local nodes): the workers went
            # with the old cluster.
            lost.append(row.id)
            continue
        m.start(job, Placement(gpus, allocs[0].share), row.attempt, now, adopt=True)  # as it is
        if row.started_at is not None:
            job.start_s = row.started_at
            m.started[row.id] = True
            # What ran before the crash is counted at the slowdown last recorded.
            m.slowdowns.resume(row.id, row.predicted_slowdown or 1.0, row.started_at)
        if row.attempt > 1 and row.min_gpus is not None:  # an elastic job's later attempt: maybe a resize's
            _resume_resizes(s, row, job)
        launch = launch_of(row, job, row.attempt)
        if workers.adopt(launch):
            keep.update(actor_name(row.id, row.attempt, r.rank) for r in launch.ranks)
            if row.id not in tracked:
                queries.add_event(s, row.id, "adopted", adopted_words)
        else:
            lost.append(row.id)
    return keep, lost


def _resume_resizes(s: Session, row: JobRow, job: Job) -> None:
    """A run resized before the restart goes on as one run (`Book.resize`): its time limit counts from its first
    workers, and the resize interval and its attained service from its last resize. Its attempts are the chain of
    `resized` events back to the attempt that started the run; the row's `attained_gpu_s` holds the service up to the
    last resize (`Memory.resize` wrote it)."""
    events = s.scalars(select(JobEvent).where(JobEvent.job_id == row.id, JobEvent.kind.in_(("resized", "started")))
                       .order_by(JobEvent.id)).all()
    resized = {int((e.data or {}).get("attempt", 0)): e.at for e in events if e.kind == "resized"}
    if row.attempt not in resized:
        return
    first = row.attempt
    while first in resized:
        first -= 1
    started = [e.at for e in events if e.kind == "started" and int((e.data or {}).get("attempt", 0)) == first]
    job.resized_s = resized[row.attempt]
    job.resizes = row.attempt - first
    if started:
        job.start_s = started[0]

"""Nodes, their GPUs, and who holds them: open and past allocations."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, selectinload

from scheduler.live.store.models import Allocation, Job, Node, User


def current_allocations(s: Session, jobs: Sequence[Job]) -> dict[int, list[Allocation]]:
    """The open allocations of each job's current attempt, by job id (jobs without any are absent)."""
    if not jobs:
        return {}
    attempts = {j.id: j.attempt for j in jobs}
    rows = s.scalars(
        select(Allocation).where(Allocation.job_id.in_(attempts), Allocation.released_at.is_(None))
        .order_by(Allocation.job_id, Allocation.rank, Allocation.gpu)
    ).all()
    found: dict[int, list[Allocation]] = {}
    for a in rows:
        if a.attempt == attempts[a.job_id]:
            found.setdefault(a.job_id, []).append(a)
    return found


def attempt_ranks(s: Session, job_id: int, attempt: int) -> list[int]:
    """The worker ranks a run had (open or released allocations)."""
    return list(s.scalars(
        select(Allocation.rank).where(Allocation.job_id == job_id, Allocation.attempt == attempt).distinct()
        .order_by(Allocation.rank)
    ).all())


def open_allocations_with_jobs(s: Session) -> list[tuple[Allocation, Job, str]]:
    """Every open allocation with its job and the job's user name: who sits on which GPU now."""
    rows = s.execute(
        select(Allocation, Job, User.name).join(Job, Allocation.job_id == Job.id).join(User, Job.user_id == User.id)
        .where(Allocation.released_at.is_(None)).order_by(Allocation.gpu, Allocation.job_id)
    )
    return [(alloc, job, name) for alloc, job, name in rows]


def nodes_with_gpus(s: Session) -> list[Node]:
    return list(s.scalars(select(Node).options(selectinload(Node.gpus)).order_by(Node.index)).all())


def held_intervals(s: Session, since: float, now: float) -> list[tuple[str, float, float, float | None]]:
    """(team, GPUs, allocated_at, released_at or None) of every run that held GPUs at some point in [since, now): the
    history fair-share usage is integrated from. A run's GPUs are allocated and released together, so summed per
    interval a gang is one row, not one per GPU."""
    rows = s.execute(
        select(Job.team, func.sum(Allocation.share), Allocation.allocated_at, Allocation.released_at)
        .join(Job, Allocation.job_id == Job.id)
        .where(Allocation.allocated_at < now, or_(Allocation.released_at.is_(None), Allocation.released_at >= since))
        .group_by(Job.team, Allocation.allocated_at, Allocation.released_at)
    )
    return [(team, float(gpus), start, end) for team, gpus, start, end in rows]

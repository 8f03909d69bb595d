"""Accounting, as Slurm's `sacct`/`sreport` give it: over a period, per user, team or day, the GPU-hours jobs held
(and of those, the hours held before their workers started), the jobs that ended by how they ended, waits and JCTs,
preemptions and time-outs. From the store alone (allocations, jobs, events), so it answers while the controller is
down; `GET /accounting` and `corral accounting` serve it, as JSON or CSV.

Who sees what: an admin every job; anyone else their own jobs and their team's (a job counts for the team it was
submitted under; `default`, where every user is until an admin makes teams, is no one's team here).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from scheduler.core.model import DEFAULT_TEAM
from scheduler.live.accounting_table import END_STATES, GROUPS
from scheduler.live.store import JobState
from scheduler.live.store.models import Allocation, Job, JobEvent, User

DAY_S = 86400.0
ENDED_STATES = set(END_STATES)  # (tests/test_accounting.py: the terminal JobStates)


@dataclass(frozen=True)
class Viewer:
    """Whose jobs a caller may account for: every job (an admin), or its own and its team's."""

    user_id: int
    admin: bool
    team: str | None = None

    def jobs(self) -> ColumnElement[bool] | None:
        """The filter on jobs (None: all)."""
        if self.admin:
            return None
        mine = Job.user_id == self.user_id
        # `default` is where everyone is until an admin makes teams: no one's team, or every user would see all.
        return or_(mine, Job.team == self.team) if self.team and self.team != DEFAULT_TEAM else mine


@dataclass
class Row:
    """One group's figures over the period."""

    key: str
    gpu_s: float = 0.0
    idle_gpu_s: float = 0.0
    ended: dict[str, int] = field(default_factory=lambda: dict.fromkeys(END_STATES, 0))
    waits: list[float] = field(default_factory=list)
    jcts: list[float] = field(default_factory=list)
    preemptions: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "gpu_hours": round(self.gpu_s / 3600, 6),
            "idle_gpu_hours": round(self.idle_gpu_s / 3600, 6),
            "jobs_ended": sum(self.ended.values()), **{f"jobs_{k}": v for k, v in self.ended.items()},
            "jobs_started": len(self.waits), "wait_p50_s": _pct(self.waits, 50), "wait_p95_s": _pct(self.waits, 95),
            "jct_p50_s": _pct(self.jcts, 50), "jct_p95_s": _pct(self.jcts, 95), "preemptions": self.preemptions,
        }


def _pct(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 3) if xs else None


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")


def _days(lo: float, hi: float) -> Iterable[tuple[str, float]]:
    """[lo, hi) cut at UTC midnights: (day, seconds in it)."""
    t = lo
    while t < hi:
        edge = min(hi, (math.floor(t / DAY_S) + 1) * DAY_S)
        yield _day(t), edge - t
        t = edge


def accounting(s: Session, since: float, until: float, by: str, viewer: Viewer) -> dict[str, Any]:
    """The period [since, until)'s figures per `by` (user, team or day), and their total."""
    if by not in GROUPS:
        raise ValueError(f"by: one of {', '.join(GROUPS)}, not {by!r}")
    seen = viewer.jobs()
    names = dict(s.execute(select(User.id, User.name)).all())
    rows: dict[str, Row] = {}
    total = Row("total")

    def rows_for(job: Any, at: float) -> list[Row]:
        key = names.get(job.user_id, "?") if by == "user" else job.team if by == "team" else _day(at)
        if key not in rows:
            rows[key] = Row(key)
        return [rows[key], total]

    def held(job: Any, lo: float, hi: float, share: float, idle_until: float) -> None:
        """`share` of a GPU held over [lo, hi) (clipped to the period); the part before `idle_until` was idle."""
        lo, hi = max(lo, since), min(hi, until)
        if hi <= lo:
            return
        spans = _days(lo, hi) if by == "day" else [("", hi - lo)]
        t = lo
        for _, seconds in spans:
            idle = max(0.0, min(t + seconds, idle_until) - t)
            for row in rows_for(job, t):
                row.gpu_s += share * seconds
                row.idle_gpu_s += share * idle
            t += seconds

    # GPU-time: every allocation that overlaps the period, with its run's start (the "started" event) if any.
    q = (select(Allocation.job_id, Allocation.attempt, Allocation.share, Allocation.allocated_at,
                Allocation.released_at, Job.user_id, Job.team)
         .join(Job, Allocation.job_id == Job.id)
         .where(Allocation.allocated_at < until, or_(Allocation.released_at.is_(None), Allocation.released_at > since)))
    allocs = s.execute(q if seen is None else q.where(seen)).all()
    ids = sorted({a.job_id for a in allocs})
    started: dict[tuple[int, int], float] = {}
    for chunk in range(0, len(ids), 5000):  # (bounded IN lists)
        for e in s.scalars(select(JobEvent).where(JobEvent.kind == "started",
                                                  JobEvent.job_id.in_(ids[chunk:chunk + 5000]))):
            started[(e.job_id, int((e.data or {}).get("attempt", 0)))] = e.at
    for a in allocs:
        end = a.released_at if a.released_at is not None else until
        # Before its workers started, the run held its GPUs idle (launching, preparing); a run never started held
        # them idle throughout.
        up = started.get((a.job_id, a.attempt))
        held(a, a.allocated_at, end, a.share, up if up is not None else end)

    # Jobs that ended, first started or were preempted in the period: each counted in the group of that moment.
    jq = select(Job.id, Job.user_id, Job.team, Job.state, Job.submitted_at, Job.first_started_at, Job.finished_at) \
        .where(or_(and_(Job.finished_at >= since, Job.finished_at < until),
                   and_(Job.first_started_at >= since, Job.first_started_at < until)))
    for job in s.execute(jq if seen is None else jq.where(seen)).all():
        if job.finished_at is not None and since <= job.finished_at < until and job.state in ENDED_STATES:
            for row in rows_for(job, job.finished_at):
                row.ended[job.state] += 1
                if job.state == JobState.SUCCEEDED:
                    row.jcts.append(job.finished_at - job.submitted_at)
        if job.first_started_at is not None and since <= job.first_started_at < until:
            for row in rows_for(job, job.first_started_at):
                row.waits.append(max(0.0, job.first_started_at - job.submitted_at))
    pq = select(JobEvent.at, Job.user_id, Job.team).join(Job, JobEvent.job_id == Job.id) \
        .where(JobEvent.kind == "preempted", JobEvent.at >= since, JobEvent.at < until)
    for preempted in s.execute(pq if seen is None else pq.where(seen)).all():
        for row in rows_for(preempted, preempted.at):
            row.preemptions += 1
    return {"since": since, "until": until, "by": by, "rows": [rows[k].as_dict() for k in sorted(rows)],
            "total": total.as_dict()}


def gpu_seconds_by_team(s: Session, now: float) -> dict[str, float]:
    """GPU-seconds every team's jobs held since the store began, up to `now` (shares weighted): the Prometheus counter
    `corral_team_gpu_seconds_total`, whose increase over a period is that period's GPU-hours by team here, x 3600.
    One aggregate query, whatever the history's length."""
    held = func.sum(Allocation.share * (func.coalesce(Allocation.released_at, now) - Allocation.allocated_at))
    q = (select(Job.team, held).join(Job, Allocation.job_id == Job.id).where(Allocation.allocated_at <= now)
         .group_by(Job.team))
    return {team: float(total or 0.0) for team, total in s.execute(q).all()}

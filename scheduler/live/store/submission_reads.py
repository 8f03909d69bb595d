"""What a submission reads from the store before it stores its job, in one statement: the count of the GPUs the store
records (on every node, down ones included, as the controller models them) and the largest one's memory (the capacity
check), the cluster's time limits, and the submitter's team, read under a lock on their row. Read one by one they were three statements a submission, each a round trip on PostgreSQL and the
SQLAlchemy execution around it everywhere (issue 48: submissions per second)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Select, Table, bindparam, func, select
from sqlalchemy.orm import Session

from scheduler.core.model import DEFAULT_TEAM
from scheduler.live.store.models import Gpu, LimitDefaults, Node, User


@dataclass(frozen=True, slots=True)
class SubmissionReads:
    recorded_gpus: int  # GPUs of every node recorded, alive or down (0: no node recorded yet)
    largest_gpu_gb: float  # the largest of them, in GB (0.0 when there is none)
    default_time_limit_s: float | None  # the cluster's time limit for a job that gives none (None: not set)
    max_time_limit_s: float | None  # the most a job may give (None: not set)
    team: str  # the team a job the user submits now runs under

    @property
    def time_limits(self) -> tuple[float | None, float | None]:
        return self.default_time_limit_s, self.max_time_limit_s


def _statement(for_update: bool) -> Select[Any]:
    gpus, nodes = cast(Table, Gpu.__table__), cast(Table, Node.__table__)
    limits, users = cast(Table, LimitDefaults.__table__), cast(Table, User.__table__)
    capacity = (select(func.count(gpus.c.id).label("n"), func.max(gpus.c.mem_gb).label("largest"))
                .select_from(gpus.join(nodes, gpus.c.node_id == nodes.c.id)).subquery())
    # The user's row locked as `teams.submitter_team` and `limits.check_pending` lock it (PostgreSQL; SQLite's
    # submission holds the one write lock): a share lock, so that a move of the user waits for this submission to
    # commit, or, where the submission will count the user's pending jobs, the update lock that count takes (taken
    # here first: upgrading a share lock two submissions hold would deadlock them).
    team = select(users.c.team).where(users.c.id == bindparam("user_id")).with_for_update(read=not for_update)
    return select(capacity.c.n, capacity.c.largest,
                  select(limits.c.default_time_limit_s).where(limits.c.id == 1).scalar_subquery(),
                  select(limits.c.max_time_limit_s).where(limits.c.id == 1).scalar_subquery(),
                  team.scalar_subquery())


# Built once: every submission runs one of them, and building a statement costs more than running it.
_SHARE, _UPDATE = _statement(False), _statement(True)


def submission_reads(s: Session, user_id: int, *, for_update: bool = False) -> SubmissionReads:
    """What a submission of `user_id` reads, in `s`'s transaction; `for_update`: lock the user's row for update (a
    submission that will count their pending jobs) rather than share."""
    n, largest, default, most, team = tuple(s.connection().execute(_UPDATE if for_update else _SHARE,
                                                                    {"user_id": user_id}).one())
    return SubmissionReads(int(n or 0), float(largest or 0.0), default, most, team or DEFAULT_TEAM)

"""Fair use as stored: per-user limits (their defaults and overrides), and the cluster's time limits."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from scheduler.live import priority_ceilings as ceilings
from scheduler.live.store.models import Job, JobState, LimitDefaults, User, UserLimits


@dataclass(frozen=True, slots=True)
class Limits:
    """One user's fair-use limits (admins are exempt from all of them). `max_pending`: jobs pending at once;
    `submit_rate` and `submit_burst`: a token bucket of submissions (per second, and how many at once);
    `whatif_per_min`: what-if calls per minute (a bucket of that size, refilled over a minute); `request_rate` and
    `request_burst`: a token bucket of API requests of any kind."""

    max_pending: int
    submit_rate: float
    submit_burst: int
    whatif_per_min: int
    request_rate: float
    request_burst: int


# Built-in defaults, far above what one person submits by hand or by a sweep script, far below a flood (issue 25: 6,310
# jobs in 40 s, 3,025 of them pending at once). A thousand pending jobs is hours of a whole cluster's work for one
# user. A burst of 100 lets a 100-job sweep through at once (and leaves room for the concurrent retries of a client
# that resends while its first attempts are in flight), then 10 a second: a 1,000-job sweep takes about 90 s for a
# client that waits out Retry-After, a flood gets 400 jobs into 40 s instead of 6,310. 60 what-ifs a minute is one a
# second, more than anyone reads, while each can hold a worker for seconds. Requests of any kind: a dashboard polls a
# few a second, `corral jobs --watch` one, a script that walks 1,000 jobs one by one a few hundred in a burst; 50 a
# second after a burst of 200 lets all of that through and keeps one user from taking more than a share of the server
# (a list page at its maximum costs tens of ms).
BUILTIN_LIMITS = Limits(max_pending=1_000, submit_rate=10.0, submit_burst=100, whatif_per_min=60, request_rate=50.0,
                        request_burst=200)
LIMIT_NAMES = tuple(f.name for f in dataclass_fields(Limits))


class PendingLimit(RuntimeError):
    """A submission past the user's `max_pending`."""

    def __init__(self, user: str, pending: int, limit: int) -> None:
        super().__init__(f"max_pending: {user} has {pending} job(s) pending, the most a user may have is {limit}; "
                         "submit more when some have started, or cancel some (an admin sets the limit: "
                         "`corral user limits`)")
        self.pending, self.limit = pending, limit


def pending_jobs_of_user(s: Session, user_id: int) -> int:
    return s.scalar(select(func.count()).select_from(Job).where(Job.user_id == user_id,
                                                                Job.state == JobState.PENDING)) or 0


def check_pending(s: Session, user: User, max_pending: int, adding: int = 1) -> None:
    """PendingLimit if `adding` more jobs (an array's tasks, or one) would take `user` past `max_pending` pending. The
    user's row is locked first (PostgreSQL; on SQLite the submission holds the one write lock), as `move_user` does:
    two submissions of one user then count in turn, each seeing the other's jobs once it committed, so concurrent
    submissions cannot overshoot the limit."""
    s.execute(select(User.id).where(User.id == user.id).with_for_update())
    pending = pending_jobs_of_user(s, user.id)
    if pending + adding > max_pending:
        raise PendingLimit(user.name, pending, max_pending)


def _set_columns(row: LimitDefaults | UserLimits | None, names: Sequence[str] = LIMIT_NAMES) -> dict[str, Any]:
    return {} if row is None else {n: getattr(row, n) for n in names if getattr(row, n) is not None}


def ceiling_settings(s: Session, user_id: int) -> dict[str, Any]:
    """The ceiling settings an admin made for `user_id` themselves (not their team's), by name."""
    return _set_columns(s.get(UserLimits, user_id), ceilings.CEILING_NAMES)


def limit_settings(s: Session, user_id: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the defaults an admin set, `user_id`'s overrides): only the limits set, by name."""
    defaults = _set_columns(s.get(LimitDefaults, 1))
    return defaults, (_set_columns(s.get(UserLimits, user_id)) if user_id is not None else {})


def time_limit_settings(s: Session) -> tuple[float | None, float | None]:
    """(the time limit a job gets when it gives none, the most one may give): None where an admin set neither."""
    row = s.execute(_TIME_LIMITS).first()
    return (row[0], row[1]) if row is not None else (None, None)


# Built once, of the table's columns (no ORM entity to load): every submission reads it.
_TIME_LIMITS = select(LimitDefaults.__table__.c.default_time_limit_s, LimitDefaults.__table__.c.max_time_limit_s
                      ).where(LimitDefaults.__table__.c.id == 1)


def set_time_limits(s: Session, changes: Mapping[str, float | None], *, by: str) -> tuple[float | None, float | None]:
    """Write the cluster's default and maximum time limit (`default_s`, `max_s`; None clears one); ValueError, naming
    the field, if the default would exceed the maximum. Returns both after the change."""
    now = time.time()
    row = s.get(LimitDefaults, 1, with_for_update=True)
    if row is None:
        row = LimitDefaults(id=1, updated_at=now)
        s.add(row)
    default = changes.get("default_s", row.default_time_limit_s)
    most = changes.get("max_s", row.max_time_limit_s)
    if default is not None and most is not None and default > most:
        field = "default_s" if "default_s" in changes else "max_s"
        raise ValueError(f"{field}: the default time limit ({default:g} s) would exceed the maximum ({most:g} s)")
    row.default_time_limit_s, row.max_time_limit_s = default, most
    row.updated_at, row.updated_by = now, by
    s.flush()
    return default, most


def apply_time_limit(s: Session, fields: dict[str, Any],
                     settings: tuple[float | None, float | None] | None = None) -> None:
    """A submission's time limit, in place: the cluster's default when it gives none, or its maximum when there is
    no default (with a maximum, every job is bounded); ValueError (naming `time_limit_s`) when it gives more than the
    cluster's maximum. `settings`: (default, maximum) where the caller read them already."""
    default, most = settings if settings is not None else time_limit_settings(s)
    if fields.get("time_limit_s") is None:
        fields["time_limit_s"] = default if default is not None else most
    elif most is not None and fields["time_limit_s"] > most:
        raise ValueError(f"{fields['time_limit_s']:g} s is more than the cluster's maximum time limit, {most:g} s "
                         "(an admin sets it: `corral time-limits`)")


def effective_limits(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> Limits:
    """The limits that apply: a user's override, else the admins' default, else the built-in one."""
    return replace(BUILTIN_LIMITS, **{**defaults, **overrides})


def limits_of(s: Session, user_id: int) -> Limits:
    return effective_limits(*limit_settings(s, user_id))


def set_limits(s: Session, changes: Mapping[str, Any], *, user_id: int | None = None, by: str) -> None:
    """Write the limits in `changes` (by name; None clears one, back to the default) as the cluster-wide defaults, or
    as `user_id`'s overrides, which may also set their priority ceiling. The caller validates the values."""
    unknown = set(changes) - set(LIMIT_NAMES) - (set(ceilings.CEILING_NAMES) if user_id is not None else set())
    if unknown:
        raise ValueError(f"unknown limits: {', '.join(sorted(unknown))}")
    now = time.time()
    row: LimitDefaults | UserLimits | None
    if user_id is None:
        row = s.get(LimitDefaults, 1, with_for_update=True)
        if row is None:
            row = LimitDefaults(id=1, updated_at=now)
            s.add(row)
    else:
        row = s.get(UserLimits, user_id, with_for_update=True)
        if row is None:
            row = UserLimits(user_id=user_id, updated_at=now)
            s.add(row)
    for name, value in changes.items():
        setattr(row, name, value)
    row.updated_at, row.updated_by = now, by
    s.flush()

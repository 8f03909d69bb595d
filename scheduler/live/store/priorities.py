"""Priority classes and priority ceilings as stored: a submission's priority resolved and held to its ceiling."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from scheduler.core.model import DEFAULT_TEAM
from scheduler.live import priority_ceilings as ceilings
from scheduler.live.store.models import PriorityClass, Team, User, UserLimits
from scheduler.live.store.names import check_user_name
from scheduler.live.store.teams import TeamConflict


def priority_classes(s: Session) -> list[PriorityClass]:
    """Every class, highest value first (then by name)."""
    return list(s.scalars(select(PriorityClass).order_by(PriorityClass.value.desc(), PriorityClass.name)))


def priority_class(s: Session, name: str) -> PriorityClass | None:
    return s.get(PriorityClass, name)


def create_priority_class(s: Session, name: str, value: int, preemptible: bool, description: str | None,
                          by: str) -> PriorityClass:
    """A new class (TeamConflict if the name is taken, even by a concurrent request)."""
    row = PriorityClass(name=check_user_name(name), value=value, preemptible=preemptible, description=description,
                        created_at=time.time(), created_by=by)
    try:
        with s.begin_nested():
            s.add(row)
            s.flush()
    except IntegrityError:
        raise TeamConflict(f"priority class {name!r} already exists") from None
    return row


def resolve_priority(s: Session, fields: dict[str, Any], user: User) -> None:
    """A submission's priority and preemptibility, in place: its priority class's when it names one (LookupError
    naming the known classes if there is no such class), else what it gave, else 0 and preemptible; then held to
    the submitter's ceiling unless they are an admin (AboveCeiling, a PermissionError naming the field)."""
    name = fields.get("priority_class")
    row = None
    if name is None:
        fields["priority"] = fields.get("priority") or 0
        fields["preemptible"] = True if fields.get("preemptible") is None else fields["preemptible"]
    else:
        row = priority_class(s, name)
        if row is None:
            known = ", ".join(c.name for c in priority_classes(s)) or "none are defined"
            raise LookupError(f"no priority class {name!r} (known: {known})")
        fields["priority"], fields["preemptible"] = row.value, row.preemptible
    if not user.admin:
        ceilings.check(priority_ceiling(s, user.id), priority=fields["priority"], preemptible=fields["preemptible"],
                       named=None if row is None else (row.name, row.value, row.preemptible))


# ---- priority ceilings (scheduler.live.priority_ceilings) -----------------------------------------------------------

# Built once: it runs on every non-admin's submission. One row: the user's name and team, their own settings (null
# without a user_limits row) and their team's.
_CEILING = (
    select(User.name, User.team, UserLimits.max_priority, UserLimits.allow_nonpreemptible,
           UserLimits.priority_classes, Team.max_priority, Team.allow_nonpreemptible, Team.priority_classes)
    .select_from(User).outerjoin(UserLimits, UserLimits.user_id == User.id).outerjoin(Team, Team.name == User.team)
    .where(User.id == bindparam("user_id"))
)


def priority_ceiling(s: Session, user_id: int) -> ceilings.Ceiling:
    """The ceiling of `user_id`'s jobs now: their own settings over their team's over the built-in ones."""
    row = s.execute(_CEILING, {"user_id": user_id}).one()
    own = dict(zip(ceilings.CEILING_NAMES, row[2:5], strict=True))
    team = dict(zip(ceilings.CEILING_NAMES, row[5:8], strict=True))
    return ceilings.combine(row[0], row[1] or DEFAULT_TEAM, own, team)


def team_ceiling(team: Team) -> ceilings.Ceiling:
    """What `team`'s members get where they have no setting of their own."""
    return ceilings.combine("", team.name, {}, {n: getattr(team, n) for n in ceilings.CEILING_NAMES})


def unknown_priority_classes(s: Session, names: Collection[str]) -> list[str]:
    """Those of `names` that name no priority class, sorted: an admin granting them has mistyped."""
    known = set(s.scalars(select(PriorityClass.name).where(PriorityClass.name.in_(set(names))))) if names else set()
    return sorted(set(names) - known)


def set_team_ceiling(s: Session, team: Team, changes: Mapping[str, Any]) -> bool:
    """Write the ceiling settings in `changes` (None clears one: the built-in setting applies) on `team`; whether
    anything changed. The caller validates the values."""
    changed = False
    for name in ceilings.CEILING_NAMES:
        if name in changes and changes[name] != getattr(team, name):
            setattr(team, name, changes[name])
            changed = True
    return changed

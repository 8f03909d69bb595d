"""Who may rank how high (Slurm's QOS `MaxPrio`, Kueue's priority classes per queue): the one rule that holds a
non-admin's job to the ceiling an admin granted, at submission, resubmission, arrays, `PATCH /jobs/ID` and when a
priority class is named. Admins are exempt.

A ceiling has three settings, each set per user (`corral user limits NAME`) or per team (`corral team set TEAM`),
and resolved one by one: the user's own setting, else their team's, else the built-in default. So a user's setting
overrides their team's, lower or higher, and a list of classes replaces the team's list (it does not add to it).

- `max_priority`: the highest priority a job may give (built in: 0, the cluster's default priority).
- `allow_nonpreemptible`: whether a job may say `preemptible: false` itself (built in: no).
- `priority_classes`: the classes a job may name whatever their figures (built in: none). A class whose value and
  preemptibility the user could give as figures (within the two settings above) may always be named: naming it
  grants nothing.

Pure: the store reads the settings (`queries.priority_ceiling`) and the API turns a refusal into a 403.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CEILING_NAMES = ("max_priority", "allow_nonpreemptible", "priority_classes")
BUILTIN: Mapping[str, Any] = {"max_priority": 0, "allow_nonpreemptible": False, "priority_classes": ()}
CLI_FLAGS = {"max_priority": "--max-priority N", "allow_nonpreemptible": "--allow-nonpreemptible",
             "priority_classes": "--priority-classes A,B"}


@dataclass(frozen=True, slots=True)
class Ceiling:
    """What one user's jobs may ask for, and where each setting comes from: `user`, `team` or `built-in`."""

    user: str
    team: str
    max_priority: int
    allow_nonpreemptible: bool
    priority_classes: tuple[str, ...]
    sources: Mapping[str, str] = field(default_factory=dict)

    def may_give(self, priority: int, preemptible: bool) -> bool:
        return priority <= self.max_priority and (preemptible or self.allow_nonpreemptible)


def combine(user: str, team: str, own: Mapping[str, Any], teams: Mapping[str, Any]) -> Ceiling:
    """The ceiling of `user` in `team` from the settings an admin made for them (`own`) and for the team (`teams`):
    each setting the user's if set (not None), else the team's, else the built-in one."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in CEILING_NAMES:
        for source, settings in (("user", own), ("team", teams)):
            if settings.get(name) is not None:
                values[name], sources[name] = settings[name], source
                break
        else:
            values[name], sources[name] = BUILTIN[name], "built-in"
    return Ceiling(user=user, team=team, max_priority=int(values["max_priority"]),
                   allow_nonpreemptible=bool(values["allow_nonpreemptible"]),
                   priority_classes=tuple(values["priority_classes"]), sources=sources)


class AboveCeiling(PermissionError):
    """A request past the caller's ceiling (the API's 403), naming the field, the limit and who can change it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _who_raises(c: Ceiling, name: str) -> str:
    """Where the setting `name` comes from, and the commands an admin raises it with."""
    origin = {"user": f"set for {c.user} by an admin", "team": f"set for team {c.team} by an admin",
              "built-in": "the built-in default"}[c.sources.get(name, "built-in")]
    flag = CLI_FLAGS[name]
    return (f"{origin}; an admin changes it: `corral user limits {c.user} {flag}`, or for the team "
            f"`corral team set {c.team} {flag}`")


def _classes_text(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"


def check(c: Ceiling, *, priority: int, preemptible: bool = True,
          named: tuple[str, int, bool] | None = None) -> None:
    """AboveCeiling unless `c` lets a job have `priority` and `preemptible`, given as figures, or the class `named`
    (name, value, preemptible) that gave them."""
    if named is not None:
        name, value, class_preemptible = named
        if name in c.priority_classes or c.may_give(value, class_preemptible):
            return
        figures = f"priority {value}" + ("" if class_preemptible else ", not preemptible")
        raise AboveCeiling("priority_class", (
            f"{name!r} ({figures}) is above your ceiling (priority {c.max_priority}"
            f"{'' if c.allow_nonpreemptible else ', preemptible only'}) and not among the classes you may name "
            f"({_classes_text(c.priority_classes)}: {_who_raises(c, 'priority_classes')})"))
    if priority > c.max_priority:
        raise AboveCeiling("priority", f"{priority} is above your ceiling of {c.max_priority} "
                                       f"({_who_raises(c, 'max_priority')})")
    if not preemptible and not c.allow_nonpreemptible:
        usable = f"; or name a class you may: {_classes_text(c.priority_classes)}"
        raise AboveCeiling("preemptible", f"false is not allowed for you ({_who_raises(c, 'allow_nonpreemptible')}"
                                          f"{usable})")

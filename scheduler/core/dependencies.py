"""Job dependencies and job arrays: which pending jobs the policy may be offered, written once for the simulator (and
so the RL environment and what-if) and the live controller.

**Dependencies** (Slurm's `--dependency`): a job lists others with a condition each, and is offered to the policy only
once every one holds:

* `afterok`: the other job succeeded;
* `afternotok`: it ended without succeeding (failed, timed out, cancelled or refused);
* `afterany`: it ended, however.

A condition that can no longer hold (`afterok` on a job that failed; `afternotok` on one that succeeded) makes the
dependent job **never** runnable: it ends cancelled with that reason (Slurm's DependencyNeverSatisfied), and so,
in turn, may the jobs that depend on it. A job can depend only on jobs that exist when it is submitted, so the live
service cannot form a cycle; a trace can, and `check_acyclic` refuses one, naming it.

**Arrays** (Slurm's `--array=0-99%10`): N tasks share a parent; `max_running` bounds how many run at once, so the
policy is offered only as many of an array's pending tasks (first by index) as it has room for (`array_room`).

Each caller keeps its own books (the simulator its jobs, the controller its store) and asks these functions with
what it knows of the other jobs' ends (`Outcome`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeVar

from scheduler.core.reasons import Code, Reason

K = TypeVar("K", bound=Hashable)


class _TaskSpec(Protocol):  # what `array_throttle` reads of a JobSpec (this module comes before the model's)
    @property
    def array(self) -> str | None: ...

    @property
    def array_max_running(self) -> int | None: ...


class _Task(Protocol):  # ... and of a Job
    @property
    def id(self) -> int: ...

    @property
    def spec(self) -> _TaskSpec: ...


T = TypeVar("T", bound=_Task)


class Condition(StrEnum):
    AFTEROK = "afterok"
    AFTERANY = "afterany"
    AFTERNOTOK = "afternotok"


class Outcome(StrEnum):
    """How a job ended, as far as dependencies care."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # failed, timed out, cancelled or refused: ended without succeeding


@dataclass(frozen=True, slots=True)
class Dependency:
    job: str  # the other job: its id in the live service, its name (job_id column) in a trace
    condition: Condition = Condition.AFTEROK


@dataclass(frozen=True, slots=True)
class Readiness:
    """A dependent job's state: `ready`, or waiting (`reason`), or `never` runnable (`reason` says which condition)."""

    ready: bool
    never: bool = False
    reason: Reason | None = None

    @property
    def why(self) -> str:
        return self.reason.text if self.reason is not None else ""


READY = Readiness(True)


def holds(condition: Condition, outcome: Outcome | None) -> bool | None:
    """Whether `condition` holds for a job that ended with `outcome` (None: not ended): True, False (never will),
    or None (not yet)."""
    if outcome is None:
        return None
    if condition is Condition.AFTERANY:
        return True
    return (outcome is Outcome.SUCCEEDED) == (condition is Condition.AFTEROK)


def readiness(deps: Sequence[Dependency], outcome: Callable[[str], Outcome | None],
              label: Callable[[str], str] = lambda key: f"job {key}") -> Readiness:
    """Whether a job with `deps` may be offered now; `outcome(key)` says how each other job ended (None: not yet).
    The first condition that can never hold decides `never`; else the first that does not hold yet is the wait's
    reason ("waiting for job 12 to succeed")."""
    waiting: list[Dependency] = []
    for dep in deps:
        state = holds(dep.condition, outcome(dep.job))
        if state is False:
            return Readiness(False, True, Reason(Code.DEPENDENCY_NEVER, {
                "on": label(dep.job), "condition": dep.condition.value,
                "succeeded": outcome(dep.job) is Outcome.SUCCEEDED}))
        if state is None:
            waiting.append(dep)
    if not waiting:
        return READY
    first = waiting[0]
    return Readiness(False, False, Reason(Code.DEPENDENCY, {
        "on": label(first.job), "condition": first.condition.value, "more": len(waiting) - 1}))


def check_acyclic(deps: Mapping[K, Iterable[K]]) -> None:
    """ValueError naming a cycle (a -> b -> a) if the dependency graph has one; every key must be a node, and an
    unknown dependency is refused too."""
    for node, targets in deps.items():
        for t in targets:
            if t not in deps:
                raise ValueError(f"{node} depends on {t}, which does not exist")
    colour: dict[K, int] = {}  # 1: on the current path, 2: done
    for root in deps:
        if root in colour:
            continue
        stack: list[tuple[K, list[K]]] = [(root, list(deps[root]))]
        path = [root]
        colour[root] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                path.pop()
                colour[node] = 2
                continue
            nxt = todo.pop()
            if colour.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                raise ValueError("dependencies form a cycle: " + " -> ".join(map(str, cycle)))
            if nxt not in colour:
                colour[nxt] = 1
                path.append(nxt)
                stack.append((nxt, list(deps[nxt])))


def array_room(max_running: int | None, running: int) -> int | None:
    """How many more of an array's tasks may start now (None: no bound)."""
    return None if max_running is None else max(0, max_running - running)


def array_throttle(pending: Iterable[T], running: Iterable[_Task]) -> tuple[list[T], dict[int, str]]:
    """`array_waits`, with each task's reason in words (the simulator's pending reasons)."""
    offered, waits = array_waits(pending, running)
    return offered, {job_id: why.text for job_id, why in waits.items()}


def array_waits(pending: Iterable[T], running: Iterable[_Task]) -> tuple[list[T], dict[int, Reason]]:
    """The pending jobs the policy may be offered as far as arrays go, in their order (an array's tasks only as many
    as it has room for, the first ones), and why each task left out waits."""
    pending = list(pending)
    bounded = {j.spec.array: j.spec.array_max_running for j in pending
               if j.spec.array is not None and j.spec.array_max_running is not None}
    if not bounded:
        return pending, {}
    room = dict(bounded)
    for job in running:
        if job.spec.array in room:
            room[job.spec.array] = max(0, room[job.spec.array] - 1)
    offered: list[T] = []
    waits: dict[int, Reason] = {}
    for job in pending:
        a = job.spec.array
        if a in room:
            if not room[a]:
                waits[job.id] = Reason(Code.ARRAY_LIMIT, {"array": a, "max_running": bounded[a]})
                continue
            room[a] -= 1
        offered.append(job)
    return offered, waits


def parse_dependency(text: str) -> list[Dependency]:
    """Slurm's form, as the CLI and the trace column take it: `afterok:12:13,afterany:14` (conditions separated by
    commas or semicolons, each followed by one or more job keys). ValueError naming what is wrong."""
    out: list[Dependency] = []
    for part in (p.strip() for p in text.replace(";", ",").split(",")):
        if not part:
            continue
        name, *keys = part.split(":")
        try:
            condition = Condition(name.strip().lower())
        except ValueError:
            raise ValueError(f"{name!r} is not a condition; use {', '.join(c.value for c in Condition)}") from None
        if not keys or any(not k.strip() for k in keys):
            raise ValueError(f"{part!r}: name at least one job after the condition ({name}:JOB[:JOB...])")
        out += [Dependency(k.strip(), condition) for k in keys]
    return out

"""The one place a live job changes state.

A job moves between the states of `TRANSITIONS` only, and only through this module: each move writes the row (its
state and the fields that go with it), its event and, for the controller, the in-memory copy the policy sees, together.
A move the table does not hold raises `IllegalTransition` and writes nothing, so a job never leaves a terminal state
(Ray's job manager refuses the same). `tests/test_layering.py` keeps every other module from assigning a job's state.

Two moves race the API against the controller and are decided by the database, atomically: placing a pending job
(`claim`: the controller's, unless the API cancelled or held it a moment ago) and cancelling a pending one
(`cancel_pending`: the API's, unless the controller placed it a moment ago).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

from sqlalchemy import CursorResult, update
from sqlalchemy.orm import Session

from scheduler.core.model import Job
from scheduler.core.reasons import Code, Reason
from scheduler.core.workloads import ModelProfile
from scheduler.live.job_states import JobState as S
from scheduler.live.rows import job_of
from scheduler.live.store.events import add_event
from scheduler.live.store.models import Allocation, RestartPolicy
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.reason_columns import pending_columns, set_end, set_pending

# From each state, the states a job may move to. A job that ended is resubmitted as a new job, never revived.
TRANSITIONS: Mapping[S, frozenset[S]] = {
    # placed; cancelled (or its dependencies can never hold); rejected (the cluster can never run it)
    S.PENDING: frozenset({S.RUNNING, S.CANCELLED, S.FAILED}),
    # back to the queue (preempted, requeued, retried, lost); ended
    S.RUNNING: frozenset({S.PENDING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMED_OUT}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.TIMED_OUT: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A move `TRANSITIONS` does not hold (e.g. out of a terminal state): a bug in the caller, never a user's error."""


def check(job_id: int, old: str, new: S) -> None:
    if new not in TRANSITIONS[S(old)]:
        raise IllegalTransition(f"job {job_id}: {old} -> {new} is not a legal transition")


_KEEP: Any = object()  # a field a move leaves as it is


def cancel_pending(s: Session, job_id: int, now: float) -> bool:
    """Cancel `job_id` if it is still pending (the API's move): False if the controller placed it first (the caller
    then asks the controller to stop it)."""
    done = cast("CursorResult[Any]", s.execute(  # an UPDATE's result is a cursor's, which counts the rows
        update(JobRow).where(JobRow.id == job_id, JobRow.state == S.PENDING)
        .values(state=S.CANCELLED, finished_at=now, cancel_requested=True, **pending_columns(None),
                pending_until=None, held_at=None, held_by=None))).rowcount
    if done:
        add_event(s, job_id, "cancelled", "cancelled while pending", at=now)
    return bool(done)


def claim(s: Session, job_id: int, attempt: int, predicted_slowdown: float) -> bool:
    """Move `job_id` from pending to running for its run `attempt` (the controller's placement): False if the API
    cancelled or held it a moment ago. The caller writes the placement's event with its allocations."""
    return bool(cast("CursorResult[Any]", s.execute(update(JobRow).where(
        JobRow.id == job_id, JobRow.state == S.PENDING, JobRow.held_at.is_(None)).values(
        state=S.RUNNING, attempt=attempt, **pending_columns(None), pending_until=None, not_before=None,
        predicted_slowdown=predicted_slowdown, started_at=None))).rowcount)


class Runs(Protocol):
    """What a move changes in the controller's memory: the queue and the runs (`scheduler.live.control.memory`)."""

    @property
    def running(self) -> dict[int, Job]: ...

    def end_run(self, s: Session, row: JobRow, now: float) -> Job: ...

    def enqueue(self, job: Job) -> None: ...

    def queued(self, job_id: int, reason: Reason | None) -> None: ...

    def dequeued(self, job_id: int) -> None: ...


class LifeCycle:
    """The controller's moves: each writes the row, its event and the in-memory copy (`runs`) together."""

    def __init__(self, runs: Runs, profiles: Mapping[str, ModelProfile]) -> None:
        self.runs = runs
        self.profiles = profiles

    def to_pending(self, s: Session, row: JobRow, now: float, *, event: str, message: str | None = None,
                   reason: Reason | None = None, **data: Any) -> Job:
        """Back to the queue, in its old place (submission order): its run (if any) is taken off its GPUs; `reason`
        is its pending reason (None: the policy or the cluster will say), and the event's words unless `message` says
        otherwise. Counters (restarts, retries, preemptions) are the caller's, set before the move."""
        check(row.id, row.state, S.PENDING)
        if row.id in self.runs.running:
            self.runs.end_run(s, row, now)
        row.state, row.queued_since = S.PENDING, now
        set_pending(row, reason)
        row.pending_until = None
        add_event(s, row.id, event, message if message is not None else reason.text if reason else "", at=now, **data)
        job = job_of(row, self.profiles)
        self.runs.enqueue(job)
        self.runs.queued(row.id, reason)
        return job

    def to_terminal(self, s: Session, row: JobRow, state: S, now: float, *, event: str, message: str | None = None,
                    why: Reason | None = _KEEP, exit_code: int | None = _KEEP, **data: Any) -> None:
        """End the job in `state`: its run (if any) is taken off its GPUs, or it leaves the queue; a hold or a pending
        reason has nothing left to say. `why` (the reason it ended, stored as `error` with its code) and `exit_code` are
        left as they are unless given (a cancelled job keeps the error of a run that failed before it); an `exit_code`
        given is also its event's first figure. The event says `message`, else `why`'s words."""
        check(row.id, row.state, state)
        if row.id in self.runs.running:
            self.runs.end_run(s, row, now)
        self.runs.dequeued(row.id)
        row.state, row.finished_at = state, now
        set_pending(row, None)
        row.pending_until = row.held_at = row.held_by = None
        if why is not _KEEP:
            set_end(row, why)
        if exit_code is not _KEEP:  # (and its event says it first)
            row.exit_code = exit_code
            data = {"exit_code": exit_code, **data}
        if message is None:
            message = why.text if isinstance(why, Reason) else ""
        add_event(s, row.id, event, message, at=now, **data)

    def lose(self, s: Session, row: JobRow, why: str, now: float) -> None:
        """A run whose workers are gone: requeue the job or fail it, by its restart policy (a cancel asked meanwhile
        wins). A run that never got back into memory (`recover`) has whatever it held closed here."""
        if row.id in self.runs.running:
            self.runs.end_run(s, row, now)
        else:
            s.execute(update(Allocation).where(Allocation.job_id == row.id, Allocation.released_at.is_(None))
                      .values(released_at=now))
            row.started_at = None
        add_event(s, row.id, "lost", why, at=now, attempt=row.attempt)
        if row.cancel_requested:
            self.to_terminal(s, row, S.CANCELLED, now, event="cancelled",
                             message="cancel requested before the run was lost")
        elif row.restart_policy == RestartPolicy.REQUEUE and row.restarts < row.max_restarts:
            row.restarts += 1
            self.to_pending(s, row, now, event="requeued", message=f"restart {row.restarts} of {row.max_restarts}")
        else:
            self.to_terminal(s, row, S.FAILED, now, event="failed", why=Reason(Code.LOST, {"detail": why}),
                             message=f"not restarted ({row.restart_policy}, {row.restarts} of {row.max_restarts} "
                             "restarts used)")


def legal_moves() -> list[tuple[S, S]]:
    """Every (from, to) pair the table allows, for the documentation and the exhaustive test."""
    return [(a, b) for a in S for b in S if b in TRANSITIONS[a]]


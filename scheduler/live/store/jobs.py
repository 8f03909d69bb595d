"""Jobs and arrays as stored: submission, cancellation, holds and releases, changes, requeues, listing."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import CursorResult, Select, Table, bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, make_transient_to_detached
from sqlalchemy.orm.instrumentation import manager_of_class

from scheduler.core.reasons import Code, Reason
from scheduler.live import lifecycle
from scheduler.live import priority_ceilings as ceilings
from scheduler.live.store.events import add_event
from scheduler.live.store.limits import check_pending, time_limit_settings
from scheduler.live.store.models import Decision, Job, JobArray, JobEvent, JobState, User
from scheduler.live.store.priorities import priority_ceiling
from scheduler.live.store.reason_columns import pending_columns
from scheduler.live.store.teams import ACTIVE, submitter_team


def submit(s: Session, user: User, fields: dict[str, Any], *, max_pending: int | None = None,
           note: str | None = None, team: str | None = None) -> tuple[Job, bool]:
    """Store a validated submission. Returns (job, created): a retry with the same `client_token` returns the job the
    first attempt stored, and stores nothing new. With `max_pending`, a new job is refused (PendingLimit) while the
    user already has that many pending (a known retry never is: it adds nothing). `team`: the submitter's team where
    the caller read it in this transaction, under the lock `submitter_team` takes (`store.submission_reads`)."""
    token = fields.get("client_token")
    if token is not None:
        existing = known_submission(s, user.id, token)
        if existing is not None:
            return existing, False
    if max_pending is not None:
        check_pending(s, user, max_pending)
    now = time.time()
    # Read now, in the submission's transaction, not from `user`: the API passes a stand-in from its token cache,
    # and an admin may have moved the user a moment ago.
    if team is None:
        team = submitter_team(s, user.id)
    row = {"user_id": user.id, "team": team, "submitted_at": now, "queued_since": now, "state": JobState.PENDING,
           **fields}
    event = {"ev_at": now, "ev_kind": "submitted", "ev_data": {},
             "ev_message": f"submitted by {user.name}" + (f" ({note})" if note else "")}
    if token is None:
        job = _insert_job(s, row, event)
    else:
        try:
            with s.begin_nested():  # a concurrent retry may insert the same client_token first: then return its job
                job = _insert_job(s, row, event)
        except IntegrityError:
            return s.scalars(select(Job).where(Job.user_id == user.id, Job.client_token == token)).one(), False
    return job, True


# The tables' INSERTs, built once: a Core statement skips the ORM's bulk-insert machinery on every submission.
_JOB_TABLE, _EVENT_TABLE = cast(Table, Job.__table__), cast(Table, JobEvent.__table__)
_INSERT_JOB = insert(_JOB_TABLE).returning(*_JOB_TABLE.c)
_INSERT_EVENT = insert(_EVENT_TABLE).values(job_id=bindparam("ev_job_id"), at=bindparam("ev_at"),
                                            kind=bindparam("ev_kind"), message=bindparam("ev_message"),
                                            data=bindparam("ev_data", type_=_EVENT_TABLE.c.data.type))
_JOB_MANAGER = manager_of_class(Job)
# By the columns a submission gives: a few shapes in practice, but optional fields combine, so the statements kept are
# bounded (all dropped past `_WITH_EVENT_KEPT`): nothing a user sends grows the server's memory without end.
_WITH_EVENT: dict[frozenset[str], Select[Any]] = {}
_WITH_EVENT_KEPT = 64


def _job_with_event(columns: frozenset[str]) -> Select[Any]:
    """INSERT the job and its `submitted` event in one statement (PostgreSQL: a data-modifying WITH), returning the
    job's row; built once per set of columns given."""
    statement = _WITH_EVENT.get(columns)
    if statement is None:
        if len(_WITH_EVENT) >= _WITH_EVENT_KEPT:
            _WITH_EVENT.clear()
        job = (insert(_JOB_TABLE).values({c: bindparam(c, type_=_JOB_TABLE.c[c].type) for c in sorted(columns)})
               .returning(*_JOB_TABLE.c).cte("new_job"))
        event = insert(_EVENT_TABLE).from_select(
            ["job_id", "at", "kind", "message", "data"],
            select(job.c.id, bindparam("ev_at", type_=_EVENT_TABLE.c.at.type),
                   bindparam("ev_kind", type_=_EVENT_TABLE.c.kind.type),
                   bindparam("ev_message", type_=_EVENT_TABLE.c.message.type),
                   bindparam("ev_data", type_=_EVENT_TABLE.c.data.type))).cte("new_event")
        statement = _WITH_EVENT[columns] = select(job).add_cte(event)
    return statement


def _insert_job(s: Session, row: dict[str, Any], event: dict[str, Any]) -> Job:
    """INSERT ... RETURNING the whole row, made a Job of the session as if loaded by a query, and its `submitted`
    event (`event`: its `ev_` parameters): a third of the cost of the ORM's own INSERT ... RETURNING (itself a
    fraction of the unit of work's flush), on the submissions' hot path. (The mapped attributes are the table's
    columns, under the same names.) The instance is made as a query's loader makes one, its attributes put in its
    dict without the events of `Job(**row)` (60 attribute sets a job). On PostgreSQL the job and its event are one
    statement, one round trip; SQLite allows no INSERT in a WITH, and its statements cost no round trip."""
    conn = s.connection()
    job = _JOB_MANAGER.new_instance()
    if conn.dialect.name == "postgresql":
        job.__dict__.update(conn.execute(_job_with_event(frozenset(row)), {**row, **event}).one()._mapping)
    else:
        job.__dict__.update(conn.execute(_INSERT_JOB, row).one()._mapping)
        conn.execute(_INSERT_EVENT, {**event, "ev_job_id": job.id})
    make_transient_to_detached(job)  # its attributes are the stored row's, with no change pending
    s.add(job)
    return job


def check_dependencies(s: Session, user: User, deps: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """A submission's `depends_on` as stored: each job must exist and be the submitter's (an admin's may be anyone's);
    LookupError naming the first that is not (a job of another user reads as missing: its existence is not told)."""
    if not deps:
        return None
    ids = sorted({int(d["job"]) for d in deps})
    owners: dict[int, int] = {i: u for i, u in s.execute(select(Job.id, Job.user_id).where(Job.id.in_(ids)))}
    for job_id in ids:
        if job_id not in owners or (not user.admin and owners[job_id] != user.id):
            raise LookupError(f"no job {job_id} of yours to depend on")
    return [{"job": int(d["job"]), "condition": str(d["condition"])} for d in deps]


def submit_array(s: Session, user: User, fields: dict[str, Any], count: int, max_running: int | None, *,
                 max_pending: int | None = None, note: str | None = None) -> tuple[Job, JobArray, bool]:
    """Store `count` tasks of the submission, sharing a new array (indices 0 .. count - 1). Returns (task 0, the
    array, created); a retry with the same `client_token` (which task 0 carries) returns those the first attempt
    stored. With `max_pending`, PendingLimit if the tasks would take the user past it."""
    token = fields.get("client_token")
    if token is not None:
        existing = known_submission(s, user.id, token)
        if existing is not None and existing.array_id is not None:
            array = s.get(JobArray, existing.array_id)
            assert array is not None
            return existing, array, False
    if max_pending is not None:
        check_pending(s, user, max_pending, adding=count)
    array = JobArray(user_id=user.id, name=fields["name"], count=count, max_running=max_running,
                     submitted_at=time.time())
    s.add(array)
    s.flush()
    first: Job | None = None
    for index in range(count):
        task = {**fields, "array_id": array.id, "array_index": index, "array_max_running": max_running}
        if index:
            task["client_token"] = None
        job, _ = submit(s, user, task, note=note or f"task {index} of array {array.id}")
        first = first or job
    assert first is not None
    return first, array, True


def array_tasks(s: Session, array_id: int) -> list[Job]:
    return list(s.scalars(select(Job).where(Job.array_id == array_id).order_by(Job.array_index)))


def known_submission(s: Session, user_id: int, client_token: str) -> Job | None:
    """The job `user_id` already submitted with `client_token`, if any: a retry of it is no new submission."""
    return s.scalars(select(Job).where(Job.user_id == user_id, Job.client_token == client_token)).one_or_none()


def cancel(s: Session, job: Job) -> Job:
    """Cancel a job. A pending job is cancelled here and now (unless the controller placed it a moment ago: the
    conditional update decides the race); a running one is flagged, and the controller stops its workers."""
    if JobState(job.state).terminal:
        return job
    now = time.time()
    if not lifecycle.cancel_pending(s, job.id, now):
        s.execute(update(Job).where(Job.id == job.id).values(cancel_requested=True))
        add_event(s, job.id, "cancel_requested", "cancel requested; stopping its workers", at=now)
    s.refresh(job)
    return job


def held_reason(job_id: int, by: str) -> Reason:
    """A held job's pending reason: who holds it, and how it may start."""
    return Reason(Code.HELD, {"by": by, "job_id": job_id})


class NotChangeable(RuntimeError):
    """A job control its job's state refuses: a hold of a job not pending, a requeue of one not running, a change of
    one that ended (the API's 409)."""


def hold(s: Session, job: Job, by: str) -> Job:
    """Hold a pending job: it does not start until released (the controller leaves it in the queue, in its place).
    The controller may have placed it a moment ago: the conditional update decides the race, and NotChangeable says
    the job is no longer pending. Holding a held job changes nothing (its holder stays)."""
    now = time.time()
    done = cast("CursorResult[Any]", s.execute(
        update(Job).where(Job.id == job.id, Job.state == JobState.PENDING, Job.held_at.is_(None))
        .values(held_at=now, held_by=by, **pending_columns(held_reason(job.id, by)), pending_until=None)
    )).rowcount
    s.refresh(job)
    if done:
        add_event(s, job.id, "held", f"held by {by}", at=now)
    elif job.state != JobState.PENDING:
        raise NotChangeable(f"job {job.id} is {job.state}: only a pending job can be held" +
                            (" (`corral cancel` stops a running one)" if job.state == JobState.RUNNING else ""))
    return job


def release(s: Session, job: Job, by: str, *, admin: bool) -> Job:
    """Release a held job: it may start again, in its place in the queue. A user releases the holds they placed; an
    admin's hold only an admin releases (Slurm's user and admin holds): PermissionError. NotChangeable for a job that
    is not held (also when released meanwhile: the update is conditional), naming its state: a release that did
    nothing must not read as one that let the job start."""
    if job.held_by is not None and job.held_by != by and not admin:
        raise PermissionError(f"job {job.id} is held by {job.held_by}: only they or an admin may release it")
    now = time.time()
    done = cast("CursorResult[Any]", s.execute(
        update(Job).where(Job.id == job.id, Job.held_at.is_not(None))
        .values(held_at=None, held_by=None, **pending_columns(None), pending_until=None)
    )).rowcount
    s.refresh(job)
    if not done:
        raise NotChangeable(f"job {job.id} is not held (it is {job.state}): there is nothing to release")
    add_event(s, job.id, "released", f"released by {by}: it may start", at=now)
    return job


def _limit_words(limit: float | None) -> str:
    return "none" if limit is None else f"{limit:g} s"


def change_job(s: Session, job: Job, changes: Mapping[str, Any], *, by: str, admin: bool) -> Job:
    """Change a pending or running job's `time_limit_s` (None: none) and/or `priority` (Slurm's `scontrol update
    TimeLimit= Priority=`). Its owner may only lower either; an admin may set any, a time limit beyond the cluster's
    maximum too (the maximum bounds what users ask for). A run that has lasted longer than its new limit is stopped
    at the controller's next pass, timed out. A new priority leaves the job's priority class (it no longer has the
    class's figure), and a user's must be within their ceiling (`priority_ceilings`: AboveCeiling, a
    PermissionError). PermissionError for a user raising one, NotChangeable for a job that ended (also when it ends
    meanwhile: the update is conditional). Each change is an event."""
    old = {"time_limit_s": job.time_limit_s, "priority": job.priority}
    if not admin:
        limit = changes.get("time_limit_s", old["time_limit_s"])
        if old["time_limit_s"] is not None and (limit is None or limit > old["time_limit_s"]):
            raise PermissionError(f"time_limit_s: only an admin raises a job's time limit "
                                  f"({_limit_words(old['time_limit_s'])} now); you may lower it")
        most = time_limit_settings(s)[1]  # a job from before the maximum has none: its owner may not give it more
        if "time_limit_s" in changes and limit is not None and most is not None and limit > most:
            raise PermissionError(f"time_limit_s: {limit:g} s is more than the cluster's maximum time limit, "
                                  f"{most:g} s (an admin sets it: `corral time-limits`)")
        if changes.get("priority", old["priority"]) > old["priority"]:
            raise PermissionError(f"priority: only an admin raises a job's priority ({old['priority']} now); you may "
                                  "lower it")
        if "priority" in changes and changes["priority"] != old["priority"]:
            # A new priority is a figure the job gives (it leaves its class), held to the owner's ceiling like a
            # submission's: lowering a job of a class above the ceiling goes to the ceiling or below.
            ceilings.check(priority_ceiling(s, job.user_id), priority=changes["priority"])
    now = time.time()
    values = dict(changes)
    if values.get("priority", old["priority"]) != old["priority"]:
        values["priority_class"] = None  # its class's figure no longer: the job says what it has
    done = cast("CursorResult[Any]", s.execute(
        update(Job).where(Job.id == job.id, Job.state.in_(ACTIVE)).values(**values, changed_at=now)
    )).rowcount
    s.refresh(job)
    if not done:
        raise NotChangeable(f"job {job.id} is {job.state}: only a pending or running job can change")
    if "time_limit_s" in changes and changes["time_limit_s"] != old["time_limit_s"]:
        add_event(s, job.id, "time_limit_changed", f"time limit {_limit_words(old['time_limit_s'])} -> "
                  f"{_limit_words(changes['time_limit_s'])} by {by}", at=now, time_limit_s=changes["time_limit_s"])
    if "priority" in changes and changes["priority"] != old["priority"]:
        add_event(s, job.id, "priority_changed", f"priority {old['priority']} -> {changes['priority']} by {by}", at=now,
                  priority=changes["priority"])
    return job


def request_requeue(s: Session, job: Job, by: str, *, hold: bool = False) -> Job:
    """Ask the controller to checkpoint a running job and put it back in the queue, in its place, spending no restart
    (Slurm's `scontrol requeue`); with `hold` (`requeuehold`), it then waits, held by `by`, until released. The
    controller does it at its next pass, unless the run ends first. NotChangeable for a job not running (the update is
    conditional: also when it ends meanwhile)."""
    now = time.time()
    values: dict[str, Any] = {"requeue_by": by, "changed_at": now}
    if hold:
        values |= {"held_at": now, "held_by": by}
    done = cast("CursorResult[Any]", s.execute(
        update(Job).where(Job.id == job.id, Job.state == JobState.RUNNING).values(**values))).rowcount
    s.refresh(job)
    if not done:
        hint = " (`corral hold` keeps a pending one from starting)" if job.state == JobState.PENDING else ""
        raise NotChangeable(f"job {job.id} is {job.state}: only a running job can be requeued{hint}")
    add_event(s, job.id, "requeue_requested", f"requeue requested by {by}" + (", to be held" if hold else ""), at=now)
    return job


def list_jobs(s: Session, *, state: str | None = None, user_id: int | None = None, team: str | None = None,
              limit: int = 100, offset: int = 0) -> tuple[Sequence[Job], int]:
    """One page of jobs, newest first, and how many match in all."""
    q = select(Job)
    if state is not None:
        q = q.where(Job.state == state)
    if user_id is not None:
        q = q.where(Job.user_id == user_id)
    if team is not None:
        q = q.where(Job.team == team)
    total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
    jobs = s.scalars(q.order_by(Job.id.desc()).limit(limit).offset(offset)).all()
    return jobs, total


def recent_decisions(s: Session, job_id: int, limit: int = 10) -> list[Decision]:
    """A job's latest decisions, oldest first."""
    rows = s.scalars(
        select(Decision).where(Decision.job_id == job_id).order_by(Decision.id.desc()).limit(limit)
    ).all()
    return list(reversed(rows))


def count_by_state(s: Session) -> dict[str, int]:
    return {state: n for state, n in s.execute(select(Job.state, func.count()).group_by(Job.state))}


def queue_positions(s: Session) -> dict[int, int]:
    """Every pending job's place in the queue, 1 first, in submission order (the controller's queue order; a policy
    may still start a later job first, e.g. a smaller one that fits). A held job has none: it waits for no one."""
    ids = s.scalars(select(Job.id).where(Job.state == JobState.PENDING, Job.held_at.is_(None))
                    .order_by(Job.submitted_at, Job.id))
    return {job_id: i for i, job_id in enumerate(ids, start=1)}

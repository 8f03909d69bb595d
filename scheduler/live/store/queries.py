"""The units of work the API, the CLI and the controller share: users and tokens, submission, cancellation, listing.

Each function takes an open session and leaves committing to the caller (`Store.session()` commits on success), so a
request that fails validation half-way stores nothing.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from typing import Any, cast

from sqlalchemy import CursorResult, bindparam, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from scheduler.core.model import DEFAULT_TEAM
from scheduler.core.reasons import Code, Reason
from scheduler.live import lifecycle
from scheduler.live import priority_ceilings as ceilings
from scheduler.live.store.events import add_event
from scheduler.live.store.models import (
    Allocation,
    ApiToken,
    ClusterFabric,
    Decision,
    Gpu,
    Job,
    JobArray,
    JobEvent,
    JobState,
    LimitDefaults,
    Node,
    PolicyVersion,
    PriorityClass,
    StoreIdentity,
    Team,
    User,
    UserLimits,
)
from scheduler.live.store.reason_columns import pending_columns

TOKEN_PREFIX = "corral_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# Letters, digits, `.`, `_` and `-`, not starting with `-`: a name can never be mistaken for a command-line flag
# (`--user $USER --admin` with USER unset would otherwise create a user called "--admin").
USER_NAME = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}")


def check_user_name(name: str) -> str:
    """`name` if it is a valid user name, else ValueError saying what is wrong with it."""
    if not name:
        raise ValueError("must not be empty")
    if name.startswith("-"):
        raise ValueError(f"{name!r} starts with '-': is a shell variable unset before a flag?")
    if not USER_NAME.fullmatch(name):
        raise ValueError(f"{name!r}: use 1 to 64 letters, digits, '.', '_' or '-'")
    return name


def ensure_user(s: Session, name: str, *, admin: bool = False, team: str | None = None) -> User:
    """The user called `name`, created if new (in `team`, else `default`); `admin=True` promotes an existing user
    (never demotes); `team` moves an existing one (TeamConflict while they have jobs pending or running)."""
    user = s.scalars(select(User).where(User.name == name)).one_or_none()
    if team is not None and team_by_name(s, team) is None:
        raise UnknownTeam(team)
    if user is None:
        user = User(name=check_user_name(name), admin=admin, created_at=time.time(), team=team or DEFAULT_TEAM)
        s.add(user)
        s.flush()
    else:
        if admin and not user.admin:
            user.admin = True
        if team is not None and team != user.team:
            move_user(s, user, team)
    return user


def create_token(s: Session, user_name: str, *, admin: bool = False, expires_at: float | None = None,
                 team: str | None = None) -> str:
    """A new bearer token for `user_name` (created if new, in `team`; an existing user is moved to `team` if given).
    Only its hash is stored: show the token once."""
    user = ensure_user(s, user_name, admin=admin, team=team)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    s.add(ApiToken(user_id=user.id, token_hash=hash_token(token), prefix=token[: len(TOKEN_PREFIX) + 6],
                   created_at=time.time(), expires_at=expires_at))
    return token


def token_usable(revoked: bool, expires_at: float | None, now: float | None = None) -> bool:
    return not revoked and (expires_at is None or expires_at > (time.time() if now is None else now))


def user_for_token(s: Session, token: str) -> tuple[User, float | None] | None:
    """(the token's user, the token's expiry) if the token exists, is not revoked and has not expired."""
    row = s.execute(
        select(User, ApiToken.revoked, ApiToken.expires_at).join(ApiToken)
        .where(ApiToken.token_hash == hash_token(token))
    ).one_or_none()
    if row is None or not token_usable(row.revoked, row.expires_at):
        return None
    return row.User, row.expires_at


def token_refusal(s: Session, token: str, now: float | None = None) -> str:
    """Why `token` does not authenticate, for the 401's message. Saying "expired" or "revoked" tells nothing to a
    guesser: only the holder of the (unguessable) token can learn it, and it tells them to ask for a new one."""
    row = s.execute(select(ApiToken.revoked, ApiToken.expires_at).where(ApiToken.token_hash == hash_token(token))
                    ).one_or_none()
    if row is None:
        return "invalid token"
    if row.revoked:
        return "token revoked"
    if row.expires_at is not None and row.expires_at <= (time.time() if now is None else now):
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(row.expires_at))
        return f"token expired at {when}"
    return "invalid token"


def list_tokens(s: Session, *, user_id: int | None = None) -> list[ApiToken]:
    """Every token (never the token itself: only its prefix), oldest first, with its user loaded."""
    query = select(ApiToken).options(selectinload(ApiToken.user)).order_by(ApiToken.id)
    if user_id is not None:
        query = query.where(ApiToken.user_id == user_id)
    return list(s.scalars(query))


def find_tokens(s: Session, key: str) -> list[ApiToken]:
    """Tokens named by `key`: a numeric id, or a prefix as `corral token list` prints it (`corral_AbC123`)."""
    if key.isdigit():
        return [t for t in [s.get(ApiToken, int(key))] if t is not None]
    return list(s.scalars(select(ApiToken).where(ApiToken.prefix == key).options(selectinload(ApiToken.user))))


def revoke_token(s: Session, token: ApiToken) -> ApiToken:
    if not token.revoked:
        token.revoked = True
        token.revoked_at = time.time()
    return token


def submit(s: Session, user: User, fields: dict[str, Any], *, max_pending: int | None = None,
           note: str | None = None) -> tuple[Job, bool]:
    """Store a validated submission. Returns (job, created): a retry with the same `client_token` returns the job the
    first attempt stored, and stores nothing new. With `max_pending`, a new job is refused (PendingLimit) while the
    user already has that many pending (a known retry never is: it adds nothing)."""
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
    team = submitter_team(s, user.id)
    row = {"user_id": user.id, "team": team, "submitted_at": now, "queued_since": now, "state": JobState.PENDING,
           **fields}
    # INSERT ... RETURNING the whole row as a Job: a fraction of the cost of the unit of work's flush, on a hot path.
    if token is None:
        job = s.scalars(insert(Job).returning(Job), [row]).one()
    else:
        try:
            with s.begin_nested():  # a concurrent retry may insert the same client_token first: then return its job
                job = s.scalars(insert(Job).returning(Job), [row]).one()
        except IntegrityError:
            return s.scalars(select(Job).where(Job.user_id == user.id, Job.client_token == token)).one(), False
    s.execute(insert(JobEvent), [{"job_id": job.id, "at": now, "kind": "submitted",
                                  "message": f"submitted by {user.name}" + (f" ({note})" if note else ""),
                                  "data": {}}])
    return job, True


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


# ---- reads and writes for the API ---------------------------------------------------------------------------------


def user_names(s: Session, user_ids: Collection[int]) -> dict[int, str]:
    """Names by id in one query, so a page of jobs does not load its users one by one."""
    if not user_ids:
        return {}
    return {uid: name for uid, name in s.execute(select(User.id, User.name).where(User.id.in_(set(user_ids))))}


def user_by_name(s: Session, name: str) -> User | None:
    return s.scalars(select(User).where(User.name == name)).one_or_none()


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


def recent_decisions(s: Session, job_id: int, limit: int = 10) -> list[Decision]:
    """A job's latest decisions, oldest first."""
    rows = s.scalars(
        select(Decision).where(Decision.job_id == job_id).order_by(Decision.id.desc()).limit(limit)
    ).all()
    return list(reversed(rows))


def count_by_state(s: Session) -> dict[str, int]:
    return {state: n for state, n in s.execute(select(Job.state, func.count()).group_by(Job.state))}


def open_allocations_with_jobs(s: Session) -> list[tuple[Allocation, Job, str]]:
    """Every open allocation with its job and the job's user name: who sits on which GPU now."""
    rows = s.execute(
        select(Allocation, Job, User.name).join(Job, Allocation.job_id == Job.id).join(User, Job.user_id == User.id)
        .where(Allocation.released_at.is_(None)).order_by(Allocation.gpu, Allocation.job_id)
    )
    return [(alloc, job, name) for alloc, job, name in rows]


def nodes_with_gpus(s: Session) -> list[Node]:
    return list(s.scalars(select(Node).options(selectinload(Node.gpus)).order_by(Node.index)).all())


FABRIC_ROW = 1  # cluster_fabric's one row (migration 0014 inserts it)


def fabric(s: Session) -> str | None:
    """The fabric preset the live cluster model sits on (`corral serve --fabric`), None: none."""
    return s.scalars(select(ClusterFabric.name).where(ClusterFabric.id == FABRIC_ROW)).first()


def set_fabric(s: Session, name: str | None) -> None:
    """Record the fabric preset the live cluster model sits on (None: none); the caller validates the name first."""
    s.execute(update(ClusterFabric).where(ClusterFabric.id == FABRIC_ROW).values(name=name, set_at=time.time()))


_ACTIVE_POLICY = select(PolicyVersion.name).where(PolicyVersion.active.is_(True))  # built once: read every pass


def active_policy(s: Session) -> str | None:
    return s.scalars(_ACTIVE_POLICY).first()


def activate_policy(s: Session, name: str, *, by: str) -> PolicyVersion:
    """Make `name` the one active policy (created if new). The caller validates the name first."""
    now = time.time()
    s.execute(update(PolicyVersion).where(PolicyVersion.active.is_(True), PolicyVersion.name != name)
              .values(active=False))
    row = s.scalars(select(PolicyVersion).where(PolicyVersion.name == name)).one_or_none()
    if row is None:
        row = PolicyVersion(name=name, created_at=now)
        s.add(row)
    row.active, row.activated_at, row.activated_by = True, now, by
    s.flush()
    return row


def queue_positions(s: Session) -> dict[int, int]:
    """Every pending job's place in the queue, 1 first, in submission order (the controller's queue order; a policy
    may still start a later job first, e.g. a smaller one that fits). A held job has none: it waits for no one."""
    ids = s.scalars(select(Job.id).where(Job.state == JobState.PENDING, Job.held_at.is_(None))
                    .order_by(Job.submitted_at, Job.id))
    return {job_id: i for i, job_id in enumerate(ids, start=1)}


# ---- teams --------------------------------------------------------------------------------------------------------


class UnknownTeam(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"team {name!r} does not exist")
        self.name = name


class TeamConflict(RuntimeError):
    """A change the current state forbids (a team with active jobs deleted, a user moved while their jobs run)."""


ACTIVE = (JobState.PENDING, JobState.RUNNING)


def team_by_name(s: Session, name: str) -> Team | None:
    return s.scalars(select(Team).where(Team.name == name)).one_or_none()


def list_teams(s: Session) -> list[Team]:
    return list(s.scalars(select(Team).order_by(Team.name)))


def team_quotas(s: Session) -> tuple[tuple[str, float, float | None], ...]:
    """(name, quota, borrowing limit) of every team, by name: what the controller re-reads every pass (plain rows, not
    ORM objects: it costs a fraction as much)."""
    return tuple((name, quota, borrow) for name, quota, borrow in s.execute(_TEAM_QUOTAS))


_TEAM_QUOTAS = select(Team.name, Team.quota_gpus, Team.borrow_limit_gpus).order_by(Team.name)


def cluster_gpus(s: Session) -> int:
    """GPUs the controller registered (0 before its first start)."""
    return s.scalar(select(func.count()).select_from(Gpu)) or 0


def active_jobs_of_user(s: Session, user_id: int) -> int:
    return s.scalar(select(func.count()).select_from(Job).where(Job.user_id == user_id, Job.state.in_(ACTIVE))) or 0


def active_jobs_of_team(s: Session, name: str) -> int:
    return s.scalar(select(func.count()).select_from(Job).where(Job.team == name, Job.state.in_(ACTIVE))) or 0


def move_user(s: Session, user: User, team: str) -> User:
    """Put `user` in `team`. Refused (TeamConflict) while they have jobs pending or running: those run under the
    quota they were submitted to, and moving the user alone would split their work across two teams."""
    if team_by_name(s, team) is None:
        raise UnknownTeam(team)
    # The user's row locked before counting: a submission reads the team under a share lock (submitter_team), so it
    # cannot slip a job under the old team between this count and the move (PostgreSQL; SQLite has one writer).
    s.execute(select(User.id).where(User.id == user.id).with_for_update())
    active = active_jobs_of_user(s, user.id)
    if active:
        raise TeamConflict(f"user {user.name!r} has {active} job(s) pending or running in team {user.team!r}; "
                           "move them when those have finished or been cancelled")
    user.team = team
    return user


def submitter_team(s: Session, user_id: int) -> str:
    """The team a job submitted now by `user_id` runs under, read under a share lock on the user's row: a move or a
    team's deletion (which update that row) then waits for the submission to commit, and sees its job."""
    team = s.scalar(_SUBMITTER_TEAM, {"user_id": user_id})
    return team or DEFAULT_TEAM


# Built once: it runs on every submission, and building the statement cost more than running it.
_SUBMITTER_TEAM = select(User.team).where(User.id == bindparam("user_id")).with_for_update(read=True)


def lock_teams(s: Session) -> None:
    """Serialise the writers of quotas (PostgreSQL; SQLite has one writer anyway) by locking the `default` team's
    row, which always exists: two admins raising quotas at once cannot both pass the check against the cluster's size.
    Read the quotas in a later statement, so it sees what the writer before committed."""
    s.execute(select(Team.id).where(Team.name == DEFAULT_TEAM).with_for_update())


def quota_total(s: Session, *, without: str | None = None) -> float:
    """The teams' quotas added up, leaving out the team `without` (the one being changed)."""
    query = select(func.coalesce(func.sum(Team.quota_gpus), 0.0))
    if without is not None:
        query = query.where(Team.name != without)
    return float(s.scalar(query) or 0.0)


def create_team(s: Session, name: str, quota_gpus: float, borrow_limit_gpus: float | None) -> Team:
    """A new team (TeamConflict if the name is taken, even by a concurrent request). The caller validates the
    numbers and their sum against the cluster."""
    if team_by_name(s, name) is not None:
        raise TeamConflict(f"team {name!r} already exists")
    now = time.time()
    team = Team(name=check_user_name(name), quota_gpus=quota_gpus, borrow_limit_gpus=borrow_limit_gpus,
                created_at=now, updated_at=now)
    try:
        with s.begin_nested():
            s.add(team)
            s.flush()
    except IntegrityError:
        raise TeamConflict(f"team {name!r} already exists") from None
    return team


# ---- priority classes (scheduler.core.priorities) -------------------------------------------------------------------


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


def delete_team(s: Session, team: Team) -> list[str]:
    """Remove `team`; its members move to `default` (their names are returned). TeamConflict for `default`, and while
    the team has jobs pending or running (they run under its quota)."""
    if team.name == DEFAULT_TEAM:
        raise TeamConflict(f"the {DEFAULT_TEAM!r} team cannot be deleted: users without a team belong to it")
    moved = list(s.scalars(select(User.name).where(User.team == team.name).order_by(User.name)))
    # Members first, then the count: the update locks their rows, so a submission in flight (which reads its team
    # under a share lock) either committed before, and is counted, or waits and lands in `default`.
    s.execute(update(User).where(User.team == team.name).values(team=DEFAULT_TEAM))
    active = active_jobs_of_team(s, team.name)
    if active:
        raise TeamConflict(f"team {team.name!r} has {active} job(s) pending or running; delete it when they have "
                           "finished or been cancelled")
    s.delete(team)
    s.flush()
    return moved


def list_users(s: Session) -> list[tuple[User, int]]:
    """Every user by name, with how many jobs they have pending or running."""
    active = (select(Job.user_id, func.count().label("n")).where(Job.state.in_(ACTIVE)).group_by(Job.user_id)
              .subquery())
    rows = s.execute(select(User, func.coalesce(active.c.n, 0)).outerjoin(active, active.c.user_id == User.id)
                     .order_by(User.name))
    return [(user, int(n)) for user, n in rows]


def team_usage(s: Session) -> dict[str, dict[str, float]]:
    """Each team's GPUs now: `in_use_gpus` (its running jobs' GPUs, shares counted as fractions), `borrowed_gpus`
    (beyond its quota), `lent_gpus` (its idle quota that borrowers hold), `pending_jobs` and `running_jobs`.

    Borrowers first take GPUs in no team's quota; what they borrow beyond those is lent by the teams under their
    quota, in proportion to each one's idle quota (GPUs are not owned one by one, so no finer attribution exists)."""
    teams = list_teams(s)
    out: dict[str, dict[str, float]] = {
        t.name: {"in_use_gpus": 0.0, "borrowed_gpus": 0.0, "lent_gpus": 0.0, "pending_jobs": 0.0,
                 "running_jobs": 0.0} for t in teams}
    rows = s.execute(select(Job.team, Job.state, func.count(), func.sum(Job.num_gpus))
                     .where(Job.state.in_(ACTIVE)).group_by(Job.team, Job.state))
    for team, state, n, gpus in rows:
        u = out.get(team)
        if u is None:  # a job of a team deleted since (the API refuses that while it has active jobs)
            continue
        if state == JobState.RUNNING:
            u["running_jobs"] += n
            u["in_use_gpus"] += float(gpus or 0.0)
        else:
            u["pending_jobs"] += n
    idle: dict[str, float] = {}
    for t in teams:
        u = out[t.name]
        u["borrowed_gpus"] = max(0.0, u["in_use_gpus"] - t.quota_gpus)
        idle[t.name] = max(0.0, t.quota_gpus - u["in_use_gpus"])
    unassigned = max(0.0, cluster_gpus(s) - sum(t.quota_gpus for t in teams))
    lent = max(0.0, sum(u["borrowed_gpus"] for u in out.values()) - unassigned)
    total_idle = sum(idle.values())
    if lent > 0 and total_idle > 0:
        for name, free in idle.items():
            out[name]["lent_gpus"] = min(free, lent * free / total_idle)
    return out


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


# ---- fair use: per-user limits ------------------------------------------------------------------------------------


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


def has_legacy_files(s: Session) -> bool:
    """Whether this store held jobs before it had an id (migration 0019): their files were then kept directly under
    CORRAL_HOME, and it may claim them (`job_files.claim_legacy_files`)."""
    row = s.get(StoreIdentity, 1)
    return bool(row is not None and row.legacy_files)


def time_limit_settings(s: Session) -> tuple[float | None, float | None]:
    """(the time limit a job gets when it gives none, the most one may give): None where an admin set neither."""
    row = s.get(LimitDefaults, 1)
    return (row.default_time_limit_s, row.max_time_limit_s) if row is not None else (None, None)


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


def apply_time_limit(s: Session, fields: dict[str, Any]) -> None:
    """A submission's time limit, in place: the cluster's default when it gives none, or its maximum when there is
    no default (with a maximum, every job is bounded); ValueError (naming `time_limit_s`) when it gives more than the
    cluster's maximum."""
    default, most = time_limit_settings(s)
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

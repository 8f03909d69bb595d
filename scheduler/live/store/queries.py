"""The units of work the API, the CLI and the controller share: users and tokens, submission, cancellation, listing.

Each function takes an open session and leaves committing to the caller (`Store.session()` commits on success), so a
request that fails validation half-way stores nothing.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from scheduler.live.store.models import (
    Allocation,
    ApiToken,
    Decision,
    Job,
    JobEvent,
    JobState,
    Node,
    PolicyVersion,
    User,
)

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


def ensure_user(s: Session, name: str, *, admin: bool = False) -> User:
    """The user called `name`, created if new; `admin=True` promotes an existing user (never demotes)."""
    user = s.scalars(select(User).where(User.name == name)).one_or_none()
    if user is None:
        user = User(name=check_user_name(name), admin=admin, created_at=time.time())
        s.add(user)
        s.flush()
    elif admin and not user.admin:
        user.admin = True
    return user


def create_token(s: Session, user_name: str, *, admin: bool = False, expires_at: float | None = None) -> str:
    """A new bearer token for `user_name` (created if new). Only its hash is stored: show the token once."""
    user = ensure_user(s, user_name, admin=admin)
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


def add_event(s: Session, job_id: int, kind: str, message: str = "", *, at: float | None = None,
              **data: Any) -> None:
    s.add(JobEvent(job_id=job_id, at=time.time() if at is None else at, kind=kind, message=message, data=data))


def submit(s: Session, user: User, fields: dict[str, Any]) -> tuple[Job, bool]:
    """Store a validated submission. Returns (job, created): a retry with the same `client_token` returns the job the
    first attempt stored, and stores nothing new."""
    token = fields.get("client_token")
    if token is not None:
        existing = s.scalars(select(Job).where(Job.user_id == user.id, Job.client_token == token)).one_or_none()
        if existing is not None:
            return existing, False
    now = time.time()
    job = Job(user_id=user.id, submitted_at=now, queued_since=now, state=JobState.PENDING, **fields)
    if token is None:
        s.add(job)
        s.flush()
    else:
        try:
            with s.begin_nested():  # a concurrent retry may insert the same client_token first: then return its job
                s.add(job)
                s.flush()
        except IntegrityError:
            return s.scalars(select(Job).where(Job.user_id == user.id, Job.client_token == token)).one(), False
    add_event(s, job.id, "submitted", f"submitted by {user.name}", at=now)
    return job, True


def cancel(s: Session, job: Job) -> Job:
    """Cancel a job. A pending job is cancelled here and now (unless the controller placed it a moment ago: the
    conditional update decides the race); a running one is flagged, and the controller stops its workers."""
    if JobState(job.state).terminal:
        return job
    now = time.time()
    done = s.execute(
        update(Job).where(Job.id == job.id, Job.state == JobState.PENDING)
        .values(state=JobState.CANCELLED, finished_at=now, cancel_requested=True, pending_reason=None)
    ).rowcount
    if done:
        add_event(s, job.id, "cancelled", "cancelled while pending", at=now)
    else:
        s.execute(update(Job).where(Job.id == job.id).values(cancel_requested=True))
        add_event(s, job.id, "cancel_requested", "cancel requested; stopping its workers", at=now)
    s.refresh(job)
    return job


def list_jobs(s: Session, *, state: str | None = None, user_id: int | None = None, limit: int = 100,
              offset: int = 0) -> tuple[Sequence[Job], int]:
    """One page of jobs, newest first, and how many match in all."""
    q = select(Job)
    if state is not None:
        q = q.where(Job.state == state)
    if user_id is not None:
        q = q.where(Job.user_id == user_id)
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


def active_policy(s: Session) -> str | None:
    return s.scalars(select(PolicyVersion.name).where(PolicyVersion.active.is_(True))).first()


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
    may still start a later job first, e.g. a smaller one that fits)."""
    ids = s.scalars(select(Job.id).where(Job.state == JobState.PENDING).order_by(Job.submitted_at, Job.id))
    return {job_id: i for i, job_id in enumerate(ids, start=1)}

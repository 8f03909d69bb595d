"""Users and their API tokens: creating, authenticating, listing and revoking."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Collection

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from scheduler.core.model import DEFAULT_TEAM
from scheduler.live.store.models import ApiToken, Job, User
from scheduler.live.store.names import check_user_name
from scheduler.live.store.teams import ACTIVE, UnknownTeam, move_user, team_by_name

TOKEN_PREFIX = "corral_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


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


def user_names(s: Session, user_ids: Collection[int]) -> dict[int, str]:
    """Names by id in one query, so a page of jobs does not load its users one by one."""
    if not user_ids:
        return {}
    return {uid: name for uid, name in s.execute(select(User.id, User.name).where(User.id.in_(set(user_ids))))}


def user_by_name(s: Session, name: str) -> User | None:
    return s.scalars(select(User).where(User.name == name)).one_or_none()


def list_users(s: Session) -> list[tuple[User, int]]:
    """Every user by name, with how many jobs they have pending or running."""
    active = (select(Job.user_id, func.count().label("n")).where(Job.state.in_(ACTIVE)).group_by(Job.user_id)
              .subquery())
    rows = s.execute(select(User, func.coalesce(active.c.n, 0)).outerjoin(active, active.c.user_id == User.id)
                     .order_by(User.name))
    return [(user, int(n)) for user, n in rows]

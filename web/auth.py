"""Bearer-token authentication and the ownership rule (a user sees their own jobs; an admin sees everyone's).

Every protected blueprint runs `authenticate` before its views. Token lookups are cached in memory for `TOKEN_TTL_S`:
a submission then costs one write and no token query, which is what lets SQLite take hundreds of submissions a second.
Revocation still takes effect at once: each request first reads how many tokens are revoked and the newest revocation
time (one single-row aggregate over the small token table: no join, no ORM), and the cache is dropped when either
changed. A token revoked with `corral token revoke`, through the API or through another replica stops working on the
next request. An expired token is refused on the first request after its expiry, cached or not.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from flask import Flask, current_app, g, request
from flask_smorest import Blueprint, abort
from sqlalchemy import func, select

from scheduler.live.store import Store
from scheduler.live.store.models import ApiToken
from scheduler.live.store.queries import hash_token, token_refusal, user_for_token

TOKEN_TTL_S = 30.0
REVOCATION_POLL_S = 0.0  # check on every request; raise it to trade revocation delay for one query less
CACHE_KEY = "corral.token_cache"
# What runs once a request's caller is known (web.fair_use.admit: the per-user request limits), set by its init_app.
AUTHENTICATED_KEY = "corral.on_authenticated"
# How many tokens are revoked, and when the last was: either moves on a revoke. Built once: it runs on every request,
# and building the statement cost more than running it.
REVOCATIONS = select(func.count(), func.max(ApiToken.revoked_at)).where(ApiToken.revoked.is_(True))
SECURITY_SCHEME = "bearerAuth"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a detached snapshot of the user, safe to cache and to share between threads."""

    id: int
    name: str
    admin: bool
    expires_at: float | None = None  # the token's expiry (wall clock), None if it never expires


class TokenCache:
    """Token hash → (expiry, principal). Unknown tokens are not cached, so a token created a moment ago works at once."""

    def __init__(self, ttl_s: float = TOKEN_TTL_S, poll_s: float = REVOCATION_POLL_S) -> None:
        self.ttl_s = ttl_s
        self.poll_s = poll_s
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()
        self._polled_at = -float("inf")
        self._last_revocation: tuple[object, ...] | None = None

    def get(self, token_hash: str) -> Principal | None:
        with self._lock:
            entry = self._entries.get(token_hash)
            if entry is None:
                return None
            principal = entry[1]
            expired = principal.expires_at is not None and principal.expires_at <= time.time()
            if entry[0] < time.monotonic() or expired:
                del self._entries[token_hash]
                return None
            return principal

    def put(self, token_hash: str, principal: Principal) -> None:
        with self._lock:
            self._entries[token_hash] = (time.monotonic() + self.ttl_s, principal)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def sync_revocations(self, store: Store) -> None:
        """Drop every cached token when the store's revocations changed (checked at most every `poll_s`)."""
        now = time.monotonic()
        if now - self._polled_at < self.poll_s:
            return
        with store.reads.connect() as conn:  # (no transaction: one statement)
            newest = tuple(conn.execute(REVOCATIONS).one())
        with self._lock:
            self._polled_at = now
            if newest != self._last_revocation:
                self._last_revocation = newest
                self._entries.clear()


def init_app(app: Flask, ttl_s: float = TOKEN_TTL_S) -> None:
    app.extensions[CACHE_KEY] = TokenCache(ttl_s)


# `corral token create` writes to the store its own environment names: run with another CORRAL_HOME (a shell without
# it means ~/.corral) it makes a token in another store, which this server never sees. Say so where the hint is.
HOW_TO_CREATE = "`corral token create` run with this server's CORRAL_HOME (or DATABASE_URL)"


def _unauthorized(message: str) -> None:
    abort(401, message=message, headers={"WWW-Authenticate": 'Bearer realm="corral"'})


def lookup(token: str) -> Principal | None:
    cache: TokenCache = current_app.extensions[CACHE_KEY]
    store: Store = current_app.extensions["corral.store"]
    cache.sync_revocations(store)
    key = hash_token(token)
    principal = cache.get(key)
    if principal is not None:
        return principal
    with store.session() as s:
        found = user_for_token(s, token)
        if found is None:
            return None
        user, expires_at = found
        principal = Principal(user.id, user.name, user.admin, expires_at)
    cache.put(key, principal)
    return principal


def authenticate() -> None:
    """`before_request` of protected blueprints: a valid `Authorization: Bearer TOKEN`, or 401."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        _unauthorized(f"missing bearer token: send 'Authorization: Bearer TOKEN' (create one with {HOW_TO_CREATE})")
    principal = lookup(token)
    if principal is None:
        with current_app.extensions["corral.store"].session() as s:  # only refusals pay for this second query
            reason = token_refusal(s, token)
        _unauthorized(f"{reason}: create a new one with {HOW_TO_CREATE}")
    g.principal = principal
    admit = current_app.extensions.get(AUTHENTICATED_KEY)
    if admit is not None:
        admit(principal)


def protect(blp: Blueprint) -> Blueprint:
    """Require a token on every route of `blp`. (The OpenAPI document declares bearer auth for every operation; the
    open ones, like health, opt out with `security=[]`.)"""
    blp.before_request(authenticate)
    return blp


def caller() -> Principal:
    principal: Principal = g.principal
    return principal


def require_admin() -> Principal:
    who = caller()
    if not who.admin:
        abort(403, message=f"user {who.name!r} is not an admin")
    return who


def require_owner(job_id: int, owner_id: int) -> None:
    """403 unless the caller owns the job or is an admin. (The job's existence is not secret: ids are sequential.)"""
    who = caller()
    if owner_id != who.id and not who.admin:
        abort(403, message=f"job {job_id} belongs to another user")

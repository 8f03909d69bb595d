"""Fair use over HTTP: the per-user limits (`scheduler.live.store.queries.Limits`) on requests, submissions and
what-ifs. Admins are exempt from all of them.

- `request_rate` / `request_burst`: a token bucket that every authenticated request draws on (`admit`, run by
  `web.auth.authenticate` once it knows the caller), before its view reads anything. A request takes one token, and
  its answer one more per `ANSWER_BYTES_PER_TOKEN` (charged once it is made, which may leave the bucket in debt, down
  to minus its burst): a full 1,000-job list (about 1 MB) costs 16 small ones, as it costs the server. Past it: 429
  naming `request_rate`, with Retry-After.
- requests in progress: at most `CORRAL_MAX_IN_FLIGHT` (the app's config; `corral serve --max-requests-per-user`) per
  user at once, so one user's many threads cannot hold every one of the server's. Past it: 429 with Retry-After 1.

- `max_pending`: counted in the submission's own transaction, under a lock on the user's row
  (`queries.check_pending`), so it holds under concurrent submissions and across replicas sharing the database. Past
  it: 429 naming `max_pending`, without Retry-After (when a slot frees depends on the scheduler).
- `submit_rate` / `submit_burst` and `whatif_per_min`: token buckets kept in this process, per user and per API
  replica (thread-safe; several replicas each keep their own, so spreading requests over N replicas gets up to N
  times the rate). Past them: 429 with Retry-After, the seconds until the bucket holds a token again.

A retry with a client_token the user already submitted is no new submission: it is neither counted nor refused.
The limits are read from the store at most every `LIMITS_TTL_S` per user; a change made through this replica's API
applies at once, one made through another replica within that time. The clock is `time.monotonic`, or the
`CORRAL_CLOCK` callable in the app's config (the tests drive time with it instead of sleeping).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flask import Flask, Response, current_app, g, request
from flask_smorest import abort

from scheduler.live.store import queries as q
from web.api.context import store
from web.auth import AUTHENTICATED_KEY, Principal

STATE_KEY = "corral.fair_use"
CLOCK_CONFIG = "CORRAL_CLOCK"
LIMITS_TTL_S = 5.0
SUBMIT, WHATIF, REQUEST = "submit", "whatif", "request"
IN_FLIGHT_CONFIG = "CORRAL_MAX_IN_FLIGHT"
DEFAULT_MAX_IN_FLIGHT = 8  # half of `corral serve`'s 16 threads; a dashboard sends at most 3 requests at once
ANSWER_BYTES_PER_TOKEN = 64 * 1024
_state_lock = threading.Lock()


class TokenBucket:
    """`burst` tokens at most, refilled at `rate` per second; a request takes one."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate, self.burst, self.tokens, self.stamp = rate, burst, float(burst), now

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now

    def take(self, now: float) -> float:
        """0.0 if a token was taken, else the seconds until one is there."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate

    def give_back(self) -> None:
        self.tokens = min(float(self.burst), self.tokens + 1.0)

    def charge(self, tokens: float, now: float) -> None:
        """Take `tokens` more for work already done: the bucket may go into debt, down to minus its burst."""
        self._refill(now)
        self.tokens = max(-float(self.burst), self.tokens - tokens)

    def resize(self, rate: float, burst: int, now: float) -> None:
        """New limits (an admin changed them): what was earned at the old rate stays, up to the new burst."""
        self._refill(now)
        self.rate, self.burst = rate, burst
        self.tokens = min(self.tokens, float(burst))


class FairUse:
    """One app's buckets and cached limits, by user id. Thread-safe."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, int], TokenBucket] = {}
        self._limits: dict[int, tuple[float, q.Limits]] = {}
        self._in_flight: dict[int, int] = {}

    def limits(self, user_id: int) -> q.Limits:
        now = self.clock()
        with self._lock:
            cached = self._limits.get(user_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        with store().session() as s:
            found = q.limits_of(s, user_id)
        with self._lock:
            self._limits[user_id] = (now + LIMITS_TTL_S, found)
        return found

    def forget_limits(self) -> None:
        """An admin changed limits through this replica: read them again at the next request."""
        with self._lock:
            self._limits.clear()

    def take(self, kind: str, user_id: int, rate: float, burst: int) -> float:
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get((kind, user_id))
            if bucket is None:
                bucket = self._buckets[(kind, user_id)] = TokenBucket(rate, burst, now)
            elif (bucket.rate, bucket.burst) != (rate, burst):
                bucket.resize(rate, burst, now)
            return bucket.take(now)

    def charge(self, kind: str, user_id: int, tokens: float) -> None:
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get((kind, user_id))
            if bucket is not None:
                bucket.charge(tokens, now)

    def give_back(self, kind: str, user_id: int) -> None:
        with self._lock:
            bucket = self._buckets.get((kind, user_id))
            if bucket is not None:
                bucket.give_back()

    def enter(self, user_id: int, most: int) -> int:
        """Count one more request of `user_id` in progress, unless `most` are already: then return how many are."""
        with self._lock:
            held = self._in_flight.get(user_id, 0)
            if held >= most:
                return held
            self._in_flight[user_id] = held + 1
            return 0

    def leave(self, user_id: int) -> None:
        with self._lock:
            held = self._in_flight.get(user_id, 0) - 1
            if held > 0:
                self._in_flight[user_id] = held
            else:
                self._in_flight.pop(user_id, None)


def state(app: Flask | None = None) -> FairUse:
    """The app's FairUse, made on first use (so tests can put a clock in the app's config first)."""
    app = app or current_app._get_current_object()  # type: ignore[attr-defined]
    with _state_lock:
        if STATE_KEY not in app.extensions:
            app.extensions[STATE_KEY] = FairUse(app.config.get(CLOCK_CONFIG) or time.monotonic)
        fair: FairUse = app.extensions[STATE_KEY]
        return fair


def _too_many(message: str, wait_s: float | None) -> None:
    headers = {} if wait_s is None else {"Retry-After": str(max(1, math.ceil(wait_s)))}
    abort(429, message=message, headers=headers)


def _known_retry(user_id: int, client_token: str | None) -> bool:
    if client_token is None:
        return False
    with store().session() as s:
        return q.known_submission(s, user_id, client_token) is not None


@dataclass
class SubmissionGate:
    """What the submit handler needs from fair use: the pending cap to pass to `queries.submit` (None: none), and
    whether the job was created (False for a known retry, whose token is given back)."""

    max_pending: int | None
    created: bool = True


@contextmanager
def submission(who: Principal, client_token: str | None) -> Iterator[SubmissionGate]:
    """Around a submission's transaction: 429 past the user's submission rate (before anything is read or written)
    or past their pending cap (`queries.PendingLimit`, raised in the transaction, which rolls back)."""
    if who.admin:
        yield SubmissionGate(None)
        return
    fair = state()
    lim = fair.limits(who.id)
    wait = fair.take(SUBMIT, who.id, lim.submit_rate, lim.submit_burst)
    charged = wait == 0.0
    if not charged and not _known_retry(who.id, client_token):
        _too_many(f"submit_rate: {who.name} may submit {lim.submit_rate:g} job(s) a second after a burst of "
                  f"{lim.submit_burst}; try again in {max(1, math.ceil(wait))} s", wait)
    gate = SubmissionGate(lim.max_pending)
    try:
        yield gate
    except q.PendingLimit as exc:
        _too_many(str(exc), None)
    if charged and not gate.created:  # a retry of a job already stored: not a new submission
        fair.give_back(SUBMIT, who.id)


def check_whatif(who: Principal) -> None:
    """429 with Retry-After past the user's what-ifs per minute (a bucket of that many, refilled over a minute)."""
    if who.admin:
        return
    fair = state()
    lim = fair.limits(who.id)
    wait = fair.take(WHATIF, who.id, lim.whatif_per_min / 60.0, lim.whatif_per_min)
    if wait > 0.0:
        _too_many(f"whatif_per_min: {who.name} may run {lim.whatif_per_min} what-if(s) a minute; try again in "
                  f"{max(1, math.ceil(wait))} s", wait)


_IN_FLIGHT = "corral_in_flight"  # on flask.g: the user whose count this request holds, given back at its teardown
_RATED = "corral_rated"  # on flask.g: the user whose request bucket pays for this request's answer
REFUSED_UNTIL = "corral.refused_until"  # in the WSGI environ: a request-rate refusal holds for its token until then


class RateRefusals:
    """WSGI middleware: once the app refused a token for its request rate, answer that token's requests with the
    same refusal until its Retry-After has passed, without the app (no token lookup, no database): a flood of
    refused requests (90 threads: 450 a second) costs the server little more than reading them. Per token: the
    bucket is per user, and a user with two tokens is refused by the app for the other one. Thread-safe."""

    MAX_TOKENS = 10_000  # tokens remembered at once; beyond, the oldest refusal is forgotten (the app refuses again)

    def __init__(self, app: Any, clock: Callable[[], float]) -> None:
        self.app, self.clock = app, clock
        self._lock = threading.Lock()
        self._refused: dict[int, tuple[float, str, list[tuple[str, str]], bytes]] = {}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        key = hash(environ.get("HTTP_AUTHORIZATION", ""))
        now = self.clock()
        with self._lock:
            held = self._refused.get(key)
            if held is not None and held[0] <= now:
                del self._refused[key]
                held = None
        if held is not None:
            until, status, headers, body = held
            wait = str(max(1, math.ceil(until - now)))
            start_response(status, [(k, wait if k.lower() == "retry-after" else v) for k, v in headers])
            return [body]
        captured: list[Any] = []

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured[:] = [status, headers]
            return start_response(status, headers, exc_info) if exc_info else start_response(status, headers)

        answer = self.app(environ, capture)
        refused_until = environ.get(REFUSED_UNTIL)
        if refused_until is None or not captured:
            return answer
        try:
            body = b"".join(answer)  # a short JSON error
        finally:
            close = getattr(answer, "close", None)
            if close is not None:
                close()
        with self._lock:
            if len(self._refused) >= self.MAX_TOKENS:
                self._refused.pop(next(iter(self._refused)))
            self._refused[key] = (float(refused_until), captured[0], list(captured[1]), body)
        return [body]


def admit(who: Principal) -> None:
    """Every authenticated request, once its caller is known: 429 with Retry-After past the user's request rate or
    past the requests they may have in progress at once. Admins are exempt. (Its answer is charged after it is
    made, by `_charge_answer`.)"""
    if who.admin:
        return
    fair = state()
    lim = fair.limits(who.id)
    wait = fair.take(REQUEST, who.id, lim.request_rate, lim.request_burst)
    if wait > 0.0:
        request.environ[REFUSED_UNTIL] = fair.clock() + wait  # the front answers this token itself until then
        _too_many(f"request_rate: {who.name} may make {lim.request_rate:g} request(s) a second after a burst of "
                  f"{lim.request_burst} (every {ANSWER_BYTES_PER_TOKEN // 1024} KiB of an answer counts as one more); "
                  f"try again in {max(1, math.ceil(wait))} s (an admin sets the limit: `corral user limits`)", wait)
    setattr(g, _RATED, who.id)
    most = int(current_app.config.get(IN_FLIGHT_CONFIG, DEFAULT_MAX_IN_FLIGHT))
    held = fair.enter(who.id, most)
    if held:
        _too_many(f"requests in progress: {who.name} has {held} request(s) in progress, the most one user may have "
                  "at once; try again when one has been answered (the operator sets it: `corral serve "
                  "--max-requests-per-user`)", 1.0)
    setattr(g, _IN_FLIGHT, who.id)


def _charge_answer(response: Response) -> Response:
    user_id = g.get(_RATED)
    size = response.content_length or 0  # None for a streamed answer: not charged
    if user_id is not None and size >= ANSWER_BYTES_PER_TOKEN:
        state().charge(REQUEST, user_id, size // ANSWER_BYTES_PER_TOKEN)
    return response


def _leave(_exc: BaseException | None) -> None:
    user_id = g.pop(_IN_FLIGHT, None)
    if user_id is not None:
        state().leave(user_id)


def init_app(app: Flask) -> None:
    """Make `admit` run on every authenticated request of `app`, charge large answers to the request bucket, and give
    back each request's in-progress count at its end."""
    app.extensions[AUTHENTICATED_KEY] = admit
    app.wsgi_app = RateRefusals(app.wsgi_app, lambda: state(app).clock())  # type: ignore[method-assign]
    app.after_request(_charge_answer)
    app.teardown_request(_leave)

"""The webhook dispatcher: a thread of `corral serve`, beside the controller and never inside its passes, that turns
job events into signed HTTP requests (`scheduler.live.webhooks` says what is sent and where it may go).

Two steps, each its own short transaction, none held while a request is in flight:

1. **Queue** (`fan_out`). The dispatcher reads `job_events` after its cursor (`webhook_cursor`, one row), and for
   every state change (`webhooks.STATE_EVENTS`) queues one `webhook_deliveries` row per webhook that hears it (the
   job owner's webhooks and the job's own), with the body fixed there and then. The rows and the cursor's move commit
   together, and (webhook, event) is unique: a restart neither skips an event nor queues one twice. Event ids come
   from a sequence, so on PostgreSQL an id can become visible after a higher one (its transaction committed later):
   the cursor never moves past a missing id until it has been missing for `gap_wait_s` (60 s; a transaction that
   commits an event later than that, after a higher one, is not sent). Events above such a gap are queued at once
   all the same, never twice.
2. **Send** (`dispatch_due`). Due deliveries are claimed, at most one per webhook and `per_user` (2) per user at a
   time, the users taking turns (each user's deliveries queue apart: one user's thousands wait behind each other, not
   in front of anyone else's), by a conditional UPDATE that sets a claim token and `locked_until` (the timeout plus a
   margin), then sent by a pool of worker threads, each within `timeout_s` (5 s); the outcome is written with the
   attempt. A failure is tried again after a backoff that doubles (30 s, 1, 2, 4, 8, 16, 32 min), up to
   `max_attempts` (8, about an hour after the first), then the delivery fails with the reason recorded. A URL the
   allow list refuses at sending time, or a deleted webhook, fails at once. A receiver that hangs holds one worker for `timeout_s`, never the others, the controller or the API; a user
   whose receivers all hang holds at most `per_user` workers, so another user's delivery waits seconds at most.

**At least once.** A delivery is marked delivered after the receiver answered 2xx. If the server dies between the
two, the claim lapses and the next dispatcher sends it again, with the same `X-Corral-Delivery` id and body:
receivers deduplicate on it (or on `event_id`, unique per webhook).

**Webhooks off** (no `--webhook-allow`): the dispatcher still moves its cursor, queueing nothing, so turning them on
later sends nothing of what happened meanwhile; deliveries queued before fail as refused.

**One dispatcher.** Every `corral serve` replica starts one, but it works only while its controller leads (the
lease of `scheduler.live.leader`; on SQLite, always): outbound requests come from one place, and the allow list that
counts is the leader's. The claims and the cursor's row lock make two dispatchers safe anyway (during a handover
both may run for a moment): each delivery is claimed by one.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from prometheus_client import Counter as MetricCounter
from sqlalchemy import CursorResult, delete, func, insert, or_, select, update

from scheduler.live import webhooks as wh
from scheduler.live.job_states import JobState
from scheduler.live.store import Store
from scheduler.live.store.models import Job, JobEvent, User, Webhook, WebhookAttempt, WebhookCursor, WebhookDelivery

log = logging.getLogger(__name__)

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
DELIVERY_STATUSES = (PENDING, DELIVERED, FAILED)
CURSOR_ID = 1
ATTEMPTS = MetricCounter("corral_webhook_attempts", "Webhook requests made, by outcome", ["outcome"])


@dataclass(frozen=True)
class DispatchConfig:
    timeout_s: float = 5.0  # one request, all of it
    max_attempts: int = 8
    backoff_s: float = 30.0  # before the second attempt, doubled for each after
    poll_s: float = 0.5  # how often new events and due deliveries are looked for
    workers: int = 16  # requests in flight at once (one per webhook at most)
    per_user: int = 2  # of them, for one user's webhooks at most: a user whose receivers hang holds only these
    batch: int = 2000  # events read per queueing transaction
    gap_wait_s: float = 60.0
    lock_margin_s: float = 30.0  # a claim outlasts its request's timeout by this much
    retention_s: float = 14 * 24 * 3600.0  # finished deliveries (and deleted webhooks) are kept this long
    prune_every_s: float = 3600.0


def backoff(attempts: int, base_s: float) -> float:
    """Seconds before the next try after `attempts` failed ones (1: the first failed)."""
    return float(base_s * 2 ** (attempts - 1))


def schedule_text(cfg: DispatchConfig) -> str:
    """'8 tries: then after 30 s, 1 min, ...': the retry schedule in words (docs, logs)."""
    waits = [backoff(n, cfg.backoff_s) for n in range(1, cfg.max_attempts)]
    return f"{cfg.max_attempts} tries, {sum(waits) / 60:.0f} min from the first to the last"


@dataclass(frozen=True)
class Claimed:
    delivery_id: int
    webhook_id: int
    token: str
    user_id: int = 0


class Dispatcher:
    """Queues and sends webhook deliveries in its own threads; `start`, then `stop`. `leading` says whether this
    replica's controller leads (only then does it work); `resolver` is for tests."""

    def __init__(self, store: Store, allow: wh.AllowList, *, leading: Callable[[], bool] = lambda: True,
                 config: DispatchConfig | None = None, resolver: wh.Resolver = wh.resolve) -> None:
        self.store = store
        self.allow = allow
        self.leading = leading
        self.cfg = config or DispatchConfig()
        self.resolver = resolver
        self._gaps: dict[tuple[int, int], float] = {}  # missing event ids (first, last) -> when first seen missing
        self._busy: dict[int, int] = {}  # webhooks with a request in flight from here -> their users
        self._served: dict[int, int] = {}  # user -> when (a count of claims) one of theirs was last claimed
        self._claims = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pruned_at = 0.0
        self.turns = 0  # of the thread's loop, counted (tests wait on it)

    # ---- the thread -------------------------------------------------------------------------------------------------

    def start(self) -> Dispatcher:
        self._pool = ThreadPoolExecutor(max_workers=self.cfg.workers, thread_name_prefix="corral-webhook")
        self._thread = threading.Thread(target=self._run, name="corral-webhooks", daemon=True)
        self._thread.start()
        if self.allow.enabled:
            log.info("webhooks: sending to %s (%s, %g s each)", self.allow.text(), schedule_text(self.cfg),
                     self.cfg.timeout_s)
        else:
            log.info("webhooks are off (no --webhook-allow): nothing is sent, and the API refuses new ones")
        return self

    def stop(self) -> None:
        """Stop queueing and claiming; wait for the requests in flight (each ends within its timeout)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            more = False
            try:
                if self.leading():
                    more = self.fan_out() >= self.cfg.batch  # a full batch passed: read on at once
                    self.dispatch_due()
                    self._prune()
            except Exception:  # the database may be restarting: try again at the next turn
                log.exception("webhooks: the dispatcher's turn failed")
            self.turns += 1
            if not more:
                self._wake.wait(self.cfg.poll_s)
                self._wake.clear()

    # ---- queueing ---------------------------------------------------------------------------------------------------

    def fan_out(self, now: float | None = None) -> int:
        """Queue deliveries for the events after the cursor, and move it; returns how many events it moved over.
        With webhooks off (an empty allow list) it only moves: nothing is queued, then or later."""
        now = time.time() if now is None else now
        mono = time.monotonic()
        with self.store.session(write=True) as s:
            cursor = s.execute(select(WebhookCursor).where(WebhookCursor.id == CURSOR_ID).with_for_update()).scalar_one()
            rows = s.execute(select(JobEvent.id, JobEvent.job_id, JobEvent.kind)
                             .where(JobEvent.id > cursor.last_event_id).order_by(JobEvent.id)
                             .limit(self.cfg.batch)).all()
            if not rows:
                return 0
            upto = self._contiguous(cursor.last_event_id, [r.id for r in rows], mono)
            wanted = [r for r in rows if r.kind in wh.STATE_EVENTS]
            if wanted and self.allow.enabled:
                self._queue(s, wanted, now)
            if upto != cursor.last_event_id:
                cursor.last_event_id, cursor.updated_at = upto, now
            return sum(1 for r in rows if r.id <= upto)

    def _contiguous(self, last: int, ids: Sequence[int], mono: float) -> int:
        """How far the cursor may move over `ids` (ascending, all > `last`): up to the first id missing for less than
        `gap_wait_s`."""
        expected, upto, blocked = last + 1, last, False
        seen_gaps = set()
        for i in ids:
            if i > expected:
                gap = (expected, i - 1)
                seen_gaps.add(gap)
                first = self._gaps.setdefault(gap, mono)
                if mono - first < self.cfg.gap_wait_s:
                    blocked = True
                elif not blocked:
                    log.warning("webhooks: job events %d-%d never appeared (rolled back, or committed over %g s late); "
                                "moving on", gap[0], gap[1], self.cfg.gap_wait_s)
            if not blocked:
                upto = i
            expected = i + 1
        for gap in list(self._gaps):  # forget gaps behind the cursor, or filled
            if gap not in seen_gaps:
                del self._gaps[gap]
        return upto

    def _queue(self, s: Any, events: Sequence[Any], now: float) -> None:
        job_ids = {e.job_id for e in events}
        jobs = {j.id: j for j in s.execute(
            select(Job.id, Job.user_id, Job.name, Job.team, Job.attempt, User.name.label("user"))
            .join(User, User.id == Job.user_id).where(Job.id.in_(job_ids))).all()}
        user_ids = {j.user_id for j in jobs.values()}
        hooks = s.execute(select(Webhook.id, Webhook.user_id, Webhook.job_id, Webhook.after_event_id).where(
            Webhook.deleted_at.is_(None),
            or_(Webhook.job_id.in_(job_ids), Webhook.job_id.is_(None) & Webhook.user_id.in_(user_ids)))).all()
        if not hooks:
            return
        event_ids = [e.id for e in events]
        queued = {(w, e) for w, e in s.execute(select(WebhookDelivery.webhook_id, WebhookDelivery.event_id)
                                               .where(WebhookDelivery.event_id.in_(event_ids)))}
        rows: list[dict[str, Any]] = []
        for e in events:
            job = jobs.get(e.job_id)
            if job is None:
                continue
            targets = [h for h in hooks if h.after_event_id < e.id and (h.job_id == e.job_id or (
                h.job_id is None and h.user_id == job.user_id)) and (h.id, e.id) not in queued]
            if not targets:
                continue
            event = s.get(JobEvent, e.id)
            old_state, cause = self._before(s, event)
            about = {"id": job.id, "name": job.name, "user": job.user, "team": job.team, "attempt": job.attempt}
            for h in targets:
                body = wh.payload(webhook_id=h.id, event_id=e.id, kind=event.kind, at=event.at, message=event.message,
                                  data=event.data or {}, job=about, old_state=old_state, cause=cause)
                rows.append({"webhook_id": h.id, "event_id": e.id, "job_id": e.job_id, "event": event.kind,
                             "body": body, "status": PENDING, "attempts": 0, "created_at": now, "next_at": now})
        if rows:
            s.execute(insert(WebhookDelivery), rows)
            self._wake.set()

    @staticmethod
    def _before(s: Any, event: JobEvent) -> tuple[str | None, str | None]:
        """The state the job's previous state change left it in, and a loss in the same instant (its message)."""
        kinds = [*wh.STATE_EVENTS, *wh.CAUSE_EVENTS]
        earlier = s.execute(select(JobEvent.kind, JobEvent.message, JobEvent.at)
                            .where(JobEvent.job_id == event.job_id, JobEvent.id < event.id, JobEvent.kind.in_(kinds))
                            .order_by(JobEvent.id.desc()).limit(4)).all()
        cause = None
        for i, row in enumerate(earlier):
            if row.kind in wh.CAUSE_EVENTS:
                if i == 0 and row.at == event.at:
                    cause = f"{row.kind}: {row.message}"
                continue
            return wh.STATE_EVENTS[row.kind], cause
        return None, cause

    # ---- sending ----------------------------------------------------------------------------------------------------

    def dispatch_due(self, now: float | None = None) -> list[Claimed]:
        """Claim the due deliveries this dispatcher has room for and hand them to the workers."""
        with self._lock:
            room = self.cfg.workers - len(self._busy)
            busy = dict(self._busy)
        if room <= 0 or self._pool is None:
            return []
        claimed = self.claim(room, busy, now)
        for c in claimed:
            with self._lock:
                self._busy[c.webhook_id] = c.user_id
            self._pool.submit(self.send, c).add_done_callback(partial(self._done, c))
        return claimed

    def _done(self, c: Claimed, _future: object = None) -> None:
        with self._lock:
            self._busy.pop(c.webhook_id, None)
        self._wake.set()

    def claim(self, limit: int, busy: Collection[int] | Mapping[int, int] = (),
              now: float | None = None) -> list[Claimed]:
        """Up to `limit` due deliveries, fairly across users: each user's webhooks queue apart, a user has at most
        `per_user` requests in flight (`busy`: the webhooks in flight, each with its user), and the users take turns,
        the one served longest ago first, one delivery per turn. Within a user, the oldest due delivery of each
        webhook not in flight. Each is claimed atomically (a delivery another dispatcher claimed a moment ago is
        skipped). So one user's hanging receivers cost another user's delivery at most a worker's wait, never a
        place behind all of theirs."""
        now = time.time() if now is None else now
        in_flight = Counter(busy.values()) if isinstance(busy, Mapping) else Counter[int]()
        due = (WebhookDelivery.status == PENDING, WebhookDelivery.next_at <= now,
               or_(WebhookDelivery.locked_until.is_(None), WebhookDelivery.locked_until < now))
        out: list[Claimed] = []
        with self.store.session(write=True) as s:
            users = s.scalars(select(Webhook.user_id).join(WebhookDelivery, WebhookDelivery.webhook_id == Webhook.id)
                              .where(*due).group_by(Webhook.user_id)).all()
            users = sorted((u for u in users if in_flight[u] < self.cfg.per_user),
                           key=lambda u: (in_flight[u], self._served.get(u, -1), u))
            queues: list[tuple[int, list[tuple[int, int]]]] = []
            for user_id in users:  # each user's own queue: its oldest due delivery per webhook, as many as it may start
                if len(queues) >= limit:
                    break
                q = (select(WebhookDelivery.webhook_id, func.min(WebhookDelivery.id))
                     .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                     .where(*due, Webhook.user_id == user_id).group_by(WebhookDelivery.webhook_id)
                     .order_by(func.min(WebhookDelivery.next_at), func.min(WebhookDelivery.id))
                     .limit(self.cfg.per_user - in_flight[user_id]))
                if busy:
                    q = q.where(WebhookDelivery.webhook_id.not_in(list(busy)))
                rows = [(int(w), int(d)) for w, d in s.execute(q).all()]
                if rows:
                    queues.append((user_id, rows))
            turn = 0
            while len(out) < limit and any(turn < len(rows) for _, rows in queues):  # round-robin, one each a turn
                for user_id, rows in queues:
                    if turn >= len(rows) or len(out) >= limit:
                        continue
                    webhook_id, delivery_id = rows[turn]
                    token = uuid.uuid4().hex
                    done = cast("CursorResult[Any]", s.execute(
                        update(WebhookDelivery).where(WebhookDelivery.id == delivery_id, *due)
                        .values(claim=token, locked_until=now + self.cfg.timeout_s + self.cfg.lock_margin_s))).rowcount
                    if done:
                        out.append(Claimed(delivery_id, webhook_id, token, user_id))
                        self._claims += 1
                        self._served[user_id] = self._claims
                turn += 1
        return out

    def send(self, c: Claimed) -> None:
        """Make one attempt at a claimed delivery and record it (a worker's job; never raises)."""
        try:
            with self.store.session() as s:
                row = s.execute(select(WebhookDelivery.body, WebhookDelivery.event, WebhookDelivery.attempts,
                                       Webhook.url, Webhook.secret, Webhook.deleted_at)
                                .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                                .where(WebhookDelivery.id == c.delivery_id)).one()
            if row.deleted_at is not None:
                self.record(c, wh.Outcome(None, "the webhook was deleted", 0.0), final=True, attempt=False)
                return
            try:
                where, addresses = wh.destinations(row.url, self.allow, self.resolver)
            except wh.WebhookRefused as exc:
                log.warning("webhooks: delivery %d to webhook %d (%s) refused: %s", c.delivery_id, c.webhook_id,
                            wh.shown(row.url), exc)
                ATTEMPTS.labels("refused").inc()
                self.record(c, wh.Outcome(None, f"refused: {exc}", 0.0), final=True)
                return
            body = row.body.encode()
            headers = {
                "Content-Type": "application/json",
                "User-Agent": wh.USER_AGENT,
                wh.SIGNATURE_HEADER: wh.signature_header(row.secret, body),
                "X-Corral-Event": row.event,
                "X-Corral-Delivery": str(c.delivery_id),
                "X-Corral-Webhook": str(c.webhook_id),
                "X-Corral-Attempt": str(row.attempts + 1),
            }
            outcome = wh.post(where, addresses, body, headers, self.cfg.timeout_s)
            ATTEMPTS.labels("delivered" if outcome.ok else "failed").inc()
            if not outcome.ok:
                log.info("webhooks: delivery %d to webhook %d (%s), attempt %d: %s", c.delivery_id, c.webhook_id,
                         wh.shown(row.url), row.attempts + 1, outcome.error)
            self.record(c, outcome)
        except Exception:  # the claim lapses and the delivery is tried again
            log.exception("webhooks: delivery %d could not be sent or recorded", c.delivery_id)

    def record(self, c: Claimed, outcome: wh.Outcome, *, final: bool = False, attempt: bool = True,
               now: float | None = None) -> bool:
        """Write an attempt's outcome, if the claim is still ours: delivered, failed for good, or due again after its
        backoff. False when another dispatcher took the delivery over (its claim lapsed)."""
        now = time.time() if now is None else now
        with self.store.session(write=True) as s:
            d = s.get(WebhookDelivery, c.delivery_id)
            if d is None or d.claim != c.token or d.status != PENDING:
                return False
            number = d.attempts + (1 if attempt else 0)
            if attempt:
                s.add(WebhookAttempt(delivery_id=d.id, number=number, at=now, status_code=outcome.status,
                                     error=outcome.error, duration_ms=outcome.duration_ms))
                d.attempts, d.last_attempt_at, d.last_status_code = number, now, outcome.status
            d.claim, d.locked_until = None, None
            if outcome.ok:
                d.status, d.finished_at, d.last_error = DELIVERED, now, None
            elif final or number >= self.cfg.max_attempts:
                d.status, d.finished_at = FAILED, now
                d.last_error = (outcome.error if final else
                                f"gave up after {number} attempts; the last: {outcome.error}")
            else:
                d.last_error = outcome.error
                d.next_at = now + backoff(number, self.cfg.backoff_s)
        return True

    # ---- keeping the log short --------------------------------------------------------------------------------------

    def _prune(self) -> None:
        mono = time.monotonic()
        if self._pruned_at and mono - self._pruned_at < self.cfg.prune_every_s:
            return
        self._pruned_at = mono
        prune(self.store, time.time() - self.cfg.retention_s)


def prune(store: Store, before: float) -> None:
    """Delete finished deliveries (with their attempts) that finished before `before`, and webhooks deleted before
    then (with their deliveries)."""
    with store.session(write=True) as s:
        s.execute(delete(WebhookDelivery).where(WebhookDelivery.status != PENDING,
                                                WebhookDelivery.finished_at < before))
        s.execute(delete(Webhook).where(Webhook.deleted_at < before))


# What one user may have that can still be called (docs/webhooks.md): their own webhooks and their jobs' own, the
# latter while the job is pending or running (a finished job's webhook hears nothing more). One count, so a user
# cannot multiply receivers, and the requests they cost, by submitting jobs.
MAX_USER_WEBHOOKS = 20


def active_webhooks(s: Any, user_id: int) -> int:
    """How many of `user_id`'s webhooks count toward MAX_USER_WEBHOOKS."""
    own = s.scalar(select(func.count()).select_from(Webhook).where(
        Webhook.user_id == user_id, Webhook.deleted_at.is_(None), Webhook.job_id.is_(None)))
    jobs = s.scalar(select(func.count()).select_from(Webhook).join(Job, Job.id == Webhook.job_id).where(
        Webhook.user_id == user_id, Webhook.deleted_at.is_(None),
        Job.state.in_([JobState.PENDING.value, JobState.RUNNING.value])))
    return int(own or 0) + int(jobs or 0)


def limit_refusal(s: Any, user_id: int) -> str | None:
    """Why `user_id` may not add a webhook now (they are at MAX_USER_WEBHOOKS), or None."""
    count = active_webhooks(s, user_id)
    if count < MAX_USER_WEBHOOKS:
        return None
    return (f"you have {count} webhooks (your own, and your pending or running jobs' own), the most one user may "
            f"have ({MAX_USER_WEBHOOKS}, fixed by the server): delete one of yours (`corral webhook rm`), or wait "
            "for a job with one to end")



def add_webhook(s: Any, user_id: int, url: str, *, job_id: int | None = None, description: str = "") -> Webhook:
    """A new webhook with a new secret. A user's hears events from now on; a job's, all of its job's."""
    after = 0 if job_id is not None else int(s.scalar(select(func.max(JobEvent.id))) or 0)
    hook = Webhook(user_id=user_id, job_id=job_id, url=url, description=description, secret=wh.new_secret(),
                   created_at=time.time(), after_event_id=after)
    s.add(hook)
    s.flush()
    return hook

def cancel_pending(s: Any, webhook_id: int, why: str, now: float) -> None:
    """Fail a webhook's pending deliveries at once, saying why (it was deleted)."""
    s.execute(update(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id,
                                            WebhookDelivery.status == PENDING)
              .values(status=FAILED, finished_at=now, last_error=why, claim=None, locked_until=None))

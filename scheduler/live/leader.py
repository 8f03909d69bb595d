"""Which `corral serve` replica's controller leads: a lease row with an epoch on PostgreSQL; on SQLite, always this one.

Several replicas may share one PostgreSQL database and one Ray cluster. All of them serve the API and the dashboard;
one controller schedules, the others stand by and take over when it dies. The leader is whoever holds the one row of
`controller_lease` (`scheduler.live.store.models.ControllerLease`) with an unexpired `expires_at`.

Why a lease row rather than a PostgreSQL session advisory lock:
- **Fencing for free.** `epoch` grows by one at every change of holder. Every pass of the controller reads the row
  `FOR SHARE` in its own transaction, just before it commits, and commits only if the epoch is still its own
  (`Lease.fence`); each allocation also records the epoch it was placed under. A deposed leader (paused, partitioned
  from the database, or just slow) therefore cannot commit a placement once another replica took the lease: the new
  holder's acquiring UPDATE waits for the row lock of a pass in flight, so a pass either commits before the takeover
  (and the new leader's `recover()` sees it) or sees the new epoch and rolls back. An advisory lock has no number to
  compare, and it belongs to one connection: the passes run on other pooled connections and could not prove, inside
  their own transaction, that the lock is still held (a dropped connection frees it silently).
- **Expiry on the database's clock.** `expires_at` is set and compared with PostgreSQL's `clock_timestamp()`, so the
  replicas' clocks may disagree without harm; each replica also keeps a conservative local deadline (monotonic clock,
  measured from *before* its renewing statement) so it stops scheduling on its own when it cannot reach the database.
- **Visible.** The row says who leads and since when; `GET /api/v1/health` shows it.

The numbers (`corral serve --lease` and `--lease-renew`): the lease lasts `LEASE_TTL_S` = 4 s and the leader renews
it every `RENEW_S` = 1 s (three renewals may fail before it lapses); a standby tries to take it every
`STANDBY_POLL_S` = 0.25 s. A SIGKILLed leader's lease therefore lapses 3 to 4 s after the kill and a standby holds it
at most 0.25 s later; it then runs `Controller.recover()` (adopts the running workers by their Ray actor names, about
0.2 s) before its first pass: takeover in about 3.5 to 4.5 s (`benchmarks/failover.py` measures it). A pass commits
only with at least `FENCE_MARGIN_S` = 1.5 s of lease left, so the workers it launches right after its commit are
launched while it still certainly leads (a launch later than that makes stray workers, which the next leader reaps).
`timings(ttl, renew)` derives the poll and the margin from the two flags: margin (ttl - renew) / 2, poll ttl / 16
capped at 1 s.

What a short lease risks, and what it does not. The fence never depends on the lease's length: whatever pauses a
leader (a GC, a swapped-out process, a pass slower than the lease, a partition from the database), its pass commits
only if the row still names it with its epoch and `margin_s` left, checked in the pass's own transaction. Renewal
runs on its own thread (`corral-lease`), not between passes, so a long pass does not starve it: only a process that
stops altogether (SIGSTOP, a VM pause, swapping), or a database that does not answer, delays it. What a shorter
lease costs is availability, not safety: a renewal late by more than ttl - renew - margin (1.5 s) has the leader's
passes refused (it steps down and, still holding the lease, recovers and goes on); late by more than ttl - renew
(3 s), the standby takes over, adopting the workers (no job is lost, but a takeover is a pause of the scheduling).
Where the database link or the hosts stall for seconds (a PostgreSQL failover, an overloaded VM), give a longer
`--lease` (the earlier default, 10 s with 2 s renewals, took over in 9 to 11 s).
A leader that stops cleanly (SIGTERM) releases the lease: a standby takes over within a poll.

SQLite is one file on one machine, written by one process: `SoleLeader` leads, with no lease and no epoch, and
`StoreLock` makes sure it is the only one. It is an OS lock (`flock`) on a file beside the database, taken before
Ray starts and held for the life of the process: a second `corral serve` on the same store fails to take it and
refuses to start, naming the process that holds it (host, pid, URL) from what that process wrote into the file. The
kernel drops the lock when its holder exits, however it exits (SIGKILL included), so a crash never leaves a stale
lock to clear by hand. Why not the lease row on SQLite too: a lease needs an expiry, so a crashed server would keep
the store for a term, and two processes' passes would contend on one file's write lock to fence; a lock file
costs nothing and is exact.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from sqlalchemy import Float, cast, func, select, text, update
from sqlalchemy.orm import Session

from scheduler.live.store.db import Store
from scheduler.live.store.models import ControllerLease

log = logging.getLogger(__name__)

LEASE_TTL_S = 4.0
RENEW_S = 1.0
STANDBY_POLL_S = 0.25
FENCE_MARGIN_S = 1.5
LEASE_ID = 1

# The database's own clock, in Unix seconds (clock_timestamp, not now(): now() is frozen at the transaction's start).
_DB_NOW = cast(func.extract("epoch", func.clock_timestamp()), Float(precision=53))
# How long taking or renewing the lease waits for the row lock a pass's fence holds (FOR SHARE, until it commits):
# passes hold it for milliseconds; past this (at most 2 s, at most one renewal period) the statement fails and the
# lease's thread tries again at its next turn.
MAX_LOCK_WAIT_S = 2.0


def timings(ttl_s: float = LEASE_TTL_S, renew_s: float | None = None) -> dict[str, float]:
    """The lease's settings from its term and renewal period (`corral serve --lease`, `--lease-renew`; default a
    quarter of the term): the fence's margin is half of what a renewal leaves (so a renewal may be late by as much
    again before passes are refused), and a standby polls 16 times a term, at most every second."""
    renew = ttl_s / 4 if renew_s is None else renew_s
    if not 0 < renew < ttl_s:
        raise ValueError(f"the lease must be renewed more often than it lasts: every {renew:g} s for {ttl_s:g} s")
    return {"ttl_s": ttl_s, "renew_s": renew, "poll_s": min(1.0, ttl_s / 16), "margin_s": (ttl_s - renew) / 2}


class NotLeader(Exception):
    """This controller's pass may not commit: another replica holds the lease (or this one's is about to lapse)."""


class StoreBusy(Exception):
    """Another process already serves this SQLite store (its message names it, in one line)."""


class StoreLock:
    """The exclusive OS lock on `<database>.lock` that makes one process the controller of a SQLite store.

    `acquire` takes it without waiting (raising `StoreBusy` with the holder's host, pid and URL), then writes who
    holds it into the file for the next one to read; `release` (or the process's exit) gives it back. The file is
    the server's alone (0600, like the database)."""

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".lock")
        self._file: IO[str] | None = None

    @classmethod
    def for_url(cls, url: str) -> StoreLock | None:
        """The lock of a SQLite file store; None for a shared database (PostgreSQL has the lease) or an in-memory
        one (it belongs to its process anyway)."""
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
            return None
        return cls(Path(parsed.database).resolve())

    def acquire(self, about: dict[str, Any]) -> None:
        """Hold the lock from now on, or raise `StoreBusy` naming its holder. `about`: what to tell a second server
        about this one (its URL, port), besides the host, pid and start time written here."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        f = os.fdopen(fd, "r+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_text(f.read())
            f.close()
            raise StoreBusy(f"the store {self.path.with_suffix('')} already has a controller: {holder}. Stop it first, "
                            "or give this server its own store (another CORRAL_HOME, or DATABASE_URL)") from None
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(), **about}))
        f.flush()
        self._file = f

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the flock
            self._file = None


def _holder_text(text: str) -> str:
    """'pid 4242 on host gpu-head, serving http://127.0.0.1:8080 since 10:02:11' from what the holder wrote."""
    try:
        about = json.loads(text)
    except ValueError:
        return "a process that has not said which yet (it is starting)"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(about.get("since", 0))))
    where = f", serving {about['url']}" if about.get("url") else ""
    return f"pid {about.get('pid')} on host {about.get('host')}{where} since {since}"


def replica_id() -> str:
    """This process's name among the replicas: host and pid to find it, a random suffix so that a restarted process
    with a recycled pid is never mistaken for its predecessor."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Leadership(Protocol):
    """What the controller asks: does it lead, and may this pass commit?"""

    replica: str

    @property
    def leading(self) -> bool: ...
    @property
    def epoch(self) -> int | None: ...
    def start(self, on_change: Callable[[], None]) -> None: ...
    def stop(self) -> None: ...
    def fence(self, s: Session) -> None: ...
    def status(self) -> dict[str, Any]: ...


class SoleLeader:
    """SQLite: one process writes the store, so its controller always leads; nothing to fence. With `lock` (the
    store's `StoreLock`, already acquired by `corral serve` before Ray started), it gives the lock back at `stop`."""

    def __init__(self, replica: str | None = None, lock: StoreLock | None = None) -> None:
        self.replica = replica or replica_id()
        self.lock = lock

    @property
    def leading(self) -> bool:
        return True

    @property
    def epoch(self) -> int | None:
        return None

    def start(self, on_change: Callable[[], None]) -> None:
        pass

    def stop(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def fence(self, s: Session) -> None:
        pass

    def status(self) -> dict[str, Any]:
        lease = ("none: this process holds the SQLite store's lock file, so no other controller can run on it"
                 if self.lock is not None else "none: a SQLite store has one process, which leads")
        return {"epoch": None, "leader": self.replica, "lease": lease}


class Lease:
    """The lease row on PostgreSQL: acquire, renew, release, and the fence a pass runs before it commits. A thread
    (`start`) renews it while held and tries to take it while not, calling `on_change` when that flips."""

    def __init__(self, store: Store, replica: str | None = None, *, ttl_s: float = LEASE_TTL_S,
                 renew_s: float = RENEW_S, poll_s: float = STANDBY_POLL_S, margin_s: float = FENCE_MARGIN_S) -> None:
        if store.engine.dialect.name == "sqlite":
            raise ValueError("a lease needs a shared database (PostgreSQL); a SQLite store has one process: SoleLeader")
        if not renew_s < ttl_s - margin_s:
            raise ValueError(f"renewing every {renew_s} s cannot keep a {ttl_s} s lease above its {margin_s} s margin")
        self.store = store
        self.replica = replica or replica_id()
        self.ttl_s, self.renew_s, self.poll_s, self.margin_s = ttl_s, renew_s, poll_s, margin_s
        self._epoch: int | None = None
        self._valid_until = 0.0  # monotonic: a lower bound of when the database will consider our lease lapsed
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_change: Callable[[], None] = lambda: None
        self._lock_timeout = text(f"SET LOCAL lock_timeout = '{int(1000 * min(MAX_LOCK_WAIT_S, renew_s))}ms'")

    @property
    def leading(self) -> bool:
        """Held, as far as this process knows: its last renewal succeeded less than a lease's time ago (counted from
        before that renewal was sent, so never later than the database's own expiry)."""
        with self._lock:
            return self._epoch is not None and time.monotonic() < self._valid_until

    @property
    def epoch(self) -> int | None:
        with self._lock:
            return self._epoch

    # ---- the row -------------------------------------------------------------------------------------------------

    def try_acquire(self) -> bool:
        """Take the lease if it has lapsed (or was released), with the next epoch. One conditional UPDATE: of two
        replicas trying at once, the second re-reads the row after the first commits and finds it held."""
        sent = time.monotonic()
        with self.store.engine.begin() as conn:
            conn.execute(self._lock_timeout)  # a pass in flight holds the row briefly; a stuck one must not stall us
            epoch = conn.execute(
                update(ControllerLease)
                .where(ControllerLease.id == LEASE_ID, ControllerLease.expires_at < _DB_NOW)
                .values(holder=self.replica, epoch=ControllerLease.epoch + 1, acquired_at=_DB_NOW,
                        renewed_at=_DB_NOW, expires_at=_DB_NOW + self.ttl_s)
                .returning(ControllerLease.epoch)).scalar()
        if epoch is None:
            return False
        with self._lock:
            self._epoch, self._valid_until = int(epoch), sent + self.ttl_s
        log.warning("this replica (%s) now holds the controller lease, epoch %d", self.replica, epoch)
        return True

    def renew(self) -> bool:
        """Extend the lease by a full term if this replica still holds it with its epoch; False: deposed."""
        epoch = self.epoch
        if epoch is None:
            return False
        sent = time.monotonic()
        with self.store.engine.begin() as conn:
            conn.execute(self._lock_timeout)
            held = conn.execute(
                update(ControllerLease)
                .where(ControllerLease.id == LEASE_ID, ControllerLease.holder == self.replica,
                       ControllerLease.epoch == epoch)
                .values(renewed_at=_DB_NOW, expires_at=_DB_NOW + self.ttl_s)).rowcount == 1
        with self._lock:
            if held and self._epoch == epoch:
                self._valid_until = sent + self.ttl_s
            elif not held:
                self._epoch = None
        if not held:
            log.warning("this replica (%s) lost the controller lease (epoch %d): another replica took it", self.replica,
                        epoch)
        return held

    def release(self) -> None:
        """Give the lease up at once (a clean shutdown): a standby takes it at its next try, not after a full term."""
        epoch = self.epoch
        with self._lock:
            self._epoch = None
        if epoch is None:
            return
        with self.store.engine.begin() as conn:
            conn.execute(update(ControllerLease)
                         .where(ControllerLease.id == LEASE_ID, ControllerLease.holder == self.replica,
                                ControllerLease.epoch == epoch)
                         .values(expires_at=0.0))
        log.info("released the controller lease (epoch %d)", epoch)

    def fence(self, s: Session) -> None:
        """Raise `NotLeader` unless this replica still holds the lease with its epoch and at least `margin_s` of it
        is left. Run in the pass's own transaction just before it commits: `FOR SHARE` keeps a taker's UPDATE
        waiting until this transaction ends, so what the check saw still holds at the commit."""
        epoch = self.epoch
        row = s.execute(select(ControllerLease.holder, ControllerLease.epoch, ControllerLease.expires_at - _DB_NOW)
                        .where(ControllerLease.id == LEASE_ID).with_for_update(read=True)).one()
        holder, current, left = row
        if epoch is None or holder != self.replica or current != epoch:
            raise NotLeader(f"epoch {epoch} is over: the lease is {holder}'s, epoch {current}")
        if left < self.margin_s:
            raise NotLeader(f"only {left:.1f} s left of the lease (epoch {epoch}): not renewed in time")

    def status(self) -> dict[str, Any]:
        """The lease as the database has it (for /health): who leads, with which epoch, for how much longer."""
        with self.store.session() as s:
            holder, epoch, left = s.execute(select(ControllerLease.holder, ControllerLease.epoch,
                                                   ControllerLease.expires_at - _DB_NOW)
                                            .where(ControllerLease.id == LEASE_ID)).one()
        return {"epoch": int(epoch), "leader": holder if left > 0 else None,
                "lease": f"{self.ttl_s:g} s, renewed every {self.renew_s:g} s; {max(0.0, left):.1f} s left"}

    # ---- the thread that keeps it ----------------------------------------------------------------------------------

    def start(self, on_change: Callable[[], None]) -> None:
        """Try once now (a lone replica leads from its first pass), then keep trying or renewing in a thread."""
        self._on_change = on_change
        try:
            self.try_acquire()
        except Exception:  # the database may be restarting: the thread tries again
            log.exception("could not read the controller lease")
        self._thread = threading.Thread(target=self._keep, name="corral-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            self.release()
        except Exception:  # it lapses on its own within a term
            log.exception("could not release the controller lease")

    def _keep(self) -> None:
        while not self._stop.wait(self.renew_s if self.epoch is not None else self.poll_s):
            was = self.leading
            try:
                if self.epoch is not None:
                    self.renew()
                else:
                    self.try_acquire()
            except Exception:  # keep trying; `leading` turns false on its own once the local deadline passes
                log.exception("controller lease: the database did not answer")
            if self.leading != was:
                self._on_change()

"""Waking the leading controller from whichever replica took a request.

A submission, cancel, policy switch or team change wakes the controller of the replica whose API took it (`wake()`),
so it is seen at once rather than at the next tick. With several replicas (`scheduler.live.leader`) that controller
may be a standby's, which does not schedule: the leader would see the change only at its next tick. On PostgreSQL the
API therefore also rings a doorbell, `NOTIFY corral_changes`, and every replica listens on that channel and wakes its
own controller (a standby's wakes, sees it does not lead, and goes back to waiting). On SQLite there is one process,
and `wake()` is enough: `ring` does nothing.

A lost notification costs only latency: the leader still reads the store at every tick.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from scheduler.live.store.db import Store

log = logging.getLogger(__name__)

CHANNEL = "corral_changes"
RECONNECT_S = 2.0  # after the listening connection failed (the database restarting, say)


def shared(store: Store) -> bool:
    """Whether other replicas may share this store (PostgreSQL) and so need the doorbell."""
    return store.engine.dialect.name == "postgresql"


def ring(store: Store) -> None:
    """Wake every replica's controller: the change is committed, tell them (nothing on SQLite)."""
    if not shared(store):
        return
    with store.engine.connect() as conn:
        conn.execute(text(f"NOTIFY {CHANNEL}"))
        conn.commit()


class Listener:
    """A thread holding one connection that LISTENs on the channel and calls `on_change` at each notification."""

    def __init__(self, store: Store, on_change: Callable[[], None]) -> None:
        self.store = store
        self.on_change = on_change
        self.heard = 0  # notifications received (for tests and logs)
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corral-doorbell", daemon=True)

    def start(self, timeout_s: float = 10.0) -> Listener:
        """Start listening; returns once the LISTEN is in place (or after `timeout_s`, logging why not)."""
        self._thread.start()
        if not self._listening.wait(timeout_s):
            log.warning("the doorbell is not listening yet; changes through other replicas wait for the next tick")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            raw: Any = None
            try:
                raw = self.store.engine.raw_connection()
                conn = raw.driver_connection  # psycopg's own connection: notifications are a driver feature
                conn.autocommit = True
                conn.execute(f"LISTEN {CHANNEL}")
                self._listening.set()
                while not self._stop.is_set():
                    # Wakes at a notification or after a second, to look at the stop flag.
                    for _ in conn.notifies(timeout=1.0, stop_after=1):
                        self.heard += 1
                        self.on_change()
            except Exception:
                log.exception("doorbell connection failed; listening again in %g s", RECONNECT_S)
                self._stop.wait(RECONNECT_S)
            finally:
                if raw is not None:
                    raw.invalidate()  # a LISTENing connection must not go back to the pool


class Ringer:
    """`ring` off the request's path, coalesced: a thread sends one NOTIFY for all the rings that arrived while it
    sent the last. A submission then costs no round trip and commit of its own for the doorbell, and a burst of them
    wakes the other replicas once (the leader reads the store whole at each pass, so one wake covers them all)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.sent = 0  # NOTIFYs sent (for tests and logs)
        self._pending = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corral-ringer", daemon=True)
        self._thread.start()

    def ring(self) -> None:
        self._pending.set()

    def stop(self) -> None:
        """Send a last NOTIFY (for a ring that may be pending), then end the thread."""
        self._stop.set()
        self._pending.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            self._pending.wait()
            self._pending.clear()
            try:
                ring(self.store)
                self.sent += 1
            except Exception:  # the database restarting: the leader still sees the change at its next tick
                log.exception("could not ring the doorbell; the leader sees the change at its next tick")
            if self._stop.is_set():
                return

"""What a view needs from the app it runs in: the store and the controller's doorbell. Views reach them through the
app (not module globals), so tests can run several apps, each on its own database."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

from flask import current_app
from sqlalchemy.orm import Session

from scheduler.live.store import Store

STORE_KEY = "corral.store"
NOTIFY_KEY = "corral.notify"
WRITE_LOCK_KEY = "corral.write_lock"
CONTROLLER_KEY = "corral.controller_status"
T = TypeVar("T")

log = logging.getLogger(__name__)


def store() -> Store:
    st: Store = current_app.extensions[STORE_KEY]
    return st


def init_app_writes(store: Store) -> threading.Lock | None:
    """The lock `write_session` takes, for SQLite only (PostgreSQL has row locks and needs none)."""
    return threading.Lock() if store.engine.dialect.name == "sqlite" else None


@contextmanager
def write_session() -> Iterator[Session]:
    """A session for a request that writes. SQLite admits one writer at a time, and a thread that finds the database
    locked sleeps in SQLite's busy handler for milliseconds at a time: with 8 request threads submitting, that halves
    throughput. Queuing this process's writers on a Python lock instead hands the database over at once."""
    lock: threading.Lock | None = current_app.extensions[WRITE_LOCK_KEY]
    with lock or nullcontext(), store().session(write=True) as s:
        yield s


def page(items: Sequence[T], args: dict[str, Any]) -> tuple[list[T], int]:
    """One page (`limit`, `offset` from PageArgs) of a list and its length. For the short lists admins make (tokens,
    users, teams), which the store returns whole: the page bounds the response, not the query."""
    return list(items[args["offset"]:args["offset"] + args["limit"]]), len(items)


def controller_status() -> dict[str, Any] | None:
    """This replica's controller: leader or standby, with the lease's epoch and holder (None: no controller here)."""
    status: Callable[[], dict[str, Any]] | None = current_app.extensions.get(CONTROLLER_KEY)
    return status() if status is not None else None


def notify() -> None:
    """Wake the controller. The change is already committed and the controller also polls, so a failing doorbell
    is logged rather than turned into an error for a request that succeeded."""
    ring: Callable[[], None] = current_app.extensions[NOTIFY_KEY]
    try:
        ring()
    except Exception:
        log.exception("notify() failed; the controller will see the change on its next poll")

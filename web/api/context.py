"""What a view needs from the app it runs in: the store and the controller's doorbell. Views reach them through the
app (not module globals), so tests can run several apps, each on its own database."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from flask import current_app
from sqlalchemy.orm import Session

from scheduler.live.store import Store

STORE_KEY = "corral.store"
NOTIFY_KEY = "corral.notify"
CONTROLLER_KEY = "corral.controller_status"
T = TypeVar("T")

log = logging.getLogger(__name__)


def store() -> Store:
    st: Store = current_app.extensions[STORE_KEY]
    return st


def write_session() -> AbstractContextManager[Session]:
    """A session for a request that writes (`Store.session(write=True)`: on SQLite, queued behind this process's other
    writers, the controller's passes included)."""
    return store().session(write=True)


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

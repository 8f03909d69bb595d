"""The PostgreSQL pool's liveness check (`scheduler.live.store.db._ping_idle_connections`): a pooled connection idle
for longer than `PING_AFTER_IDLE_S` is pinged at checkout and, dead, replaced before the caller uses it; one used a
moment ago is not pinged (the round trip `pool_pre_ping` cost every checkout). Time is not waited for: the test
moves a connection's "idle since" back instead."""

from __future__ import annotations

import pytest
from conftest import POSTGRES_URL
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from scheduler.live.store import Store
from scheduler.live.store.db import IDLE_SINCE, PING_AFTER_IDLE_S


def _one_connection(store: Store) -> None:
    """Leave the pool holding exactly one connection, so the next checkout gets it."""
    store.engine.dispose()
    with store.engine.connect() as conn:
        conn.execute(text("SELECT 1"))


def _backend_pid(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _kill(pid: int) -> None:
    """End the server process of connection `pid` from a connection outside the store's pool."""
    engine = create_engine(POSTGRES_URL)
    try:
        with engine.connect() as other:
            assert other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
    finally:
        engine.dispose()


def _age_pooled(store: Store, seconds: float) -> int:
    """Move back when every checked-in connection was given back; returns how many."""
    records = list(store.engine.pool._pool.queue)  # type: ignore[attr-defined]
    for record in records:
        record.info[IDLE_SINCE] -= seconds
    return len(records)


def test_a_dead_connection_idle_past_the_threshold_is_replaced_before_use(pg_store: Store) -> None:
    _one_connection(pg_store)
    pid = _backend_pid(pg_store)
    _kill(pid)
    assert _age_pooled(pg_store, PING_AFTER_IDLE_S + 5) >= 1
    with pg_store.session() as s:  # pinged at checkout, found dead, replaced: the caller sees nothing of it
        assert s.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid


def test_a_connection_used_a_moment_ago_is_not_pinged(pg_store: Store) -> None:
    """What the saved round trip means: a connection that died within the threshold of its last use fails its next
    statement (as any statement in flight during a restart does), and the pool then drops what it held."""
    _one_connection(pg_store)
    pid = _backend_pid(pg_store)
    _kill(pid)
    assert len(pg_store.engine.pool._pool.queue) == 1  # type: ignore[attr-defined]  # the dead one, next
    with pytest.raises(OperationalError), pg_store.engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    with pg_store.session() as s:  # the next one works again
        assert s.execute(text("SELECT 1")).scalar_one() == 1

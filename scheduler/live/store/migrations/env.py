"""Alembic environment: runs on the connection `scheduler.live.store.db.upgrade` hands it, or opens one from the URL
(`alembic -x` style use from a shell is not needed: `Store.open` migrates on every start)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from scheduler.live.store.models import Base

config = context.config
target_metadata = Base.metadata


def run() -> None:
    conn = config.attributes.get("connection")
    if conn is None:
        url = config.get_main_option("sqlalchemy.url")
        assert url is not None, "alembic_config() always sets sqlalchemy.url"
        with create_engine(url).connect() as conn:
            _migrate(conn)
            conn.commit()
    else:
        _migrate(conn)


def _migrate(conn: Connection) -> None:
    context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


run()

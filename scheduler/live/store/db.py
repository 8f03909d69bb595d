"""Where the store lives and how to open it: engines, sessions and migrations, with no Flask in sight.

SQLite under `CORRAL_HOME` (default `~/.corral`) is the embedded default, in WAL mode so the API's readers never
block the controller's writer; `DATABASE_URL` selects anything else SQLAlchemy speaks (PostgreSQL in production:
`postgresql+psycopg://user@host/db`). `Store.open` brings the schema to the newest Alembic revision first.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import cached_property
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.exc import InvalidatePoolError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from scheduler.core.paths import corral_home
from scheduler.live.store.models import StoreIdentity

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")
IDLE_IN_TRANSACTION_TIMEOUT_S = 30
SQLITE_BUSY_TIMEOUT_S = 30.0  # how long a SQLite writer waits for its turn before failing ("database is locked")
MIGRATION_LOCK_KEY = 0x636F7272616C  # "corral": the PostgreSQL advisory lock that serialises replicas' migrations
BEGIN_OPTION = "corral_sqlite_begin"
# A pooled connection idle longer than this is pinged before use (`_ping_idle_connections`); (PostgreSQL)
PING_AFTER_IDLE_S = 1.0
IDLE_SINCE = "corral_idle_since"  # in a pooled connection's `info`: when it was last given back


def database_url() -> str:
    """`DATABASE_URL` if set, else the embedded SQLite file under `CORRAL_HOME`."""
    url = os.environ.get("DATABASE_URL")
    if url:
        # The usual Heroku-style spelling means psycopg 3 here (the driver this project installs).
        if url.startswith("postgres://"):
            url = "postgresql://" + url.removeprefix("postgres://")
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        return url
    home = corral_home()
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'corral.db'}"


def store_exists(url: str) -> bool:
    """Whether `url` already holds a Corral store. False for a SQLite file that is missing or empty, or a database
    without Corral's migrations table: what `Store.open` would make anew, empty (`corral token create` warns then: a
    token in a new store is one no running server knows)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database
        if not path or path == ":memory:":
            return False
        return Path(path).is_file() and Path(path).stat().st_size > 0
    engine = create_engine(url)
    try:
        return inspect(engine).has_table("alembic_version")
    finally:
        engine.dispose()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            # pysqlite's own transaction handling emits no BEGIN before a SAVEPOINT, so a nested transaction would
            # commit on its own; SQLAlchemy's documented recipe: take over BEGIN ourselves (see `_begin`).
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")  # readers do not block the writer, nor it them
            cur.execute("PRAGMA synchronous=NORMAL")  # durable at each checkpoint; a power cut loses no committed WAL
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            # A unit of work that will write starts with BEGIN IMMEDIATE (`Store.session(write=True)`): a deferred
            # transaction that reads and then writes fails at once with "database is locked" (SQLITE_BUSY_SNAPSHOT,
            # which no busy timeout waits out) whenever another connection committed in between. Taking the write
            # lock first makes it wait its turn instead. Readers keep plain BEGIN and never block.
            # On the driver's connection itself: through exec_driver_sql, the BEGIN cost as much Python as a query.
            # A connection for one read outside any transaction (`Store.reads`) begins none: SQLite runs the
            # statement in autocommit, and the rollback at its end does nothing.
            mode = conn.get_execution_options().get(BEGIN_OPTION, "DEFERRED")
            if mode is not None:
                conn.connection.driver_connection.execute(f"BEGIN {mode}")  # type: ignore[union-attr]

        return engine
    engine = create_engine(url, pool_size=10, max_overflow=20)
    _ping_idle_connections(engine)
    if url.startswith("postgresql"):

        @event.listens_for(engine, "connect")
        def _session_settings(dbapi_conn: Any, _record: Any) -> None:
            # A client that vanishes mid-transaction without closing its socket (a partitioned or frozen host) keeps
            # its row locks until TCP gives up, which can take hours; a standby taking over would wait on them. No
            # Corral transaction sits idle this long, so the server ends such a session and frees its locks. Set
            # outside a transaction: the pool's rollback on return would undo it otherwise.
            autocommit = dbapi_conn.autocommit
            dbapi_conn.autocommit = True
            cur = dbapi_conn.cursor()
            cur.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_TIMEOUT_S}s'")
            cur.close()
            dbapi_conn.autocommit = autocommit

    return engine


def _ping_idle_connections(engine: Engine, idle_s: float = PING_AFTER_IDLE_S) -> None:
    """A pooled connection idle for more than `idle_s` is pinged at checkout and, found dead (the server restarted, a
    firewall dropped it), replaced before the caller sees it: `pool_pre_ping`, without the round trip it costs every
    checkout (two a request on the API's submission path, of seven). One used within `idle_s` is taken as alive; one
    that died in that second fails its next statement, and SQLAlchemy then discards every connection of the pool
    made before (its disconnect handling), so a restart costs at most a request a pooled connection, not more."""

    @event.listens_for(engine, "checkin")
    def _idle_since(_dbapi_conn: Any, record: Any) -> None:
        record.info[IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(IDLE_SINCE)
        if since is None or time.monotonic() - since <= idle_s:
            return  # new (just connected), or used a moment ago
        try:
            engine.dialect.do_ping(dbapi_conn)
        except engine.dialect.loaded_dbapi.Error as exc:
            # As pre-ping does: the pool drops every connection made before (a restart took them all) and connects
            # anew for this checkout.
            raise InvalidatePoolError(f"pooled connection dead after {time.monotonic() - since:.1f} s idle: "
                                      f"{exc}") from exc


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


class Store:
    """An engine and its session factory. Create one per process; sessions are short-lived, one per unit of work."""

    def __init__(self, url: str, engine: Engine) -> None:
        self.url = url
        self.engine = engine
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        self.write_sessions = sessionmaker(engine.execution_options(**{BEGIN_OPTION: "IMMEDIATE"}),
                                           expire_on_commit=False)
        # SQLite admits one writer at a time, and a connection that finds the database locked sleeps in SQLite's
        # busy handler for milliseconds at a time (the API's request threads behind the controller's pass, or behind
        # each other): queued on a lock instead, writers get the database the moment it is free. PostgreSQL has row
        # locks and needs none.
        self._writer: AbstractContextManager[Any] = (
            SqliteWriters(engine.url.database) if engine.dialect.name == "sqlite" else nullcontext())
        # For one statement that reads and needs no transaction around it (the API's revocation check, on every
        # request): on PostgreSQL in autocommit, which saves the BEGIN and the ROLLBACK, two round trips of three;
        # on SQLite with no BEGIN of ours (`make_engine`), so in SQLite's autocommit.
        self.reads: Engine = (engine.execution_options(**{BEGIN_OPTION: None}) if engine.dialect.name == "sqlite"
                              else engine.execution_options(isolation_level="AUTOCOMMIT"))

    @classmethod
    def open(cls, url: str | None = None, *, migrate: bool = True) -> Store:
        url = url or database_url()
        engine = make_engine(url)
        if migrate:
            upgrade(engine, url)
        return cls(url, engine)

    @contextmanager
    def session(self, *, write: bool = False) -> Iterator[Session]:
        """A session in a transaction: committed on success, rolled back on an exception. Pass `write=True` for a
        unit of work that writes: on SQLite it then holds the write lock from its first statement (see `_begin`),
        so it waits for other writers instead of failing half-way; elsewhere it changes nothing. Never open a write
        session inside another in one thread: on SQLite the inner one would wait for the outer forever."""
        if not write:
            with self.sessions() as s, s.begin():
                yield s
            return
        with self._writer, self.write_sessions() as s, s.begin():
            yield s

    @cached_property
    def id(self) -> str:
        """This store's id (a UUID, `StoreIdentity`), read once: its jobs' files live under it
        (`scheduler.live.job_files`)."""
        with self.session() as s:
            row = s.get(StoreIdentity, 1)
        if row is None:
            raise RuntimeError("the store has no id: its schema predates migration 0019 (open it with migrate=True)")
        return row.store_id

    def close(self) -> None:
        self.engine.dispose()


class WritersTimeout(OperationalError):
    """No write turn on a SQLite store within the busy timeout: what SQLite's own "database is locked" says."""

    def __init__(self, message: str) -> None:
        super().__init__(message, None, sqlite3.OperationalError("database is locked"))


class SqliteWriters:
    """The queue of a SQLite store's writers: a thread lock for this process's, then an exclusive `flock` on a file
    beside the database (`corral.db-writers`) for the processes that share it (`corral serve --api-workers`, the CLI):
    the kernel hands it to the next waiter the moment it is released, where SQLite's busy handler would sleep. The
    busy timeout stays the backstop (a writer without this lock: an older Corral, the sqlite3 shell)."""

    def __init__(self, database: str | None, timeout_s: float = SQLITE_BUSY_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._thread_lock = threading.Lock()
        self.path = Path(database + "-writers") if database and database != ":memory:" else None
        self._fd: int | None = None
        self._pid = 0
        self._held = False

    def _file(self) -> int | None:
        if self.path is None:
            return None
        if self._fd is None or self._pid != os.getpid():  # (a forked child opens its own: flock is per open file)
            try:
                self._fd, self._pid = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600), os.getpid()
            except OSError as exc:  # a read-only folder: SQLite's busy timeout alone, as before
                log.warning("%s: %s; writers from several processes wait in SQLite's busy handler", self.path, exc)
                self.path = None
                return None
        return self._fd

    def __enter__(self) -> SqliteWriters:
        # Bounded as SQLite's busy timeout bounds its own wait: a writer stuck while holding the lock (a frozen
        # process, a debugger) fails the others after the timeout, as "database is locked" did, instead of
        # blocking every write of every process sharing the store for good.
        deadline = time.monotonic() + self.timeout_s
        if not self._thread_lock.acquire(timeout=self.timeout_s):
            raise WritersTimeout(f"no write turn on the store within {self.timeout_s:g} s (another writer holds it)")
        try:
            fd = self._file()
            if fd is not None:
                self._flock(fd, deadline)
                self._held = True
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def _flock(self, fd: int, deadline: float) -> None:
        """The exclusive lock, waited for until `deadline`: at once when it is free (the common case), else polled
        with a pause that grows to 5 ms (flock has no timed wait)."""
        pause = 0.0002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise WritersTimeout(f"no write turn on the store within {self.timeout_s:g} s: another process "
                                         f"holds {self.path}") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.005)

    def __exit__(self, *_exc: object) -> None:
        try:
            if self._held:
                self._held = False
                assert self._fd is not None
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()


def upgrade(engine: Engine, url: str) -> None:
    """Bring the schema to the newest migration (idempotent; safe on every start)."""
    cfg = alembic_config(url)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            # Two replicas starting together would both create the same tables; the second waits here until the
            # first commits, then finds the schema at head and does nothing. Released at the transaction's end.
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")

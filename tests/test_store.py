"""The store on SQLite and PostgreSQL: migrations agree with the models, units of work are atomic, tokens are
stored hashed, idempotent submission and the cancel race behave."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from conftest import waits_for
from sqlalchemy import func, select, text
from sqlalchemy.exc import OperationalError

from scheduler.live.store import JobState, Store, queries
from scheduler.live.store.db import SqliteWriters
from scheduler.live.store.models import ApiToken, Base, Job, JobEvent, Team, User

EMULATED = {"name": "a", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 10.0}


def count(store: Store, model: type) -> int:
    with store.session() as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def test_migrations_create_exactly_the_models(store: Store) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_sqlite_runs_in_wal_mode(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = Store.open(f"sqlite:///{tmp_path / 'c.db'}")
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    store.close()


def test_a_writer_stuck_holding_the_lock_fails_the_others_after_the_timeout(tmp_path: Path) -> None:
    """Another process holding the writers' flock (a frozen writer) makes a write session fail with SQLite's own
    "database is locked" once the busy timeout has passed, writing nothing; the writes go through once it lets go."""
    store = Store.open(f"sqlite:///{tmp_path / 'c.db'}")
    store._writer = SqliteWriters(store.engine.url.database, timeout_s=0.3)
    with store.session(write=True) as s:  # creates the lock's file, as any write does
        queries.ensure_user(s, "alice")
    other = os.open(tmp_path / "c.db-writers", os.O_RDWR)  # another open file: flock treats it as another process
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        began = time.monotonic()
        with pytest.raises(OperationalError, match="database is locked"), store.session(write=True) as s:
            queries.ensure_user(s, "bob")
        assert 0.3 <= time.monotonic() - began < 10
    finally:
        os.close(other)  # releases the flock
    with store.session() as s:
        assert s.scalar(select(User).where(User.name == "bob")) is None
    with store.session(write=True) as s:
        queries.ensure_user(s, "bob")
    assert count(store, User) >= 2
    store.close()


def test_a_thread_stuck_writing_fails_the_process_s_other_writers_after_the_timeout(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'c.db'}")
    store._writer = writers = SqliteWriters(store.engine.url.database, timeout_s=0.3)
    held, release = threading.Event(), threading.Event()

    def stuck() -> None:
        with writers:
            held.set()
            release.wait(30)

    t = threading.Thread(target=stuck)
    t.start()
    try:
        assert held.wait(30)
        with pytest.raises(OperationalError, match="database is locked"), store.session(write=True) as s:
            queries.ensure_user(s, "carol")
    finally:
        release.set()
        t.join(30)
    with store.session(write=True) as s:
        queries.ensure_user(s, "carol")
    store.close()


def test_a_failed_unit_of_work_stores_nothing(store: Store) -> None:
    with store.session() as s:
        user = queries.ensure_user(s, "alice")
    with pytest.raises(RuntimeError), store.session() as s:
        user = queries.ensure_user(s, "alice")
        job, created = queries.submit(s, user, dict(EMULATED, client_token="t1"))
        assert created and job.id is not None
        raise RuntimeError("the request failed after the insert")
    assert count(store, Job) == 0 and count(store, JobEvent) == 0


def test_client_token_makes_retries_idempotent(store: Store) -> None:
    with store.session() as s:
        user = queries.ensure_user(s, "alice")
        first, created = queries.submit(s, user, dict(EMULATED, client_token="retry-me"))
    with store.session() as s:
        user = queries.ensure_user(s, "alice")
        again, created_again = queries.submit(s, user, dict(EMULATED, client_token="retry-me"))
        other = queries.ensure_user(s, "bob")
        theirs, created_theirs = queries.submit(s, other, dict(EMULATED, client_token="retry-me"))
    assert created and not created_again and again.id == first.id
    assert created_theirs and theirs.id != first.id  # tokens are per user
    assert count(store, Job) == 2


def test_tokens_are_stored_hashed_and_authenticate(store: Store) -> None:
    with store.session() as s:
        token = queries.create_token(s, "carol", admin=True)
    with store.session() as s:
        stored = s.scalars(select(ApiToken)).one()
        assert token not in (stored.token_hash, stored.prefix) and stored.token_hash == queries.hash_token(token)
        found = queries.user_for_token(s, token)
        assert found is not None and found[0].name == "carol" and found[0].admin and found[1] is None
        assert queries.user_for_token(s, token + "x") is None


@pytest.mark.parametrize("name", ["", "--admin", "-x", "a b", "al/ice", "<b>", "x" * 65])
def test_bad_user_names_are_refused_and_create_nothing(store: Store, name: str) -> None:
    with pytest.raises(ValueError, match="must not be empty|starts with '-'|letters, digits"), store.session() as s:
        queries.create_token(s, name, admin=True)
    assert count(store, User) == 0 and count(store, ApiToken) == 0


def test_revoked_and_expired_tokens_do_not_authenticate(store: Store) -> None:
    with store.session() as s:
        live = queries.create_token(s, "dave", expires_at=time.time() + 3600)
        expired = queries.create_token(s, "dave", expires_at=time.time() - 1)
        revoked = queries.create_token(s, "dave")
    with store.session() as s:
        (tok,) = queries.find_tokens(s, revoked[: len(queries.TOKEN_PREFIX) + 6])
        queries.revoke_token(s, tok)
    with store.session() as s:
        assert queries.user_for_token(s, live) is not None
        assert queries.user_for_token(s, expired) is None
        assert queries.user_for_token(s, revoked) is None
        listed = queries.list_tokens(s)
        assert [t.revoked for t in listed] == [False, False, True] and listed[2].revoked_at is not None
        assert all(t.user.name == "dave" for t in listed)
        # the 401 says which, so the holder knows to ask for a new token
        assert queries.token_refusal(s, expired).startswith("token expired at ")
        assert queries.token_refusal(s, revoked) == "token revoked"
        assert queries.token_refusal(s, live + "x") == "invalid token"


def test_cancel_loses_the_race_to_a_placement(store: Store) -> None:
    """The API cancels a pending job only if it is still pending when the update runs: a job the controller has just
    placed is flagged instead, and the controller stops it."""
    with store.session() as s:
        job, _ = queries.submit(s, queries.ensure_user(s, "alice"), dict(EMULATED))
    with store.session() as s:
        row = s.get(Job, job.id)
        assert row is not None
        s.execute(text("UPDATE jobs SET state = 'running' WHERE id = :i"), {"i": job.id})  # the controller won
        out = queries.cancel(s, row)
        assert out.state == JobState.RUNNING and out.cancel_requested
    with store.session() as s:
        job2, _ = queries.submit(s, queries.ensure_user(s, "alice"), dict(EMULATED, name="b"))
        assert queries.cancel(s, job2).state == JobState.CANCELLED
        kinds = [e.kind for e in s.scalars(select(JobEvent).where(JobEvent.job_id == job2.id))]
        assert kinds == ["submitted", "cancelled"]


# ---- deleting a team while one of its members submits ------------------------------------------------------------


def _team_with_member(store: Store) -> None:
    with store.session(write=True) as s:
        now = time.time()
        s.add(Team(name="vision", quota_gpus=2.0, borrow_limit_gpus=None, created_at=now, updated_at=now))
        s.flush()
        queries.ensure_user(s, "vera", team="vision")


def test_a_team_deleted_while_a_member_submits_counts_the_job_or_moves_it_to_default(store: Store) -> None:
    """Two orders of one race, each held open on purpose: a submission whose transaction is open when the team is
    deleted makes the deletion wait, then refuse (the team has a job); a deletion whose transaction is open makes the
    submission wait, and its job lands in `default`. Either way no job names a team that is gone."""
    _team_with_member(store)

    def submit_and_hold(submitted: threading.Event, go: threading.Event) -> int:
        with store.session(write=True) as s:
            job, _ = queries.submit(s, queries.ensure_user(s, "vera"), EMULATED)
            submitted.set()
            assert go.wait(10)
            return job.id

    def delete() -> list[str]:
        with store.session(write=True) as s:
            team = queries.team_by_name(s, "vision")
            assert team is not None
            return queries.delete_team(s, team)

    job_id, refused = waits_for(submit_and_hold, delete, "the deletion")
    assert isinstance(refused, queries.TeamConflict), refused
    with store.session() as s:
        assert queries.team_by_name(s, "vision") is not None
        assert s.get(Job, job_id).team == "vision"  # type: ignore[union-attr]

    # The other order: the deletion's transaction is open first.
    with store.session(write=True) as s:
        for row in s.scalars(select(Job)):
            row.state = JobState.CANCELLED

    def delete_and_hold(deleted: threading.Event, go: threading.Event) -> list[str]:
        with store.session(write=True) as s:
            team = queries.team_by_name(s, "vision")
            assert team is not None
            moved = queries.delete_team(s, team)
            deleted.set()
            assert go.wait(10)
            return moved

    def submit() -> int:
        with store.session(write=True) as s:
            return queries.submit(s, queries.ensure_user(s, "vera"), {**EMULATED, "name": "b"})[0].id

    moved, job_id = waits_for(delete_and_hold, submit, "the submission")
    assert moved == ["vera"]
    with store.session() as s:
        assert queries.team_by_name(s, "vision") is None
        assert s.get(Job, job_id).team == queries.DEFAULT_TEAM  # type: ignore[union-attr]

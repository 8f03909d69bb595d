"""Each store's job files are its own (issue 46): two stores sharing one CORRAL_HOME (a PostgreSQL store beside the
embedded SQLite one, or a new `corral.db` after the old one was deleted) both have a job 1, and the second one's job 1
resumed the first's checkpoint and showed its log. Files now live under the store's id (`Store.id`,
`scheduler.live.job_files`); a store from before ids claims the old folders once, and no other store ever does."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from alembic import command
from conftest import wait_until

from scheduler.core.workloads import catalog
from scheduler.live import job_files
from scheduler.live.job_accounts import JobAccounts
from scheduler.live.rows import job_of, launch_of
from scheduler.live.runs import RankSpec, rank_env
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.db import alembic_config
from scheduler.live.store.models import Job as JobRow
from scheduler.live.worker import Worker
from web import create_app

JOB = {"name": "train", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 20.0}


def submit_job_1(store: Store) -> JobRow:
    with store.session(write=True) as s:
        row, _ = q.submit(s, q.ensure_user(s, "alice"), dict(JOB))
        assert row.id == 1
        row.attempt = 1
        s.flush()
        _ = row.user  # loaded for `launch_of`, which names the job's user
        return row


def test_two_stores_in_one_home_never_share_a_jobs_files(store: Store, corral_home: Path) -> None:
    """The old store's job 1 ran nearly to its end and left its checkpoint and log; the new store's job 1 (another
    store in the same CORRAL_HOME, SQLite or PostgreSQL) starts from nothing and shows only its own log."""
    corral_home.mkdir(parents=True, exist_ok=True)
    old = Store.open(f"sqlite:///{corral_home / 'old.db'}")
    try:
        assert old.id != store.id
        old_row, row = submit_job_1(old), submit_job_1(store)
        theirs = launch_of(old_row, job_of(old_row, catalog()), 1, [], JobAccounts(), old.id)
        Path(theirs.checkpoint_dir).mkdir(parents=True)
        (Path(theirs.checkpoint_dir) / "emulated.json").write_text(json.dumps({"done_s": 19.9, "attempt": 1}))
        Path(theirs.log_dir).mkdir(parents=True)
        (Path(theirs.log_dir) / "rank-0.log").write_text("the old job's output\n")
        rank = RankSpec(0, "node0", (0,), 1.0, 80.0)
        mine = launch_of(row, job_of(row, catalog()), 1, [rank], JobAccounts(), store.id)
        assert mine.checkpoint_dir != theirs.checkpoint_dir and mine.log_dir != theirs.log_dir
        assert mine.checkpoint_dir == str(corral_home / "stores" / store.id / "checkpoints" / "job-1")
        worker = Worker(mine, 0)
        worker.start(rank_env(rank, 1, "127.0.0.1", 29500, mine))
        log = Path(mine.log_dir) / "rank-0.log"
        try:
            wait_until("its first log line", lambda: log.exists() and "work left" in log.read_text(), timeout=30)
        finally:
            worker.stop()
        assert "20.0 s of isolated work left" in log.read_text()  # from nothing, not from the other's 19.9 s
        client = create_app(store).test_client()
        with store.session() as s:
            token = q.create_token(s, "alice")
        answer = client.get("/api/v1/jobs/1/logs?attempt=1", headers={"Authorization": f"Bearer {token}"}).json
        assert answer is not None
        assert "work left" in answer["logs"][0]["text"]
        assert "the old job's output" not in json.dumps(answer)
    finally:
        old.close()


def test_a_store_id_names_a_folder_only_as_a_uuid(corral_home: Path) -> None:
    with pytest.raises(ValueError):
        job_files.checkpoint_dir("../../etc", 1)


def _downgrade_to_before_ids(store: Store) -> None:
    cfg = alembic_config(store.url)
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0018")  # the revision before store ids


def test_a_store_from_before_ids_claims_the_old_folders_once_and_alone(db_url: str, corral_home: Path) -> None:
    """The folders of the time before ids (CORRAL_HOME/logs/job-N, checkpoints/job-N) go, once, to the store that
    had jobs then, on its first start after the upgrade; a store made since never takes them, nor does a second old
    store sharing the home once the first has claimed them."""
    home = job_files.secure_home(corral_home)
    legacy_log = home / "logs" / "job-1" / "attempt-1" / "rank-0.log"
    legacy_log.parent.mkdir(parents=True)
    legacy_log.write_text("before ids\n")
    (home / "checkpoints" / "job-1").mkdir(parents=True)
    (home / "checkpoints" / "job-1" / "emulated.json").write_text('{"done_s": 5.0, "attempt": 1}')
    # A store made anew: no claim, whatever starts first.
    fresh = Store.open(f"sqlite:///{home / 'fresh.db'}")
    with fresh.session() as s:
        assert q.has_legacy_files(s) is False
    job_files.secure_store_files(fresh.id, legacy=False, home=home)
    assert legacy_log.exists() and job_files.claimant(home) is None
    # A store that held jobs before migration 0019 (upgraded from 0017, as `Store.open` does at the first start).
    old = Store.open(db_url)
    submit_job_1(old)
    _downgrade_to_before_ids(old)
    old.close()
    old = Store.open(db_url)
    try:
        with old.session() as s:
            assert q.has_legacy_files(s) is True
        folder = job_files.secure_store_files(old.id, legacy=True, home=home)
        assert job_files.claimant(home) == old.id
        assert not (home / "logs").exists() and not (home / "checkpoints").exists()
        assert job_files.log_path(old.id, 1, 1, 0).read_text() == "before ids\n"
        assert (job_files.checkpoint_dir(old.id, 1) / "emulated.json").exists()
        assert stat.S_IMODE((folder / "logs").stat().st_mode) == 0o700
        assert stat.S_IMODE((folder / "checkpoints").stat().st_mode) == 0o711
        assert stat.S_IMODE(folder.stat().st_mode) == 0o711
        # Another old store sharing the home (an old server wrote there again): the claim is taken; nothing moves.
        legacy_log.parent.mkdir(parents=True)
        legacy_log.write_text("another old store's\n")
        other = "0e9f3c4a-6a77-4d1b-8b62-3c0a9a1d2f10"
        assert job_files.claim_legacy_files(other, home) is False
        assert legacy_log.read_text() == "another old store's\n" and not job_files.store_dir(other, home).exists()
        # The claimant's next start takes nothing more: its claim is done.
        assert job_files.claim_legacy_files(old.id, home) is True
        assert legacy_log.read_text() == "another old store's\n"
        assert job_files.log_path(old.id, 1, 1, 0).read_text() == "before ids\n"
    finally:
        old.close()
        fresh.close()

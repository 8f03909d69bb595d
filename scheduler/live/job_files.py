"""The live service's files under `CORRAL_HOME` (`scheduler.core.paths.corral_home`): each job's logs and checkpoint
folder, and the permissions that keep the store, the logs and the agents the server's own."""

from __future__ import annotations

import os
from pathlib import Path

from scheduler.core.paths import corral_home


def logs_dir(job_id: int) -> Path:
    return corral_home() / "logs" / f"job-{job_id}"


def log_path(job_id: int, attempt: int, rank: int) -> Path:
    """One file per worker per run: `logs/job-7/attempt-2/rank-0.log`."""
    return logs_dir(job_id) / f"attempt-{attempt}" / f"rank-{rank}.log"


def checkpoint_dir(job_id: int) -> Path:
    """`CORRAL_CHECKPOINT_DIR`: kept across preemptions and restarts, so a requeued run can resume."""
    return corral_home() / "checkpoints" / f"job-{job_id}"


def secure_home(home: Path | None = None) -> Path:
    """Make `CORRAL_HOME` private to the server's user before anything is written there: the home and the
    checkpoints folder may be passed through (mode 0711, so a command job running as another user reaches its own
    checkpoint folder, which it owns) but not listed; everything else (the SQLite store with its token hashes, every
    job's logs, trained agents) is 0700/0600, readable by the server's user alone."""
    home = home or corral_home()
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o711)
    for sub, mode in (("logs", 0o700), ("agents", 0o700), ("checkpoints", 0o711)):
        (home / sub).mkdir(exist_ok=True)
        os.chmod(home / sub, mode)
    for db in home.glob("corral.db*"):  # the database and its -wal and -shm files
        os.chmod(db, 0o600)
    return home

"""Where Corral's files go under `CORRAL_HOME` (default `~/.corral`; a shared volume when Ray workers run on other
machines): the SQLite store, live jobs' logs and checkpoints, and agents trained on this machine."""

from __future__ import annotations

import os
from pathlib import Path


def corral_home() -> Path:
    return Path(os.environ.get("CORRAL_HOME") or Path.home() / ".corral").expanduser()


def agents_dir() -> Path:
    """Where `corral train` saves agents unless told otherwise, and where the server looks for `rl:NAME` after the
    shipped agents/zoo (both writable by admins only)."""
    return corral_home() / "agents"


def logs_dir(job_id: int) -> Path:
    return corral_home() / "logs" / f"job-{job_id}"


def log_path(job_id: int, attempt: int, rank: int) -> Path:
    """One file per worker per run: `logs/job-7/attempt-2/rank-0.log`."""
    return logs_dir(job_id) / f"attempt-{attempt}" / f"rank-{rank}.log"


def checkpoint_dir(job_id: int) -> Path:
    """`CORRAL_CHECKPOINT_DIR`: kept across preemptions and restarts, so a requeued run can resume."""
    return corral_home() / "checkpoints" / f"job-{job_id}"

"""Where a live job's files go under `CORRAL_HOME` (a shared volume when Ray workers run on other machines)."""

from __future__ import annotations

from pathlib import Path

from scheduler.store.db import corral_home


def logs_dir(job_id: int) -> Path:
    return corral_home() / "logs" / f"job-{job_id}"


def log_path(job_id: int, attempt: int, rank: int) -> Path:
    """One file per worker per run: `logs/job-7/attempt-2/rank-0.log`."""
    return logs_dir(job_id) / f"attempt-{attempt}" / f"rank-{rank}.log"


def checkpoint_dir(job_id: int) -> Path:
    """`CORRAL_CHECKPOINT_DIR`: kept across preemptions and restarts, so a requeued run can resume."""
    return corral_home() / "checkpoints" / f"job-{job_id}"

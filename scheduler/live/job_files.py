"""The live service's files under `CORRAL_HOME` (`scheduler.core.paths.corral_home`): each job's logs and checkpoint
folder, and the permissions that keep the store, the logs and the agents the server's own.

A job's files live under its store's id (`Store.id`), never under its job id alone: two stores sharing one home (a
PostgreSQL store beside the embedded SQLite one, or a new `corral.db` after the old one was deleted) both have a job
1, and a job 1 that found the other's checkpoint resumed from it (issue 46). So:

    CORRAL_HOME/stores/<store id>/logs/job-7/attempt-2/rank-0.log
    CORRAL_HOME/stores/<store id>/checkpoints/job-7/

Before ids, they were `CORRAL_HOME/logs/job-N` and `CORRAL_HOME/checkpoints/job-N`. The first start of a store from
before ids moves those two folders under its id (`claim_legacy_files`), once, and records the claim, so that no other
store sharing the home ever takes them."""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

from scheduler.core.paths import corral_home

log = logging.getLogger(__name__)

STORES = "stores"
LEGACY = ("logs", "checkpoints")  # the folders of the time before store ids, directly under the home
CLAIM = "legacy-claim"  # under `stores/`: the id of the store that took the legacy folders


def store_dir(store_id: str, home: Path | None = None) -> Path:
    """The folder of one store's job files. The id must be a UUID (it names a folder: nothing else may)."""
    return (home or corral_home()) / STORES / str(uuid.UUID(store_id))


def logs_dir(store_id: str, job_id: int) -> Path:
    return store_dir(store_id) / "logs" / f"job-{job_id}"


def log_path(store_id: str, job_id: int, attempt: int, rank: int) -> Path:
    """One file per worker per run: `stores/<id>/logs/job-7/attempt-2/rank-0.log`."""
    return logs_dir(store_id, job_id).parent / log_name(job_id, attempt, rank)


def log_name(job_id: int, attempt: int, rank: int) -> str:
    """A log's name as answers show it: its path under the store's `logs` folder (`job-7/attempt-2/rank-0.log`),
    never the server's folders (docs/security.md)."""
    return f"job-{job_id}/attempt-{attempt}/rank-{rank}.log"


def checkpoint_dir(store_id: str, job_id: int) -> Path:
    """`CORRAL_CHECKPOINT_DIR`: kept across preemptions and restarts, so a requeued run can resume."""
    return store_dir(store_id) / "checkpoints" / f"job-{job_id}"


def secure_home(home: Path | None = None) -> Path:
    """Make `CORRAL_HOME` private to the server's user before anything is written there: the home and the stores'
    folders may be passed through (mode 0711, so a command job running as another user reaches its own checkpoint
    folder, which it owns) but not listed; everything else (the SQLite store with its token hashes, every job's logs,
    trained agents) is 0700/0600, readable by the server's user alone. `secure_store_files` does a store's own."""
    home = home or corral_home()
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o711)
    for sub, mode in (("agents", 0o700), (STORES, 0o711)):
        (home / sub).mkdir(exist_ok=True)
        os.chmod(home / sub, mode)
    for legacy, mode in zip(LEGACY, (0o700, 0o711), strict=True):  # unclaimed, or another store's: still private
        if (home / legacy).is_dir():
            os.chmod(home / legacy, mode)
    for db in home.glob("corral.db*"):  # the database and its -wal and -shm files
        os.chmod(db, 0o600)
    return home


def secure_store_files(store_id: str, *, legacy: bool, home: Path | None = None) -> Path:
    """A store's folder, made private as `secure_home` says (itself and `checkpoints` 0711, `logs` 0700), after its
    claim of the legacy folders where it may make one (`legacy`: it held jobs before it had an id)."""
    home = home or corral_home()
    if legacy:
        claim_legacy_files(store_id, home)
    folder = store_dir(store_id, home)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o711)
    for sub, mode in (("logs", 0o700), ("checkpoints", 0o711)):
        (folder / sub).mkdir(exist_ok=True)
        os.chmod(folder / sub, mode)
    return folder


def _claim(home: Path) -> tuple[str | None, bool]:
    """(the id of the store that claimed the home's legacy folders, or None; whether it has moved them all)."""
    try:
        words = (home / STORES / CLAIM).read_text().split()
    except FileNotFoundError:
        return None, False
    return (words[0] if words else None), words[1:] != ["moving"]


def claimant(home: Path | None = None) -> str | None:
    """The id of the store that claimed the home's legacy folders, or None if none has."""
    return _claim(home or corral_home())[0]


def claim_legacy_files(store_id: str, home: Path | None = None) -> bool:
    """Move `CORRAL_HOME/logs` and `checkpoints` (the job folders of the time before store ids) under this store's
    id, if no store claimed them before: True if they are this store's. The claim is recorded first, by creating
    `stores/legacy-claim` with the id (atomic: of two stores starting at once, one wins), so the folders go to one
    store whole; a move cut short finishes at this store's next start, and once done nothing more is taken (an old
    server writing there again writes its own). Only a store that held jobs before ids should call this: a store
    made since has no files there."""
    home = home or corral_home()
    folder = store_dir(store_id, home)
    claim = home / STORES / CLAIM
    claim.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        owner, done = _claim(home)
        if owner != folder.name:
            if any((home / name).is_dir() for name in LEGACY):
                log.warning("the job folders %s under CORRAL_HOME belong to store %s, not to this one (%s): left "
                            "there", " and ".join(LEGACY), owner, folder.name)
            return False
        if done:
            return True
    else:
        with os.fdopen(fd, "w") as f:
            f.write(f"{folder.name} moving\n")
    folder.mkdir(parents=True, exist_ok=True)
    for name in LEGACY:
        _move_into(home / name, folder / name)
    part = claim.with_name(CLAIM + ".part")
    part.write_text(folder.name + "\n")
    os.replace(part, claim)  # done: all at once
    return True


def _move_into(source: Path, target: Path) -> None:
    """`source` renamed to `target` (one filesystem: nothing is copied), or, where `target` exists already, each of
    its entries that `target` lacks; `source` is removed once empty."""
    if not source.is_dir():
        return
    if not target.exists():
        source.rename(target)
        return
    for entry in source.iterdir():
        if not (target / entry.name).exists():
            entry.rename(target / entry.name)
    try:
        source.rmdir()
    except OSError:  # an entry both had: left where it was, for the operator
        log.warning("%s kept entries that %s holds too: left there", source.name, target)

"""Command jobs cannot read the store or other jobs' files (issue 10, security 2).

A worker (the same class Ray runs as an actor, here driven in-process) starts a command job as an unprivileged OS
user in a CORRAL_HOME laid out by `secure_home`, as `corral serve --job-user` does. The job tries to read the
database (token hashes) and another job's log, and to list the home: each is refused by the kernel, while it can write
its own checkpoint folder. It also does not inherit the server's environment (a DATABASE_URL with a password). Needs
root (to create the user and switch to it); skips saying so elsewhere."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.core.model import SpecError
from scheduler.core.paths import checkpoint_dir, log_path, secure_home
from scheduler.live.ray_backend import Worker
from scheduler.live.runs import Launch, RankSpec, rank_env
from scheduler.live.serve import check_job_user

JOB_USER = "corral-test-job"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="switching a job to another OS user needs root and useradd")


@pytest.fixture(scope="module")
def job_user() -> Iterator[str]:
    """An unprivileged OS user for the jobs, created for these tests and removed after (if they created it)."""
    try:
        pwd.getpwnam(JOB_USER)
        created = False
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", JOB_USER],
                       check=True)
        created = True
    yield JOB_USER
    if created:
        subprocess.run(["userdel", JOB_USER], check=False)


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A CORRAL_HOME the job user can pass through to its own folder: pytest's tmp_path lies under a folder closed to
    other users (0700), so this one is made directly in the system's temporary directory and removed after."""
    path = Path(tempfile.mkdtemp(prefix="corral-isolation-"))
    monkeypatch.setenv("CORRAL_HOME", str(path))
    monkeypatch.setenv("DATABASE_URL", "postgresql://corral:s3cret@db/corral")  # the server's, not the job's
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_command(job_id: int, entrypoint: str, user: str) -> str:
    launch = Launch(job_id=job_id, attempt=1, kind="command", ranks=(RankSpec(0, "node0", (0,), 1.0, 80.0),),
                    work_s=1.0, rate=1.0, log_dir=str(log_path(job_id, 1, 0).parent),
                    checkpoint_dir=str(checkpoint_dir(job_id)), entrypoint=entrypoint, run_as=user)
    worker = Worker(launch, 0)
    worker.start(rank_env(launch.ranks[0], 1, "127.0.0.1", 29500, launch))
    deadline = time.time() + 30
    while worker.phase == "running" and time.time() < deadline:
        time.sleep(0.05)
    assert worker.phase == "exited", "the job did not finish within 30 s"
    return log_path(job_id, 1, 0).read_text()


def test_a_command_job_cannot_read_the_store_or_another_jobs_log(job_user: str, home: Path) -> None:
    secure_home(home)
    db = home / "corral.db"
    db.write_text("token hashes")
    secure_home(home)
    other = log_path(1, 1, 0)
    other.parent.mkdir(parents=True)
    other.write_text("another user's output")
    script = (f"id -un; cat {db} || echo DB-REFUSED; cat {other} || echo LOG-REFUSED; ls {home} || echo LS-REFUSED; "
              "echo mine > $CORRAL_CHECKPOINT_DIR/state && echo CKPT-OK; echo url=${DATABASE_URL:-unset}; pwd")
    out = run_command(2, script, job_user)
    assert out.splitlines()[0] == job_user
    assert "DB-REFUSED" in out and "token hashes" not in out
    assert "LOG-REFUSED" in out and "another user's output" not in out
    assert "LS-REFUSED" in out
    assert "CKPT-OK" in out and (checkpoint_dir(2) / "state").read_text() == "mine\n"
    assert "url=unset" in out and "s3cret" not in out
    assert out.splitlines()[-1] == str(checkpoint_dir(2))  # it starts in its own folder, not the server's home
    assert os.stat(db).st_mode & 0o777 == 0o600 and os.stat(home / "logs").st_mode & 0o777 == 0o700


def test_serve_refuses_a_job_user_that_could_not_work(job_user: str, home: Path) -> None:
    with pytest.raises(SpecError, match="no OS user 'no-such-user-xyz'"):
        check_job_user("no-such-user-xyz", home)
    closed = home / "closed"
    closed.mkdir(mode=0o700)
    os.chmod(closed, 0o700)
    with pytest.raises(SpecError, match="closed to other users"):
        check_job_user(job_user, closed / "corral")
    check_job_user(job_user, home)  # a passable path: accepted

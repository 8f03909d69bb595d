"""Command jobs cannot read the store or other jobs' files (issue 10, security 2), nor, with one OS account per user,
another user's job's environment, files or processes (issue 25).

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

from scheduler.cli.serve import ServeConfig, job_accounts_for
from scheduler.core.model import SpecError
from scheduler.live.job_accounts import JobAccounts
from scheduler.live.job_files import checkpoint_dir, log_path, secure_home, secure_store_files, store_dir
from scheduler.live.runs import Launch, RankSpec, rank_env
from scheduler.live.worker import Worker

JOB_USER = "corral-test-job"
STORE = "5f0c1d52-3a57-4d0e-9a43-1f7c2b2d9e01"  # the store whose jobs these are

pytestmark = [
    pytest.mark.slow,  # every test runs jobs as processes, some as another OS user
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                       reason="switching a job to another OS user needs root and useradd"),
]


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
                    work_s=1.0, rate=1.0, log_dir=str(log_path(STORE, job_id, 1, 0).parent),
                    checkpoint_dir=str(checkpoint_dir(STORE, job_id)), entrypoint=entrypoint, run_as=user)
    worker = Worker(launch, 0)
    worker.start(rank_env(launch.ranks[0], 1, "127.0.0.1", 29500, launch))
    deadline = time.time() + 30
    while worker.phase == "running" and time.time() < deadline:
        time.sleep(0.05)
    assert worker.phase == "exited", "the job did not finish within 30 s"
    return log_path(STORE, job_id, 1, 0).read_text()


def test_a_command_job_cannot_read_the_store_or_another_jobs_log(job_user: str, home: Path) -> None:
    secure_home(home)
    db = home / "corral.db"
    db.write_text("token hashes")
    secure_home(home)
    secure_store_files(STORE, legacy=False, home=home)
    other = log_path(STORE, 1, 1, 0)
    other.parent.mkdir(parents=True)
    other.write_text("another user's output")
    script = (f"id -un; cat {db} || echo DB-REFUSED; cat {other} || echo LOG-REFUSED; ls {home} || echo LS-REFUSED; "
              "echo mine > $CORRAL_CHECKPOINT_DIR/state && echo CKPT-OK; echo url=${DATABASE_URL:-unset}; pwd")
    out = run_command(2, script, job_user)
    assert out.splitlines()[0] == job_user
    assert "DB-REFUSED" in out and "token hashes" not in out
    assert "LOG-REFUSED" in out and "another user's output" not in out
    assert "LS-REFUSED" in out
    assert "CKPT-OK" in out and (checkpoint_dir(STORE, 2) / "state").read_text() == "mine\n"
    assert "url=unset" in out and "s3cret" not in out
    assert out.splitlines()[-1] == str(checkpoint_dir(STORE, 2))  # it starts in its own folder, not the server's home
    assert os.stat(db).st_mode & 0o777 == 0o600 and os.stat(store_dir(STORE, home) / "logs").st_mode & 0o777 == 0o700


def test_serve_refuses_a_job_user_that_could_not_work(job_user: str, home: Path) -> None:
    with pytest.raises(SpecError, match="no OS user 'no-such-user-xyz'"):
        job_accounts_for(ServeConfig(job_user="no-such-user-xyz"), home)
    closed = home / "closed"
    closed.mkdir(mode=0o700)
    os.chmod(closed, 0o700)
    with pytest.raises(SpecError, match="closed to other users"):
        job_accounts_for(ServeConfig(job_user=job_user), closed / "corral")
    job_accounts_for(ServeConfig(job_user=job_user), home)  # a passable path: accepted


# ---- one OS account per Corral user (corral serve --job-user-pattern) ----------------------------------------------

PATTERN = "corral-test-{user}"


@pytest.fixture
def per_user_accounts() -> Iterator[JobAccounts]:
    """Two users' accounts, made on demand by their first job's worker and removed after the test."""
    accounts = JobAccounts(pattern=PATTERN)
    yield accounts
    for user in ("ann", "ben"):
        subprocess.run(["userdel", PATTERN.format(user=user)], check=False, capture_output=True)


def start_as(job_id: int, entrypoint: str, account: str, env: dict[str, str] | None = None) -> Worker:
    launch = Launch(job_id=job_id, attempt=1, kind="command", ranks=(RankSpec(0, "node0", (0,), 1.0, 80.0),),
                    work_s=1.0, rate=1.0, log_dir=str(log_path(STORE, job_id, 1, 0).parent),
                    checkpoint_dir=str(checkpoint_dir(STORE, job_id)), entrypoint=entrypoint, env=env or {},
                    run_as=account, create_account=True)
    worker = Worker(launch, 0)
    worker.start(rank_env(launch.ranks[0], 1, "127.0.0.1", 29500, launch))
    return worker


def test_one_users_job_cannot_read_or_signal_anothers(per_user_accounts: JobAccounts, home: Path) -> None:
    """Ann's job holds a secret in its environment and its checkpoint; Ben's job, on the same node, tries to read her
    process's environment, list and read her checkpoint folder, and signal her process: the kernel refuses each, and
    her job runs on untouched. Each account was made on demand, with a group of its own and no login shell."""
    secure_home(home)
    secure_store_files(STORE, legacy=False, home=home)
    ann, ben = (per_user_accounts.account(u, i) for i, u in ((1, "ann"), (2, "ben")))
    assert ann == "corral-test-ann" and ben == "corral-test-ben"
    victim = start_as(11, "echo s3cret-ckpt > $CORRAL_CHECKPOINT_DIR/state; echo ready; sleep 60", ann,
                      {"API_KEY": "s3cret-env"})
    ready = log_path(STORE, 11, 1, 0)
    deadline = time.time() + 30
    while "ready" not in (ready.read_text() if ready.exists() else "") and time.time() < deadline:
        time.sleep(0.05)
    assert victim.phase == "running" and victim._proc is not None
    pid = victim._proc.pid
    theirs = checkpoint_dir(STORE, 11)
    script = (f"id -un; cat /proc/{pid}/environ || echo ENV-REFUSED; ls {theirs} || echo LS-REFUSED; "
              f"cat {theirs}/state || echo READ-REFUSED; kill -0 {pid} || echo SIGNAL-REFUSED; "
              f"kill -TERM {pid} || echo TERM-REFUSED")
    attacker = start_as(12, script, ben)
    deadline = time.time() + 30
    while attacker.phase == "running" and time.time() < deadline:
        time.sleep(0.05)
    out = log_path(STORE, 12, 1, 0).read_text()
    assert out.splitlines()[0] == ben
    for refused in ("ENV-REFUSED", "LS-REFUSED", "READ-REFUSED", "SIGNAL-REFUSED", "TERM-REFUSED"):
        assert refused in out, out
    assert "s3cret" not in out
    assert victim.phase == "running"  # untouched
    victim.stop(grace_s=2.0)
    a, b = pwd.getpwnam(ann), pwd.getpwnam(ben)
    assert a.pw_uid != b.pw_uid and a.pw_gid != b.pw_gid and a.pw_shell.endswith(("nologin", "false"))
    assert os.stat(theirs).st_uid == a.pw_uid and os.stat(theirs).st_mode & 0o777 == 0o700


def test_serve_checks_the_accounts_it_is_given(home: Path, tmp_path: Path) -> None:
    """A pattern that cannot make OS names, two choices at once, and a map with a bad account are refused at start."""
    with pytest.raises(SpecError, match="at most one"):
        job_accounts_for(ServeConfig(job_user="x", job_user_pattern="corral-{user}"), home)
    with pytest.raises(SpecError, match=r"put \{user\} or \{id\}"):
        job_accounts_for(ServeConfig(job_user_pattern="corral-jobs"), home)
    with pytest.raises(SpecError, match="only {user} and {id}"):
        job_accounts_for(ServeConfig(job_user_pattern="corral-{uid}"), home)
    bad = tmp_path / "map.yaml"
    bad.write_text("alice: Alice Smith\n")
    with pytest.raises(SpecError, match="not a valid OS account name"):
        job_accounts_for(ServeConfig(job_user_map=bad), home)
    good = tmp_path / "ok.yaml"
    good.write_text("alice: root\n")
    accounts = job_accounts_for(ServeConfig(job_user_map=good), home)
    assert accounts.account("alice", 1) == "root" and accounts.isolated and not accounts.creates

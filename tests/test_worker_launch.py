"""A command job's worker (the class Ray runs as an actor, driven here in-process): a launch that fails ends the job as
failed with its reason instead of leaving it running with its GPUs, and a job's log stops growing at its cap (issue 25,
items 3 and 5)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from scheduler.live.runs import Launch, RankSpec, rank_env
from scheduler.live.worker import Worker


def launch(tmp_path: Path, entrypoint: str, **kw: object) -> Launch:
    return Launch(job_id=5, attempt=1, kind="command", ranks=(RankSpec(0, "node0", (0,), 1.0, 80.0),), work_s=1.0,
                  rate=1.0, log_dir=str(tmp_path / "logs"), checkpoint_dir=str(tmp_path / "ckpt"),
                  entrypoint=entrypoint, **kw)  # type: ignore[arg-type]


def run(spec: Launch, timeout_s: float = 30.0) -> Worker:
    worker = Worker(spec, 0)
    worker.start(rank_env(spec.ranks[0], 1, "127.0.0.1", 29500, spec))
    deadline = time.monotonic() + timeout_s
    while worker.phase != "exited" and time.monotonic() < deadline:
        worker.finished(0.2)
    assert worker.phase == "exited", f"the worker did not end within {timeout_s} s"
    return worker


def test_an_environment_the_os_refuses_fails_the_job_with_its_reason(tmp_path: Path) -> None:
    """A lone surrogate in `env` cannot be encoded for execve: the thread used to die inside Popen, and the job stayed
    running with an empty log, holding its GPU, until cancelled."""
    w = run(launch(tmp_path, "echo hi", env={"BAD": "\ud800"}))
    assert w.exit_code == 127 and w.error.startswith("could not start:") and "surrogate" in w.error
    assert "could not start" in (tmp_path / "logs" / "rank-0.log").read_text()


def test_a_missing_working_directory_fails_the_job(tmp_path: Path) -> None:
    w = run(launch(tmp_path, "true", workdir=str(tmp_path / "nowhere")))
    assert w.exit_code == 127 and "nowhere" in w.error


def test_a_user_without_an_account_fails_the_job_saying_why(tmp_path: Path) -> None:
    """The user's account is not in the job-user map any more (or the node lacks it): failed, not lost and retried."""
    w = run(launch(tmp_path, "true", account_error="user 'bob' has no OS account in the job-user map (m.yaml)"))
    assert w.exit_code == 127 and "no OS account in the job-user map" in w.error
    w = run(launch(tmp_path, "true", run_as="no-such-account-xyz"))
    assert w.exit_code == 127 and "no OS account 'no-such-account-xyz' on this node" in w.error


def test_a_log_stops_at_its_cap_and_says_so(tmp_path: Path) -> None:
    """300 MB without a newline used to land in the log whole; now the first `log_limit_bytes` do, then one note, and
    the job still runs to its end (its output is read and dropped, so it never blocks on a full pipe)."""
    limit = 100_000
    w = run(launch(tmp_path, "head -c 5000000 /dev/zero | tr '\\0' x; echo; echo tail-end", log_limit_bytes=limit))
    assert w.exit_code == 0
    text = (tmp_path / "logs" / "rank-0.log").read_text()
    assert text.count("x") == limit and "tail-end" not in text
    assert text.count("log truncated at 100000 bytes") == 1 and len(text) < limit + 300


def test_a_log_under_its_cap_is_whole(tmp_path: Path) -> None:
    w = run(launch(tmp_path, "for i in 1 2 3; do echo line $i; done; echo err >&2", log_limit_bytes=1000))
    assert w.exit_code == 0
    assert (tmp_path / "logs" / "rank-0.log").read_text() == "line 1\nline 2\nline 3\nerr\n"


def test_a_background_child_holding_the_output_open_does_not_keep_the_job_running(tmp_path: Path) -> None:
    """The job's shell exits; something it left behind keeps the pipe open. The run ends soon after its process."""
    start = time.monotonic()
    w = run(launch(tmp_path, "(sleep 20 &) ; echo started", log_limit_bytes=1000), timeout_s=15.0)
    assert w.exit_code == 0 and time.monotonic() - start < 15.0
    assert (tmp_path / "logs" / "rank-0.log").read_text().startswith("started")


# A program the shell starts that traps SIGTERM: it takes `delay` seconds to "save", says so, and exits; with
# `ignore`, it never exits on its own.
TRAPPING = textwrap.dedent("""\
    import signal, sys, time
    delay, ignore = float(sys.argv[1]), sys.argv[2] == "ignore"
    def on_term(*_):
        if ignore:
            return
        time.sleep(delay)
        print("saved the checkpoint", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    open(sys.argv[3], "w").write(str(__import__("os").getpid()))
    print("ready", flush=True)
    while True:
        time.sleep(0.05)
""")


def start_trapping(tmp_path: Path, args: str) -> tuple[Worker, Launch, int]:
    """A worker running `sh -c 'python TRAPPING ARGS PIDFILE; true'`, once the program is up: the worker, its launch
    and the program's pid."""
    script, pid_file = tmp_path / "trap.py", tmp_path / "pid"
    script.write_text(TRAPPING)
    spec = launch(tmp_path, f"{sys.executable} {script} {args} {pid_file}; true")
    worker = Worker(spec, 0)
    worker.start(rank_env(spec.ranks[0], 1, "127.0.0.1", 29500, spec))
    deadline = time.monotonic() + 20
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the program did not start"
        time.sleep(0.05)
    return worker, spec, int(pid_file.read_text())


@pytest.mark.slow  # waits out a real grace period
def test_a_stop_logs_what_the_program_says_after_its_shell_has_ended(tmp_path: Path) -> None:
    """`sh -c 'python ...; true'` ends at the SIGTERM while python takes a second to save its checkpoint: the log
    keeps reading until python is done (it used to stop half a second after the shell), within the grace."""
    worker, spec, _pid = start_trapping(tmp_path, "1.0 save")
    worker.stop(grace_s=5.0)
    deadline = time.monotonic() + 10
    while worker.phase != "exited" and time.monotonic() < deadline:
        worker.finished(0.2)
    log = (Path(spec.log_dir) / "rank-0.log").read_text()
    assert "ready" in log and "saved the checkpoint" in log


@pytest.mark.slow  # waits out a real grace period
def test_a_stop_kills_a_program_that_outlives_its_grace_though_its_shell_ended(tmp_path: Path) -> None:
    """The grace is the group's: a program that ignores SIGTERM is killed when it runs out, even though the shell
    that started it ended at once (it used to be left running, holding its GPU)."""
    worker, _l, pid = start_trapping(tmp_path, "0 ignore")
    began = time.monotonic()
    worker.stop(grace_s=1.0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the program that ignores SIGTERM is still running 10 s after the stop")
    assert time.monotonic() - began >= 1.0  # it had its grace first


@pytest.mark.slow  # a fresh interpreter importing Ray: seconds
def test_a_workers_process_does_not_import_scipy_stats() -> None:
    """Every rank of a running job is a Ray actor, a process of its own, and it imports the module that defines it.
    scipy.stats (about a second of a worker's start, on a loaded machine far more) came in through the cluster
    model's fabric for a function no worker calls: it stays out of a worker's imports."""
    code = "import sys, scheduler.live.ray_backend; print(sorted(m for m in sys.modules if m.startswith('scipy.stats')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout

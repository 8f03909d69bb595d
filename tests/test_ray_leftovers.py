"""A start after `kill -9` of `corral serve` ends the Ray processes it left (issue 46: six of Ray's agents outlived
the server, three listening on loopback), and only those: a recorded pid now held by another process, or by a process
that is not Ray's, or a cluster whose server still runs, is never signalled. Real child processes stand in for Ray's
(their command lines look like Ray's agents); a real local cluster killed with its server was measured by hand (see
docs/security.md)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import wait_until

from scheduler.live import ray_leftovers as rl

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")

SLEEP = "import signal, sys, time; {} print('up', flush=True); time.sleep(120)"
Spawn = Callable[..., "subprocess.Popen[str]"]
AGENT = "/opt/venv/lib/python3.11/site-packages/ray/dashboard/agent.py"  # what Ray's argv holds


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    procs: list[subprocess.Popen[str]] = []

    def start(*extra: str, ignore_term: bool = False) -> subprocess.Popen[str]:
        code = SLEEP.format("signal.signal(signal.SIGTERM, signal.SIG_IGN);" if ignore_term else "")
        proc = subprocess.Popen([sys.executable, "-c", code, *extra], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"  # its handler is set
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=30)


def write(folder: Path, server: tuple[int, int], procs: list[tuple[int, int]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{rl.PREFIX}{server[0]}.json"
    path.write_text(json.dumps({"server": {"pid": server[0], "started": server[1]},
                                "processes": [{"pid": p, "started": s, "argv": []} for p, s in procs]}))
    return path


def gone(proc: subprocess.Popen[str]) -> bool:
    return rl.started(proc.pid) is None  # ended (a zombie until the test reaps it)


def test_a_server_records_its_ray_processes_alone_in_a_private_file(spawn: Spawn, tmp_path: Path) -> None:
    ray_like, other = spawn(AGENT), spawn()
    path = rl.record(tmp_path / "ray")
    assert path is not None and stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data["server"] == {"pid": os.getpid(), "started": rl.started(os.getpid())}
    pids = {p["pid"] for p in data["processes"]}
    assert ray_like.pid in pids and other.pid not in pids
    rl.forget(tmp_path / "ray")
    assert not path.exists()


def test_a_start_ends_what_a_killed_server_left_and_nothing_else(spawn: Spawn, tmp_path: Path) -> None:
    folder = tmp_path / "ray"
    polite, stubborn = spawn(AGENT), spawn(AGENT, ignore_term=True)
    reused = spawn()  # a recorded pid that a process not Ray's has now
    again = spawn(AGENT)  # a Ray-looking process that started after the recorded one
    me = rl.started(os.getpid())
    assert me is not None
    dead_server = (os.getpid(), me - 1)  # this pid, but another process: a server gone
    when = {p.pid: rl.started(p.pid) or 0 for p in (polite, stubborn, reused, again)}
    path = write(folder, dead_server, [(p.pid, when[p.pid]) for p in (polite, stubborn, reused)]
                 + [(again.pid, when[again.pid] - 1)])
    ended = rl.end_leftovers(folder, grace_s=1.0)
    assert sorted(ended) == sorted([polite.pid, stubborn.pid])
    wait_until("both to end", lambda: gone(polite) and gone(stubborn), timeout=30)
    assert polite.wait(timeout=30) == -signal.SIGTERM and stubborn.wait(timeout=30) == -signal.SIGKILL
    assert reused.poll() is None and again.poll() is None  # never signalled
    assert not path.exists()  # done with


def test_a_cluster_whose_server_still_runs_is_left_alone(spawn: Spawn, tmp_path: Path) -> None:
    """Two servers may share a CORRAL_HOME (an SQLite store and a PostgreSQL one): one's start never ends the other's
    cluster."""
    ray_like = spawn(AGENT)
    path = write(tmp_path / "ray", (os.getpid(), rl.started(os.getpid()) or 0),
                 [(ray_like.pid, rl.started(ray_like.pid) or 0)])
    assert rl.end_leftovers(tmp_path / "ray", grace_s=1.0) == []
    assert ray_like.poll() is None and path.exists()


def test_a_file_that_is_not_a_record_is_removed_and_nothing_signalled(tmp_path: Path) -> None:
    folder = tmp_path / "ray"
    folder.mkdir()
    (folder / f"{rl.PREFIX}1.json").write_text("{not json")
    assert rl.end_leftovers(folder) == []
    assert list(folder.iterdir()) == []


def test_what_looks_like_ray() -> None:
    assert rl.is_rays(["ray::DashboardAgent"])
    assert rl.is_rays(["/v/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet", "--flag"])
    assert rl.is_rays(["/usr/bin/python3", "/v/site-packages/ray/_private/workers/default_worker.py"])
    assert not rl.is_rays(["/usr/bin/python3", "-c", "pass"]) and not rl.is_rays([])

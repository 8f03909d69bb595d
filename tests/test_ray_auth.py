"""Ray is no open door (issue 25, item 1).

The attack found in review: a command job, running as an unprivileged job user, connected to the local Ray cluster's
GCS (its port is readable from `ps`), rewrote the pickle of Corral's `Worker` class in Ray's internal KV, and the next
job anyone submitted ran that code as root. Here a local cluster is started the way `corral serve` starts it, and a
real command job launched through it as another OS user tries exactly that: the GCS refuses it for want of the token,
the token file and Ray's session folders are closed to it, and nothing it tried to write is in the KV. Every Ray
process of the cluster listens on loopback only.

The attack needs root (to run the job as another user) and a Python that user can run with Ray importable; elsewhere
it skips saying why. The other checks run everywhere.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from ray.experimental import internal_kv
from tiers import tiered

from scheduler.core.errors import SpecError
from scheduler.live import ray_auth
from scheduler.live.job_files import checkpoint_dir, log_path, secure_home, secure_store_files
from scheduler.live.ray_backend import RayBackend
from scheduler.live.runs import Launch, RankSpec
from scheduler.live.sockets import exposed, listening

ATTACKER = "corral-test-attacker"
KV_KEY = b"corral-test-attack"
STORE = "5f0c1d52-3a57-4d0e-9a43-1f7c2b2d9e01"  # the store whose job the attack is

# Run as the job's OS user: once holding no token at all, once claiming token mode with a guessed token.
ATTACK = r"""
import os, sys
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
address, home = sys.argv[1], sys.argv[2]
for what, path in (("TOKEN", os.path.join(home, "ray-token")), ("SESSIONS", os.path.join(home, "ray"))):
    try:
        os.listdir(path) if os.path.isdir(path) else open(path).read()
        print(what + "-OPEN")
    except OSError:
        print(what + "-REFUSED")
try:
    client = GcsClient(address=address)
    client.internal_kv_put(b"corral-test-attack", b"evil", True, None, timeout=5)
    print("KV-OPEN", client.internal_kv_get(b"corral-test-attack", None, timeout=5))
except AuthenticationError:
    print("KV-REFUSED")
except Exception as exc:
    print("KV-ERROR", type(exc).__name__, exc)
"""


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    """A CORRAL_HOME other users may pass through (pytest's tmp_path lies under a folder closed to them)."""
    path = Path(tempfile.mkdtemp(prefix="corral-rayauth-"))
    os.chmod(path, 0o755)
    old = os.environ.get("CORRAL_HOME")
    os.environ["CORRAL_HOME"] = str(path / "home")
    secure_home(path / "home")
    secure_store_files(STORE, legacy=False, home=path / "home")
    yield path / "home"
    if old is None:
        os.environ.pop("CORRAL_HOME", None)
    else:
        os.environ["CORRAL_HOME"] = old
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
@tiered("ray")
def backend(home: Path) -> Iterator[RayBackend]:
    b = RayBackend.local(1, 2)
    yield b
    b.shutdown()


def test_the_token_is_the_servers_alone_and_rays_folders_are_private(backend: RayBackend, home: Path) -> None:
    token = home / ray_auth.TOKEN_FILE
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text()) == 64
    assert stat.S_IMODE((home / "ray").stat().st_mode) == 0o700
    assert any((home / "ray" / "ray").glob("session_*")), "Ray's session folders are not under CORRAL_HOME/ray"
    assert os.environ[ray_auth.MODE_VAR] == "token" and os.environ[ray_auth.TOKEN_PATH_VAR] == str(token)


def test_a_client_without_the_token_is_refused(backend: RayBackend) -> None:
    assert ray_auth.cluster_requires_token(backend.address) is True


def test_every_ray_process_listens_on_loopback_only(backend: RayBackend) -> None:
    found = listening(os.getpid())
    assert len(found) >= 5, f"found too few listening sockets of the cluster's processes: {found}"
    assert all(ipaddress.ip_address(ip).is_loopback for ip, _ in found), found
    assert exposed(os.getpid()) == []


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                    reason="running the job as another OS user needs root and useradd")
def test_a_job_cannot_drive_ray(backend: RayBackend, home: Path) -> None:
    python, pythonpath = attacker_python()
    script = home.parent / "attack.py"
    script.write_text(ATTACK)
    os.chmod(script, 0o644)
    entry = f"{python} {script} {backend.address} {home}"
    launch = Launch(job_id=1, attempt=1, kind="command", ranks=(RankSpec(0, "node0", (0,), 1.0, 80.0),), work_s=1.0,
                    rate=1.0, log_dir=str(log_path(STORE, 1, 1, 0).parent), checkpoint_dir=str(checkpoint_dir(STORE, 1)),
                    entrypoint=entry, env={"PYTHONPATH": pythonpath}, run_as=ATTACKER, create_account=True)
    try:
        backend.launch(launch)
        deadline = time.monotonic() + 120
        phase = "starting"
        while phase not in ("succeeded", "failed", "lost") and time.monotonic() < deadline:
            statuses = {s.job_id: s for s in backend.poll()}
            phase = statuses[1].phase if 1 in statuses else phase
            time.sleep(0.1)
        backend.forget(1)
        out = log_path(STORE, 1, 1, 0).read_text()
        assert phase == "succeeded", out
        assert "TOKEN-REFUSED" in out and "SESSIONS-REFUSED" in out, out
        assert "KV-REFUSED" in out and "KV-OPEN" not in out, out
        assert internal_kv._internal_kv_get(KV_KEY) is None  # nothing was written
    finally:
        subprocess.run(["userdel", ATTACKER], check=False, capture_output=True)


# ---- helpers ------------------------------------------------------------------------------------------------------


def attacker_python() -> tuple[str, str]:
    """A Python the job user can run, and the PYTHONPATH that lets it import this Ray (the same minor version: Ray's
    extension is built for it). Skips if there is none (e.g. the only Python lives under /root)."""
    site = str(Path(ray.__file__).resolve().parents[1])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, shutil.which(version) or "", f"/usr/bin/{version}"):
        if not candidate:
            continue
        probe = subprocess.run(["su", "-s", "/bin/sh", "nobody", "-c",
                                f"cd / && PYTHONPATH={site} {candidate} -c 'import ray._raylet'"],
                               capture_output=True, check=False)
        if probe.returncode == 0:
            return candidate, site
    pytest.skip(f"no {version} that an unprivileged user can run with Ray from {site}")


# ---- joining a cluster: refused without authentication unless the operator says so -------------------------------


@pytest.fixture(scope="module")
@tiered("ray")
def open_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray head on 127.0.0.1 started WITHOUT token authentication, as an operator might have one."""
    folder = Path(tempfile.mkdtemp(prefix="corral-open-"))  # short: Ray's socket paths live under it
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH_", "RAY_ADDRESS"))}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", HOME=str(folder))
    log = (tmp_path_factory.mktemp("open-head") / "head.log").open("ab")
    head = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
                             "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=0", "--num-gpus=0",
                             "--include-dashboard=false", f"--temp-dir={folder / 'ray'}"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while ray_auth.cluster_requires_token(address) is None and time.monotonic() < deadline:
            assert head.poll() is None, "the Ray head exited"
            time.sleep(1.0)
        yield address
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)


def test_joining_an_unauthenticated_cluster_is_refused_unless_allowed(open_head: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert ray_auth.cluster_requires_token(open_head) is False
    with pytest.raises(SpecError, match="accepts clients without a token.*--allow-unauthenticated-ray"):
        RayBackend.connect(open_head)
    ray_auth.check_cluster_auth(open_head, allow_unauthenticated=True)  # the operator's explicit choice

    from scheduler.live.node.daemon import AgentError, AgentOptions, NodeAgent

    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    monkeypatch.delenv(ray_auth.TOKEN_PATH_VAR, raising=False)
    monkeypatch.delenv(ray_auth.TOKEN_VAR, raising=False)
    agent = NodeAgent(AgentOptions(address=open_head, name="n1", gpus=1, node_dir=tmp_path / "n1"), out=print)
    with pytest.raises(AgentError, match="no Ray token on this machine"):
        agent._ray_env()
    ray_auth.ensure_token(tmp_path)  # a token, but the cluster takes anyone: still refused
    with pytest.raises(AgentError, match="accepts clients without a token"):
        agent._ray_env()
    allowed = NodeAgent(AgentOptions(address=open_head, name="n1", gpus=1, node_dir=tmp_path / "n1",
                                     allow_unauthenticated_ray=True), out=print)
    assert allowed._ray_env()[ray_auth.MODE_VAR] == "token"


def test_a_cluster_nobody_answers_for_is_not_called_open() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    start = time.monotonic()
    assert ray_auth.cluster_requires_token(f"127.0.0.1:{port}") is None
    assert time.monotonic() - start < 10

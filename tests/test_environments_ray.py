"""Job environments on a real local Ray cluster (`RayBackend.local`, as `corral serve` starts it): Ray's runtime
environment agent on the node loads Corral's plugin, which builds a virtual environment from the operator's wheel
folder alone (no index: nothing here reaches the network), and the job's own `python` imports the package. The build
is the run's preparation, before its worker starts, so it is not run time; a second run finds it built; a working
directory uploaded with the job is where its command runs; an environment the node cannot prepare fails the run
with the reason, rather than losing it to be retried elsewhere."""

from __future__ import annotations

import base64
import io
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tiers import tiered

from scheduler.live import environments
from scheduler.live.job_files import checkpoint_dir, log_path, secure_home, secure_store_files
from scheduler.live.runs import JobStatus, Launch, RankSpec

pytest.importorskip("ray")

STORE = "9d4f3c1e-6a2b-4c8d-8e1f-2b3c4d5e6f70"
ACCOUNT = "corral-test-envjob"


def write_wheel(folder: Path, name: str, version: str, body: str) -> Path:
    """A pure-Python wheel of one module `name` (PEP 427's layout, written by hand: no build backend, no network)."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": body,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: corral-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arcname, text in {**files, f"{dist}/RECORD": record}.items():
            zf.writestr(arcname, text)
    return path


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="corral-envs-"))
    os.chmod(path, 0o755)  # a job's own account passes through to its folder (pytest's tmp_path is closed to it)
    saved = {k: os.environ.get(k) for k in ("CORRAL_HOME", "CORRAL_WHEELS", "CORRAL_VENVS")}
    wheels = path / "wheels"
    wheels.mkdir()
    write_wheel(wheels, "corral_probe", "1.2.3", "ANSWER = 42\n")
    venv = path / "venvs" / "plain"  # an operator's virtual environment: the node's Python, nothing added
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    os.environ["CORRAL_HOME"] = str(path / "home")
    os.environ["CORRAL_WHEELS"] = str(wheels)  # the operator's folder: read by the node's agent when it starts
    os.environ["CORRAL_VENVS"] = f"plain={venv}"  # and its venvs: the node advertises their names
    secure_home(path / "home")
    secure_store_files(STORE, legacy=False, home=path / "home")
    yield path / "home"
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
@tiered("ray")
def backend(home: Path) -> Iterator[object]:
    from scheduler.live.ray_backend import RayBackend

    b = RayBackend.local(1, 1)
    yield b
    b.shutdown()


def zipped(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return buf.getvalue()


def run(backend: object, job_id: int, entrypoint: str, env: dict[str, object],
        run_as: str | None = None) -> tuple[JobStatus, str]:
    """Launch a one-rank command job with environment `env` and wait for its end: its last status and its log."""
    launch = Launch(job_id=job_id, attempt=1, kind="command", ranks=(RankSpec(0, "node0", (0,), 1.0, 80.0),),
                    work_s=1.0, rate=1.0, log_dir=str(log_path(STORE, job_id, 1, 0).parent),
                    checkpoint_dir=str(checkpoint_dir(STORE, job_id)), entrypoint=entrypoint,
                    runtime_env=environments.runtime_env(environments.check(env)), run_as=run_as,
                    create_account=run_as is not None)
    backend.launch(launch)  # type: ignore[attr-defined]
    deadline = time.monotonic() + 240  # a first build: a virtual environment and a pip install
    status = None
    while time.monotonic() < deadline:
        status = next((s for s in backend.poll() if s.job_id == job_id), status)  # type: ignore[attr-defined]
        if status is not None and status.phase in ("succeeded", "failed", "lost"):
            break
        time.sleep(0.2)
    backend.forget(job_id)  # type: ignore[attr-defined]
    assert status is not None and status.phase in ("succeeded", "failed", "lost"), f"job {job_id} never ended"
    out = log_path(STORE, job_id, 1, 0)
    return status, out.read_text() if out.exists() else ""


def test_a_job_imports_a_package_from_the_nodes_wheel_folder(backend: object, home: Path) -> None:
    entry = 'python -c "import corral_probe, sys; print(\'probe\', corral_probe.ANSWER, sys.prefix)"'
    status, log = run(backend, 1, entry, {"pip": ["corral_probe==1.2.3"]})
    assert status.phase == "succeeded", (status, log)
    assert "probe 42" in log, log
    prefix = log.split("probe 42 ", 1)[1].split()[0]
    assert Path(prefix).parent.parent == home / "envs" / socket.gethostname(), f"not the environment's: {prefix}"
    # Its preparation is in its log (pip's own output), and was timed apart from the run.
    assert "[corral] preparing: environment" in log and "built on this node" in log, log
    assert "Successfully installed corral_probe-1.2.3" in log, log
    assert status.prepared_s is not None and status.prepared_s > 0
    built = json.loads((Path(prefix).parent / "build.json").read_text())
    assert built["build_s"] > 0
    # A second job asking for the same packages finds the environment built.
    status2, log2 = run(backend, 2, entry, {"pip": ["corral_probe"]})
    assert status2.phase == "succeeded" and "probe 42" in log2, log2
    status3, log3 = run(backend, 3, entry, {"pip": ["corral_probe==1.2.3"]})
    assert status3.phase == "succeeded" and f"probe 42 {prefix}" in log3, log3  # the same environment
    assert json.loads((Path(prefix).parent / "build.json").read_text()) == built  # not built again
    assert len(list((home / "envs").glob("*/*/build.json"))) == 2  # one per set of packages asked for


def test_a_package_the_wheel_folder_lacks_fails_the_run_with_pips_reason(backend: object) -> None:
    status, _ = run(backend, 4, "true", {"pip": ["corral-no-such-package==9"]})
    assert status.phase == "failed", status
    assert status.exit_codes == [127]
    assert "preparing its environment" in status.error and "corral-no-such-package" in status.error, status.error


def test_a_job_runs_in_the_working_directory_it_uploaded(backend: object) -> None:
    files = {"train.py": "print('trained from', __file__)\n", "conf/settings.txt": "lr=0.1\n"}
    encoded = base64.b64encode(zipped(files)).decode()
    status, log = run(backend, 5, "python train.py && cat conf/settings.txt", {"working_dir": encoded})
    assert status.phase == "succeeded", (status, log)
    assert "trained from" in log and "lr=0.1" in log, log


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                    reason="running the job as another OS user needs root and useradd")
def test_a_job_running_as_its_own_account_gets_its_own_copy_of_its_working_directory(backend: object) -> None:
    # Ray unpacked the archive in its session folder, which only the server's user may enter.
    encoded = base64.b64encode(zipped({"conf/settings.txt": "lr=0.2\n"})).decode()
    try:
        status, log = run(backend, 7, "id -un; pwd; cat conf/settings.txt; touch mine", {"working_dir": encoded},
                          run_as=ACCOUNT)
        assert status.phase == "succeeded", (status, log)
        assert ACCOUNT in log and "lr=0.2" in log, log
        copy = Path(checkpoint_dir(STORE, 7)) / "working_dir"
        assert str(copy) in log and (copy / "mine").stat().st_uid == pwd.getpwnam(ACCOUNT).pw_uid
    finally:
        subprocess.run(["userdel", ACCOUNT], check=False, capture_output=True)


@pytest.mark.skipif(any(shutil.which(r) for r in ("podman", "apptainer")), reason="this node has a container runtime")
def test_an_image_on_a_node_without_a_container_runtime_is_refused_naming_what_is_missing(backend: object) -> None:
    status, _ = run(backend, 6, "true", {"image": "docker.io/library/python:3.11"})
    assert status.phase == "failed", status
    assert "no container runtime" in status.error and "podman" in status.error and "apptainer" in status.error
    assert status.error.startswith("preparing its environment: image docker.io"), status.error
    assert "raise" not in status.error and "Traceback" not in status.error  # the reason, not Ray's quoted source


def test_the_node_advertises_its_venvs_and_a_job_naming_one_runs_in_it(backend: object, home: Path) -> None:
    assert [(n.name, n.venvs) for n in backend.nodes()] == [("node0", ("plain",))]  # type: ignore[attr-defined]
    status, log = run(backend, 9, 'python -c "import sys; print(\'prefix\', sys.prefix)"', {"venv": "plain"})
    assert status.phase == "succeeded", (status, log)
    assert f"prefix {home.parent / 'venvs' / 'plain'}" in log, log


def test_a_venv_the_node_does_not_have_fails_with_the_plugins_words_alone(backend: object) -> None:
    status, _ = run(backend, 8, "true", {"venv": "nosuch"})
    assert status.phase == "failed", status
    # Ray's text quotes the plugin's traceback, whose source line reads `corral: {exc}`: the reason is the raised line
    assert status.error.startswith("preparing its environment: no virtual environment 'nosuch'"), status.error
    assert "{exc}" not in status.error and "raise" not in status.error, status.error

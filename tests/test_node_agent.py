"""The node agent (`corral node start`): GPU discovery through a stand-in NVML, CUDA MPS through a stand-in
`nvidia-cuda-mps-control`, health readings, and a real node joining (and leaving) a local Ray head.

Nothing here touches a real GPU: this machine has none. The stand-ins replace NVML at `scheduler.live.node.nvml` (the
`nvml_module` parameter, or `sys.modules["pynvml"]` for the command) and the MPS control program by its path.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from tiers import tiered

from scheduler.cli.commands import main
from scheduler.live.node.daemon import AgentError, AgentOptions, NodeAgent, discover
from scheduler.live.node.health import read_health
from scheduler.live.node.mps import NODE_DIR_ENV, MpsManager, read_config
from scheduler.live.runs import Launch, RankSpec
from scheduler.live.worker import Worker
from tests.conftest import free_port, wait_until

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


# ---- a stand-in for pynvml ------------------------------------------------------------------------------------------


class FakeNVMLError(Exception):
    pass


def fake_pynvml(gpus: list[tuple[str, int]], *, no_driver: bool = False, lost: tuple[int, ...] = (),
                ecc: dict[int, int] | None = None, xids: list[tuple[int, int]] | None = None) -> SimpleNamespace:
    """A module with pynvml's functions over `gpus` (name, MiB). `lost`: GPUs that stop answering; `ecc`: uncorrected
    error counts; `xids`: (gpu, code) critical XID events waiting to be read."""
    handles = [SimpleNamespace(index=i) for i in range(len(gpus))]
    pending = list(xids or [])
    calls: list[str] = []

    def init() -> None:
        calls.append("init")
        if no_driver:
            raise FakeNVMLError("Driver Not Loaded")

    def temperature(h: SimpleNamespace, sensor: int) -> int:
        if h.index in lost:
            raise FakeNVMLError("GPU is lost")
        return 40 + h.index

    def ecc_errors(h: SimpleNamespace, kind: int, counter: int) -> int:
        return (ecc or {}).get(h.index, 0)

    def event_wait(events: object, timeout_ms: int) -> SimpleNamespace:
        if not pending:
            raise FakeNVMLError("Timeout")
        gpu, code = pending.pop(0)
        return SimpleNamespace(device=SimpleNamespace(index=gpu), eventData=code)  # a new handle object, as pynvml's

    return SimpleNamespace(
        NVMLError=FakeNVMLError, NVML_TEMPERATURE_GPU=0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0,
        nvmlEventTypeXidCriticalError=8, calls=calls,
        nvmlInit=init, nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: len(gpus), nvmlDeviceGetHandleByIndex=lambda i: handles[i],
        nvmlDeviceGetIndex=lambda h: h.index,
        nvmlDeviceGetName=lambda h: gpus[h.index][0], nvmlDeviceGetUUID=lambda h: f"GPU-fake-{h.index}",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=gpus[h.index][1] * MIB),
        nvmlDeviceGetTemperature=temperature, nvmlDeviceGetTotalEccErrors=ecc_errors,
        nvmlEventSetCreate=lambda: object(), nvmlDeviceRegisterEvents=lambda h, kind, events: None,
        nvmlEventSetWait=event_wait, nvmlEventSetFree=lambda events: None,
    )


# ---- a stand-in for the Corral API (the agent's health push) ------------------------------------------------------


class StandIn:
    """An HTTP server that records each request and answers with the next of `answers` (the last one repeats)."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = answers
        self.requests: list[dict[str, Any]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # http.server's name for the PUT handler
                body = self.rfile.read(int(self.headers["Content-Length"]))
                stand_in.requests.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                          "body": json.loads(body)})
                code = stand_in.answers[min(len(stand_in.requests), len(stand_in.answers)) - 1]
                out = json.dumps({"message": "node 'n1' not found" if code == 404 else "ok"}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def options(tmp_path: Path, name: str = "n1", **kw: Any) -> AgentOptions:
    base: dict[str, Any] = {"address": "127.0.0.1:1", "name": name, "gpus": None, "node_dir": tmp_path / name,
                            "dry_run": True, "mps_control": None}
    return AgentOptions(**{**base, **kw})


# ---- discovery ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "mib", "count", "preset"), [
    ("NVIDIA A100-SXM4-80GB", 81920, 8, "dgx-a100"),
    ("Tesla V100-PCIE-32GB", 32768, 8, "pcie-v100"),
    ("Tesla T4", 15360, 4, "pcie-t4"),
    ("Tesla V100-SXM2-32GB", 32768, 8, None),  # NVLink V100s: no preset has them
    ("NVIDIA A100 80GB PCIe", 81920, 2, None),  # PCIe A100s: neither
    ("NVIDIA A100-SXM4-80GB", 95000, 8, None),  # the name fits but the memory does not: described, not guessed
    ("Tesla V100-PCIE-32GB", 32768, 3, None),  # pcie-v100's two PCIe switches cannot split 3 GPUs
    # Hopper SXM boards are named by their memory, not "SXM" (as NVML named the H100 and H200 measured here).
    ("NVIDIA H100 80GB HBM3", 81559, 8, "hgx-h100"),
    ("NVIDIA H200", 143771, 1, "hgx-h200"),
    ("NVIDIA H100 PCIe", 81559, 2, None),  # PCIe cards: no preset
    ("NVIDIA H200 NVL", 143771, 2, None),  # a PCIe card with an NVLink bridge is not on NVSwitch
])
def test_nvml_names_match_presets(tmp_path: Path, name: str, mib: int, count: int, preset: str | None) -> None:
    nv = fake_pynvml([(name, mib)] * count)
    hardware, nvml = discover(options(tmp_path), nv)
    assert (hardware.gpus, hardware.preset, hardware.source) == (count, preset, "nvml")
    assert name in hardware.summary
    assert bool(hardware.notes) == (preset is None)  # no match: a note says so
    assert nvml is not None
    nvml.close()
    assert nv.calls == ["init", "shutdown"]


def test_discovery_records_driver_compute_capability_mig_and_cores(tmp_path: Path) -> None:
    nv = fake_pynvml([("NVIDIA H200", 143771)])
    nv.nvmlSystemGetDriverVersion = lambda: b"580.159.04"  # older pynvml returns bytes
    nv.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    nv.nvmlDeviceGetMigMode = lambda h: (1, 1)
    nv.nvmlDeviceGetNumGpuCores = lambda h: 16896
    hardware, nvml = discover(options(tmp_path), nv)
    assert nvml is not None
    nvml.close()
    (dev,) = hardware.as_json()["devices"]  # type: ignore[misc]
    assert dev["driver"] == "580.159.04" and dev["compute_capability"] == "9.0"
    assert dev["mig_mode"] is True and dev["cuda_cores"] == 16896
    # A board (or an older driver) that does not answer leaves the field empty instead of failing discovery.
    def refuse(h: object) -> object:
        raise FakeNVMLError("Not Supported")
    nv.nvmlDeviceGetMigMode = refuse
    hardware, nvml = discover(options(tmp_path), nv)
    assert nvml is not None
    nvml.close()
    assert hardware.devices[0].mig_mode is None and hardware.devices[0].driver == "580.159.04"


def test_an_unknown_model_is_described_and_the_node_still_joins(tmp_path: Path) -> None:
    lines: list[str] = []
    nv = fake_pynvml([("NVIDIA L4", 23034)] * 2)
    assert NodeAgent(options(tmp_path), out=lines.append, nvml_module=nv).run() == 0
    text = "\n".join(lines)
    assert "2 x NVIDIA L4 (22.5 GiB)" in text
    assert "no Corral preset matches" in text and "generic GPU(s)" in text
    assert '"corral_gpu_n1_1": 1.0' in text and "corral_gpu_n1_2" not in text
    assert "corral_preset_" not in text  # no preset to advertise: the controller models it as serve's --preset
    assert not (tmp_path / "n1").exists()  # a dry run writes nothing: an agent may be running with that folder
    agent = NodeAgent(options(tmp_path), out=lines.append, nvml_module=nv)
    agent.prepare()
    agent.close()
    node = json.loads((tmp_path / "n1" / "node.json").read_text())
    assert node["preset"] is None and [d["memory_mib"] for d in node["devices"]] == [23034, 23034]


def resources_line(lines: list[str]) -> dict[str, float]:
    line = next(x for x in lines if x.strip().startswith("resources:"))
    return dict(json.loads(line.split(":", 1)[1]))


@pytest.mark.parametrize(("gpus", "given", "advertised"), [
    ([("NVIDIA A100-SXM4-80GB", 81920)] * 8, None, "dgx-a100"),  # NVML's match
    ([("NVIDIA L4", 23034)] * 4, "pcie-t4", "pcie-t4"),  # --preset names what NVML cannot
    ([("NVIDIA A100-SXM4-80GB", 81920)] * 4, "pcie-t4", "pcie-t4"),  # --preset overrides the match
    (None, "pcie-v100", "pcie-v100"),  # --gpus 2 --preset: virtual GPUs of that model
    (None, None, None),  # --gpus 2 alone: nothing to advertise
])
def test_the_node_advertises_its_preset_to_ray(tmp_path: Path, gpus: list[tuple[str, int]] | None, given: str | None,
                                               advertised: str | None) -> None:
    """The preset travels with the node: the resources `ray start` gets carry its marker, which the controller
    reads back (`advertised_preset`) to model the node as that server."""
    from scheduler.live.ray_backend import advertised_preset
    from scheduler.live.runs import node_resources

    lines: list[str] = []
    opts = options(tmp_path, preset=given, gpus=None if gpus else 2)
    NodeAgent(opts, out=lines.append, nvml_module=fake_pynvml(gpus) if gpus else None).run()
    res = resources_line(lines)
    assert res == node_resources("n1", len(gpus) if gpus else 2, advertised)
    assert advertised_preset(res) == advertised


def test_a_preset_given_overrides_the_match_and_says_so(tmp_path: Path) -> None:
    nv = fake_pynvml([("NVIDIA L4", 23034)] * 4)
    hardware, _ = discover(options(tmp_path, preset="pcie-t4"), nv)
    assert hardware.preset == "pcie-t4"
    assert "--preset pcie-t4 given" in hardware.notes[0]
    with pytest.raises(AgentError, match="pcie-v100"):  # two PCIe switches cannot split 3 GPUs
        discover(options(tmp_path, gpus=3, preset="pcie-v100"))
    with pytest.raises(AgentError, match="no '_'"):
        NodeAgent(options(tmp_path, name="a_b", gpus=1)).prepare()


def test_no_driver_says_to_pass_gpus_and_a_preset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AgentError, match=r"Driver Not Loaded.*\n.*--gpus N --preset P"):
        discover(options(tmp_path), fake_pynvml([], no_driver=True))
    with pytest.raises(AgentError, match="sees no GPU"):
        discover(options(tmp_path), fake_pynvml([]))
    # The command: the stand-in takes pynvml's place for the import the NVML boundary does.
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], no_driver=True))
    result = CliRunner().invoke(main, ["node", "start", "--address", "127.0.0.1:1", "--name", "n1", "--state-dir",
                                       str(tmp_path / "n1"), "--dry-run"])
    assert result.exit_code == 1
    assert "NVML did not start (Driver Not Loaded)" in result.output
    assert "pass --gpus N --preset P" in result.output
    assert not (tmp_path / "n1").exists()  # failed before anything was written


def test_virtual_gpus_without_mps_say_so_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-cuda-mps-control to be found
    result = CliRunner().invoke(main, ["node", "start", "--address", "127.0.0.1:1", "--name", "v1", "--gpus", "2",
                                       "--preset", "pcie-t4", "--state-dir", str(tmp_path / "v1"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.count("fractional jobs run without MPS") == 1
    assert "bookkeeping only (virtual GPUs)" in result.output
    assert not (tmp_path / "v1").exists()
    agent = NodeAgent(options(tmp_path, name="v1", gpus=2, preset="pcie-t4"), out=lambda _: None)
    agent.prepare()
    assert read_config(tmp_path / "v1") is None
    with pytest.raises(AgentError, match="another node agent is running with"):  # one agent per folder
        NodeAgent(options(tmp_path, name="v1", gpus=2), out=lambda _: None).prepare()
    agent.close()
    monkeypatch.setenv(NODE_DIR_ENV, str(tmp_path / "v1"))
    assert MpsManager.for_this_node() is None  # so a fractional worker there runs as it did before the agent


def test_mps_control_none_turns_mps_off_even_where_the_program_is_installed(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "nvidia-cuda-mps-control"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    run = ["node", "start", "--address", "127.0.0.1:1", "--name", "v2", "--gpus", "2", "--preset", "pcie-t4",
           "--state-dir", str(tmp_path / "v2"), "--dry-run"]
    assert "fractional jobs run without MPS" not in CliRunner().invoke(main, run).output  # found on PATH: used
    off = CliRunner().invoke(main, [*run, "--mps-control", "none"])
    assert off.exit_code == 0, off.output
    assert "fractional jobs run without MPS" in off.output


# ---- health ---------------------------------------------------------------------------------------------------------


def test_health_reports_temperature_ecc_xid_and_unreachable_gpus(tmp_path: Path) -> None:
    nv = fake_pynvml([("NVIDIA A100-SXM4-80GB", 81920)] * 3, lost=(2,), ecc={1: 2}, xids=[(0, 79)])
    agent = NodeAgent(options(tmp_path, health_interval_s=1.0), out=lambda _: None, nvml_module=nv)
    agent.prepare()
    report = agent.check_health()
    gpus = {g["index"]: g for g in report["gpus"]}
    assert (gpus[0]["status"], gpus[0]["xid_errors"], gpus[0]["temperature_c"]) == ("degraded", [79], 40)
    assert (gpus[1]["status"], gpus[1]["ecc_uncorrected"], gpus[1]["xid_errors"]) == ("degraded", 2, [])
    assert gpus[2]["status"] == "unreachable" and "GPU is lost" in gpus[2]["error"]
    assert report["status"] == "degraded" and report["agent"] == "running"
    assert read_health(tmp_path / "n1") == report
    result = CliRunner().invoke(main, ["node", "health", "--state-dir", str(tmp_path / "n1")])
    assert result.exit_code == 0 and json.loads(result.output)["node"] == "n1"

    healthy = NodeAgent(options(tmp_path, name="n2"), out=lambda _: None,
                        nvml_module=fake_pynvml([("Tesla T4", 15360)] * 2))
    healthy.prepare()
    report = healthy.check_health()
    assert report["status"] == "ok" and [g["status"] for g in report["gpus"]] == ["ok", "ok"]
    agent.close()
    healthy.close()
    assert read_health(tmp_path / "n2")["agent"] == "stopped"


# ---- MPS ------------------------------------------------------------------------------------------------------------


def stand_in_mps(folder: Path, exit_code: int = 0) -> tuple[Path, Path]:
    """A `nvidia-cuda-mps-control` that records each call (arguments, pipe and log folders, what it read)."""
    record = folder / "mps-calls.jsonl"
    script = folder / "mps-control"
    script.write_text(f"""#!{sys.executable}
import json, os, sys
stdin = "" if sys.argv[1:] else sys.stdin.read()
with open({str(record)!r}, "a") as f:
    f.write(json.dumps({{"args": sys.argv[1:], "pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
                        "log": os.environ.get("CUDA_MPS_LOG_DIRECTORY"), "stdin": stdin}}) + "\\n")
sys.exit({exit_code})
""")
    script.chmod(0o755)
    return script, record


def calls(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def kinds(record: Path) -> list[str]:
    return ["start" if c["args"] == ["-d"] else "quit" if c["stdin"].strip() == "quit" else str(c)
            for c in calls(record)]


def mps_node(tmp_path: Path, name: str, control: Path) -> Path:
    """A node folder as an agent with MPS leaves it for its workers (mps.json)."""
    agent = NodeAgent(options(tmp_path, name=name, gpus=2, preset="pcie-t4", mps_control=str(control)),
                      out=lambda _: None)
    agent.prepare()
    agent.close()
    return tmp_path / name


def worker(tmp_path: Path, job_id: int, node: str, share: float) -> Worker:
    launch = Launch(job_id=job_id, attempt=1, kind="emulated", ranks=(RankSpec(0, node, (0,), share, 16.0),),
                    work_s=600.0, rate=1.0, log_dir=str(tmp_path / f"logs-{job_id}"),
                    checkpoint_dir=str(tmp_path / f"ckpt-{job_id}"))
    return Worker(launch, 0)


def run_until_stopped(w: Worker) -> str:
    w.stop(grace_s=10)
    assert w.phase == "exited"
    return (Path(w.launch.log_dir) / "rank-0.log").read_text()


def test_mps_starts_before_the_first_fractional_job_and_stops_after_the_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    control, record = stand_in_mps(tmp_path)
    n1 = mps_node(tmp_path, "n1", control)
    assert kinds(record) == []  # the agent starts nothing until a fractional job needs it
    monkeypatch.setenv(NODE_DIR_ENV, str(n1))

    whole = worker(tmp_path, 1, "n1", 1.0)
    whole.start({})
    assert kinds(record) == []  # a whole-GPU job needs no MPS
    assert "CUDA_MPS_PIPE_DIRECTORY" not in run_until_stopped(whole)

    a, b = worker(tmp_path, 2, "n1", 0.5), worker(tmp_path, 3, "n1", 0.25)
    a.start({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"})
    assert kinds(record) == ["start"]
    b.start({})
    assert kinds(record) == ["start"]  # one daemon for both
    assert sorted(MpsManager.for_this_node().leases()) == ["corral-2-1-0", "corral-3-1-0"]  # type: ignore[union-attr]
    log_a = run_until_stopped(a)
    assert f"CUDA_MPS_PIPE_DIRECTORY={n1}/mps/pipe" in log_a  # the job's process finds this node's daemon
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in log_a
    assert kinds(record) == ["start"]  # b still runs on it
    run_until_stopped(b)
    assert kinds(record) == ["start", "quit"]
    # Both calls ran with this node's own folders (the daemon's env), under the agent's folder.
    assert {(c["pipe"], c["log"]) for c in calls(record)} == {(f"{n1}/mps/pipe", f"{n1}/mps/log")}

    again = worker(tmp_path, 4, "n1", 0.5)  # a new first fractional job starts it again
    again.start({})
    run_until_stopped(again)
    assert kinds(record) == ["start", "quit", "start", "quit"]


def test_each_node_has_its_own_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    control, record = stand_in_mps(tmp_path)
    n1, n2 = mps_node(tmp_path, "n1", control), mps_node(tmp_path, "n2", control)
    monkeypatch.setenv(NODE_DIR_ENV, str(n1))
    on_n1 = worker(tmp_path, 1, "n1", 0.5)
    on_n1.start({})
    monkeypatch.setenv(NODE_DIR_ENV, str(n2))
    on_n2 = worker(tmp_path, 2, "n2", 0.5)
    on_n2.start({})
    assert [(k, c["pipe"]) for k, c in zip(kinds(record), calls(record), strict=True)] == [
        ("start", f"{n1}/mps/pipe"), ("start", f"{n2}/mps/pipe")]
    run_until_stopped(on_n2)
    assert [c["pipe"] for c in calls(record)][-1] == f"{n2}/mps/pipe" and kinds(record)[-1] == "quit"
    run_until_stopped(on_n1)
    assert kinds(record) == ["start", "start", "quit", "quit"]


def test_a_dead_workers_lease_is_swept(tmp_path: Path) -> None:
    control, record = stand_in_mps(tmp_path)
    agent = NodeAgent(options(tmp_path, gpus=2, preset="pcie-t4", mps_control=str(control)), out=lambda _: None)
    agent.prepare()
    gone = subprocess.Popen(["sleep", "0"])
    gone.wait()
    assert agent.mps is not None
    agent.mps.acquire("corral-9-1-0", pid=gone.pid)  # a worker killed before its finish hook ran
    agent.mps.acquire("corral-10-1-0")  # a live one (this process)
    assert agent.check_health()["mps"] == {"enabled": True, "daemon_running": True, "clients": ["corral-10-1-0"]}
    assert kinds(record) == ["start"]
    agent.mps.release("corral-10-1-0")
    assert kinds(record) == ["start", "quit"]
    agent.mps.acquire("corral-11-1-0", pid=gone.pid)
    assert agent.mps.sweep() is True  # the agent's periodic sweep stops a daemon nobody alive holds
    assert kinds(record) == ["start", "quit", "start", "quit"]
    agent.mps.acquire("corral-12-1-0")
    agent.close()  # the agent leaving stops the daemon, even with a client: the node's workers went with Ray
    assert kinds(record) == ["start", "quit", "start", "quit", "start", "quit"]


def test_a_daemon_that_does_not_start_fails_the_fractional_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    control, record = stand_in_mps(tmp_path, exit_code=3)
    monkeypatch.setenv(NODE_DIR_ENV, str(mps_node(tmp_path, "n1", control)))
    w = worker(tmp_path, 1, "n1", 0.5)
    w.start({})
    assert (w.phase, w.exit_code) == ("exited", 1)
    assert w.error.startswith("MPS: ") and "exited with 3" in w.error
    assert kinds(record) == ["start"]


# ---- the foreground child and its signals ---------------------------------------------------------------------------


def test_the_agent_forwards_a_stop_to_ray_and_exits_with_its_status(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT to the agent reaches `ray start` as SIGTERM (Ray drains on SIGTERM, and sits in its own process group
    where a terminal's Ctrl-C would not reach it); the agent exits with Ray's status. A stand-in `ray` records it."""
    record = tmp_path / "ray.json"
    stand_in = tmp_path / "ray"
    stand_in.write_text(f"""#!{sys.executable}
import json, os, signal, sys, time
def stop(signum, frame):
    with open({str(record)!r}, "w") as f:
        json.dump({{"argv": sys.argv[1:], "node_dir": os.environ.get("CORRAL_NODE_DIR"), "signal": signum}}, f)
    sys.exit(7)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
open({str(tmp_path / "ready")!r}, "w").close()
time.sleep(60)
sys.exit(99)
""")
    stand_in.chmod(0o755)
    monkeypatch.setattr("scheduler.live.node.daemon.ray_executable", lambda: str(stand_in))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t" * 64)  # the cluster's token (the agent refuses to join without one)
    lines: list[str] = []
    agent = NodeAgent(options(tmp_path, gpus=1, dry_run=False, health_interval_s=0.2), out=lines.append)

    def interrupt() -> None:
        wait_until("the stand-in ray to start", (tmp_path / "ready").exists, timeout=30)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    before = signal.getsignal(signal.SIGINT)
    assert agent.run() == 7
    assert signal.getsignal(signal.SIGINT) is before  # the agent's handlers are gone with it
    seen = json.loads(record.read_text())
    assert seen["signal"] == signal.SIGTERM
    assert seen["node_dir"] == str(tmp_path / "n1")  # what Ray's workers inherit to find the node's MPS
    assert seen["argv"][:2] == ["start", "--address=127.0.0.1:1"] and "--block" in seen["argv"]
    assert json.loads(seen["argv"][2].removeprefix("--resources=")) == {"corral_node_n1": 1.0, "corral_gpu_n1_0": 1.0}
    assert lines[-1] == "corral node n1: Ray exited with status 7"
    assert read_health(tmp_path / "n1")["agent"] == "stopped"


# ---- a real node joining a local Ray head ---------------------------------------------------------------------------


def _ports() -> list[str]:
    # Every port a Ray node listens on, free ones: other Ray clusters may run on this machine at the same time.
    return [f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}"]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _processes_with_env(key: str, value: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if f"{key}={value}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


DRIVER = """
import json, sys, time, ray
from scheduler.live.ray_backend import RayBackend
from scheduler.live.runs import Launch, RankSpec
address, mode, folder = sys.argv[1], sys.argv[2], sys.argv[3]
backend = RayBackend.connect(address)
def n1():
    return [n for n in ray.nodes() if "corral_node_n1" in (n.get("Resources") or {})]
deadline = time.time() + 90
if mode == "joined":
    while not any(n["Alive"] for n in n1()) and time.time() < deadline:
        time.sleep(0.5)
    res = {k: v for n in n1() if n["Alive"] for k, v in n["Resources"].items() if k.startswith("corral_")}
    launch = Launch(job_id=1, attempt=1, kind="emulated", ranks=(RankSpec(0, "n1", (1,), 0.5, 16.0),), work_s=1.0,
                    rate=1.0, log_dir=folder + "/logs", checkpoint_dir=folder + "/ckpt")
    backend.launch(launch)
    phase = "none"
    while phase not in ("succeeded", "failed", "lost") and time.time() < deadline:
        phase = next((s.phase for s in backend.poll()), "none")
        time.sleep(0.2)
    backend.forget(1)
    print(json.dumps({"resources": res, "nodes": [[n.name, n.gpus, n.alive, n.preset] for n in backend.nodes()],
                      "phase": phase}))
else:
    while any(n["Alive"] for n in n1()) and time.time() < deadline:
        time.sleep(0.5)
    print(json.dumps({"alive": [n["Alive"] for n in n1()]}))
backend.shutdown()
"""


@pytest.fixture(scope="module")
@tiered("ray")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], Path]]:
    """A Ray head on 127.0.0.1 (free ports, its own temp folder and auth token), stopped after the module."""
    folder = tmp_path_factory.mktemp("head")
    temp_dir = Path(f"/tmp/corral-ray-{secrets.token_hex(4)}")  # short: Ray's socket paths live under it
    # Ray's token authentication, with a token of this test's own (not ~/.ray/auth_token, which other clusters on
    # this machine may share): the agent passes its environment on to `ray start`, so the node joins with it.
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    port = free_port()
    ray_cli = str(Path(sys.executable).with_name("ray"))
    log = (folder / "head.log").open("ab")
    head = subprocess.Popen([ray_cli, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
                             "--num-cpus=1", "--num-gpus=0", "--resources={}", "--include-dashboard=false",
                             f"--dashboard-port={free_port()}", f"--temp-dir={temp_dir}", *_ports()],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        wait_until("the Ray head", lambda: head.poll() is None and subprocess.run(
            [ray_cli, "health-check", f"--address={address}"], env=env, capture_output=True, timeout=30,
            check=False).returncode == 0, timeout=120, every=1.0)
        yield address, {**env, "CORRAL_TEST_RAY_TEMP": str(temp_dir)}, folder
    finally:
        head.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            head.wait(timeout=30)
        if _group_alive(head.pid):
            os.killpg(head.pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def test_a_node_joins_runs_a_fractional_job_under_mps_and_leaves(
        ray_head: tuple[str, dict[str, str], Path], tmp_path: Path) -> None:
    """Also: the agent pushes its health to the API it is given (a stand-in here), with its token, and keeps that
    admin token from Ray and the processes Ray starts."""
    address, env, _ = ray_head
    control, record = stand_in_mps(tmp_path)
    node_dir = tmp_path / "n1"
    log_path = tmp_path / "agent.log"
    api = StandIn([200])
    token = secrets.token_hex(16)
    with log_path.open("ab") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli.commands", "node", "start", "--address", address, "--gpus", "2",
             "--preset", "pcie-t4", "--name", "n1", "--state-dir", str(node_dir), "--mps-control", str(control),
             "--health-interval", "0.5", "--api", api.url, "--", "--node-ip-address=127.0.0.1", "--num-cpus=1",
             f"--temp-dir={env['CORRAL_TEST_RAY_TEMP']}", *_ports()],
            env={**env, "CORRAL_TOKEN": token}, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        ray_pid = int(wait_until("the agent to start ray", lambda: re.search(
            r"ray start pid (\d+)", log_path.read_text()), timeout=60).group(1))
        out = subprocess.run([sys.executable, "-c", DRIVER, address, "joined", str(tmp_path)], env=env,
                             capture_output=True, text=True, timeout=240, check=False)
        assert out.returncode == 0, out.stderr[-3000:] + log_path.read_text()[-3000:]
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        # Ray's node table has the node with Corral's resources for 2 GPUs and its preset's marker, and the backend
        # reads it as Corral node n1, a pcie-t4
        assert seen["resources"] == {"corral_node_n1": 1.0, "corral_gpu_n1_0": 1.0, "corral_gpu_n1_1": 1.0,
                                     "corral_preset_pcie-t4": 1.0}
        assert ["n1", 2, True, "pcie-t4"] in seen["nodes"]
        # The fractional job ran on n1 under the node's MPS daemon: started before it, stopped after it.
        assert seen["phase"] == "succeeded", log_path.read_text()[-3000:]
        assert kinds(record) == ["start", "quit"]
        assert calls(record)[0]["pipe"] == f"{node_dir}/mps/pipe"
        rank_log = (tmp_path / "logs" / "rank-0.log").read_text()
        assert f"CUDA_MPS_PIPE_DIRECTORY={node_dir}/mps/pipe" in rank_log and "CUDA_VISIBLE_DEVICES=1" in rank_log
        health = wait_until("a health report", lambda: (node_dir / "health.json").exists() and read_health(node_dir),
                            timeout=30)
        assert health["agent"] == "running" and [g["status"] for g in health["gpus"]] == ["virtual", "virtual"]
        # The same readings reached the API, every half second, with the token.
        wait_until("two health pushes", lambda: len(api.requests) >= 2, timeout=30)
        pushed = api.requests[-1]
        assert pushed["path"] == "/api/v1/nodes/n1/health" and pushed["auth"] == f"Bearer {token}"
        assert pushed["body"]["agent"] == "running" and pushed["body"]["interval_s"] == 0.5
        assert [g["status"] for g in pushed["body"]["gpus"]] == ["virtual", "virtual"]
        assert "CORRAL_TOKEN" not in _environ(ray_pid)
        assert _processes_with_env("CORRAL_TOKEN", token) == [agent.pid], "the token reached a process Ray started"

        agent.send_signal(signal.SIGTERM)
        code = agent.wait(timeout=90)
        text = log_path.read_text()
        assert f"Ray exited with status {code}" in text  # the agent leaves with Ray's status
        # Nothing of the node is left: the agent's group, Ray's own group, any process started with its folder.
        wait_until("the node's processes to end", lambda: not _group_alive(agent.pid) and not _group_alive(ray_pid)
                   and not _processes_with_env(NODE_DIR_ENV, str(node_dir)), timeout=60)
        assert read_health(node_dir)["agent"] == "stopped"
        assert api.requests[-1]["body"]["agent"] == "stopped"  # its last report told the API it left
        out = subprocess.run([sys.executable, "-c", DRIVER, address, "left", str(tmp_path)], env=env,
                             capture_output=True, text=True, timeout=180, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
        assert True not in json.loads(out.stdout.strip().splitlines()[-1])["alive"]  # the node left Ray
    finally:
        api.close()
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=30)
        for pgid in (agent.pid,):
            if _group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)

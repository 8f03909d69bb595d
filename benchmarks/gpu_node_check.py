"""Corral's GPU path on a real GPU, end to end without a Ray cluster: what `corral node start` and a worker do.

    python benchmarks/gpu_node_check.py --out DIR [--steps 300] [--share 0.5]

1. The node agent (`scheduler.live.node.daemon.NodeAgent`) discovers the GPUs through NVML, matches a preset, writes
   its node folder and its MPS configuration, and takes a GPU health reading, exactly as `corral node start` does up
   to the `ray start` it would then run (Ray is not needed here: the check prints the command instead).
2. A real PyTorch training job (`gpu_train_job.py`) is launched the way the controller launches a command job: a
   `scheduler.live.worker.Worker` (the class Ray runs as the job's actor) started with `scheduler.live.runs.rank_env`'s
   environment for a fractional rank, so it takes a lease on the node's MPS daemon (which starts it), and the job runs
   as an MPS client with `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` and `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`.
3. It is preempted as the controller preempts (`Worker.stop`: SIGTERM, the grace period, SIGKILL), then started again
   as attempt 2 with the same checkpoint folder, and must resume from the step it saved and finish.
4. The last lease released, the daemon must have stopped; the agent closes (health says "stopped").

Writes DIR/node_check.json (every step's outcome and the outputs verbatim, the job's logs included); exits 1 if a
step failed. On a machine without a GPU it fails at step 1 with the agent's own message.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NODE = "gpu-check"


def wait_for(cond: Any, timeout_s: float, every_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every_s)
    return bool(cond())


def mps_query(control: str, pipe_dir: str, command: str) -> str:
    """Ask the running control daemon (`get_server_list`, `get_client_list PID`): what it says, verbatim."""
    try:
        proc = subprocess.run([control], input=command + "\n", capture_output=True, text=True, timeout=10,
                              env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe_dir}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"
    return (proc.stdout + proc.stderr).strip()


def nvidia_smi() -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "no nvidia-smi on PATH"
    proc = subprocess.run([exe, "--query-compute-apps=pid,process_name,used_memory", "--format=csv"],
                          capture_output=True, text=True, timeout=30, check=False)
    return (proc.stdout + proc.stderr).strip()


def main(argv: list[str] | None = None) -> int:
    from scheduler.live.node.daemon import AgentError, AgentOptions, NodeAgent
    from scheduler.live.node.mps import NODE_DIR_ENV
    from scheduler.live.runs import Launch, RankSpec, rank_env
    from scheduler.live.worker import STOP_GRACE_S, Worker

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out/gpu_node_check")
    p.add_argument("--steps", type=int, default=300, help="training steps the job runs in all")
    p.add_argument("--preempt-at", type=int, default=60, help="preempt once the job logged this step")
    p.add_argument("--share", type=float, default=0.5, help="the job's GPU share (< 1: an MPS client)")
    p.add_argument("--mps-control", default=None, help="the MPS control program (default: on PATH)")
    p.add_argument("--job-args", default="", help="more arguments for the job (e.g. '--device cpu --size tiny' for a "
                   "dry run of the check on a CPU with a stand-in NVML)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "steps": {}}
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    def step(name: str, ok: bool, **facts: Any) -> bool:
        report["steps"][name] = {"ok": ok, **facts}
        say(f"[{'ok' if ok else 'FAILED'}] {name}")
        return ok

    home = Path(tempfile.mkdtemp(prefix="corral-gpu-"))
    # Ray does not travel to the GPU machine: the agent composes `ray start`'s command from the `ray` beside Python or
    # on PATH, so a stand-in that only refuses to run is put there. The check never runs it.
    shim = home / "bin"
    shim.mkdir()
    (shim / "ray").write_text("#!/bin/sh\necho 'ray: not installed here (gpu_node_check)' >&2\nexit 127\n")
    (shim / "ray").chmod(stat.S_IRWXU)
    if shutil.which("ray") is None:
        os.environ["PATH"] = f"{shim}:{os.environ.get('PATH', '')}"
        report["ray"] = "not installed here: `ray start` composed, not run"
    folder = home / "node"
    opts = AgentOptions(address="127.0.0.1:6379", name=NODE, gpus=None, node_dir=folder,
                        mps_control=args.mps_control, health_interval_s=10.0)
    agent = NodeAgent(opts, out=say)
    failed = False
    try:
        try:
            argv_ray = agent.prepare(write=True)
        except AgentError as exc:
            step("discovery", False, error=str(exc))
            return 1
        hw = agent.hardware
        assert hw is not None
        step("discovery", hw.source == "nvml" and hw.gpus > 0, hardware=hw.as_json(), ray_start=argv_ray,
             agent_output=list(lines))
        health = agent.check_health()
        step("health", health.get("status") in ("ok", "degraded"), report=health)
        mps = agent.mps
        report["mps_control"] = mps.config.control if mps else None
        if mps is None:
            step("mps", False, error="no nvidia-cuda-mps-control: the job runs without MPS (shares not enforced)")
            failed = True

        # The job, launched as the controller's worker launches a command rank.
        os.environ[NODE_DIR_ENV] = str(folder)  # what the agent gives `ray start`, and so every worker, on a node
        mem_gb = hw.devices[0].memory_mib / 1024
        entry = (f"{sys.executable} {ROOT / 'benchmarks' / 'gpu_train_job.py'} --steps {args.steps} --every 1000000 "
                 f"--workload resnet50 {args.job_args}")
        launch = Launch(job_id=1, attempt=1, kind="command",
                        ranks=(RankSpec(0, NODE, (0,), args.share, mem_gb),), work_s=0.0, rate=1.0,
                        log_dir=str(home / "logs" / "attempt-1"), checkpoint_dir=str(home / "checkpoints"),
                        entrypoint=entry, workdir=str(home / "checkpoints"))
        env = rank_env(launch.ranks[0], 1, "127.0.0.1", 29500, launch)
        report["job_env"] = {k: v for k, v in env.items() if k.startswith(("CUDA_", "CORRAL_"))}
        first = Worker(launch, 0)
        first.start(env)
        log1 = Path(launch.log_dir) / "rank-0.log"
        marker = f"step {args.preempt_at} "

        def logged() -> bool:
            return first.phase == "exited" or (log1.exists() and marker in log1.read_text(errors="replace"))

        reached = wait_for(logged, 300) and first.phase == "running"
        snapshot: dict[str, Any] = {"nvidia_smi": nvidia_smi()}
        if mps is not None:
            snapshot["daemon_running"] = mps.daemon_running()
            snapshot["leases"] = mps.leases()
            servers = mps_query(mps.config.control, mps.config.pipe_dir, "get_server_list")
            snapshot["get_server_list"] = servers
            for pid in servers.split():
                if pid.isdigit():
                    snapshot[f"get_client_list {pid}"] = mps_query(mps.config.control, mps.config.pipe_dir,
                                                                   f"get_client_list {pid}")
        running = first.phase == "running" and reached
        if not step("job running under MPS" if mps else "job running", running, while_running=snapshot,
                    status=first.status()):
            failed = True
        began = time.monotonic()
        code = first.stop(grace_s=STOP_GRACE_S)
        text1 = log1.read_text(errors="replace") if log1.exists() else ""
        saved = [ln for ln in text1.splitlines() if ln.startswith("SIGTERM: saved step")]
        if not step("preempted with SIGTERM", code == 143 and bool(saved), exit_code=code,
                    stop_s=round(time.monotonic() - began, 2), log=text1.splitlines()):
            failed = True

        # Attempt 2: the same checkpoint folder; it must resume where attempt 1 saved.
        second_launch = replace(launch, attempt=2, log_dir=str(home / "logs" / "attempt-2"))
        second = Worker(second_launch, 0)
        second.start(rank_env(second_launch.ranks[0], 1, "127.0.0.1", 29500, second_launch))
        done = second.finished(timeout_s=400)
        text2 = (Path(second_launch.log_dir) / "rank-0.log").read_text(errors="replace")
        resumed = [ln for ln in text2.splitlines() if ln.startswith("resumed from step")]
        want = saved[0].split()[3].rstrip(";") if saved else None
        ok = done["exit_code"] == 0 and bool(resumed) and want is not None and resumed[0].split()[3] == want
        if not step("resumed from its checkpoint", ok, status=done, resumed=resumed, saved=saved,
                    log=text2.splitlines()):
            failed = True
        if mps is not None:
            stopped = wait_for(lambda: not mps.daemon_running(), 30)
            if not step("MPS daemon stopped after the last client", stopped, leases=mps.leases()):
                failed = True
            report["mps_control_log"] = (folder / "mps" / "log" / "control.log").read_text(errors="replace")[-3000:] \
                if (folder / "mps" / "log" / "control.log").exists() else "no control.log"
            server_logs = sorted((folder / "mps" / "log").glob("server*.log"))
            report["mps_server_log"] = server_logs[-1].read_text(errors="replace")[-3000:] if server_logs else ""
    except Exception:  # noqa: BLE001 - the report says what broke, verbatim
        report["exception"] = traceback.format_exc()
        say(report["exception"])
        failed = True
    finally:
        agent.close()
        report["agent_output"] = lines
        (out / "node_check.json").write_text(json.dumps(report, indent=1, default=str))
        shutil.rmtree(home, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

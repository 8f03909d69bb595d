"""What a resize costs the docs' elastic example, launched as Corral launches a command job, on one GPU.

    python benchmarks/gpu_example_resize.py --out DIR [--plan 1x100,2x50,1x100,2x50,1x100]

`docs/examples/elastic_train.py` is the data-parallel PyTorch job docs/elastic.md tells users to write. This runs it
through a plan of sizes, `RxS` being R workers at an MPS share of S% each of GPU 0, each worker as Corral's starts one
rank of a command job: the environment `scheduler.live.runs.rank_env` gives it (`WORLD_SIZE`, `NODE_RANK`,
`LOCAL_WORLD_SIZE`, `CUDA_VISIBLE_DEVICES`, `MASTER_ADDR`/`MASTER_PORT`, `CORRAL_ATTEMPT`, `CORRAL_CHECKPOINT_DIR`, and
below 100% the MPS variables of a lease from `scheduler.live.node.mps.MpsManager`), running the entrypoint the docs
give (`torchrun` with the c10d rendezvous, one process per worker here). A resize is Corral's: SIGTERM to every
worker (torchrun passes it on), the example's ranks agree on a step, rank 0 saves, and the next size's workers start
once every old one is gone. Unlike `gpu_resize.py`, whose ranks are independent replicas, these ranks form one
process group with DDP, so the pause includes the rendezvous. NCCL refuses two ranks on one GPU, so a size of several
workers runs the example with `--backend gloo` (its all-reduce through the host); one worker needs no group.

Each line a worker prints is stamped with `time.monotonic()` as it is read, and the pause is read from them:

* `signal_to_saved_s`: SIGTERM to rank 0's "saved step N (stopped)"; `stop_s`: to every worker gone;
* `mps_s`: the leases released and taken (the first starts the node's MPS daemon, the last out stops it);
* `resumed_s`: the new workers started to rank 0's "resumed at step N" (torchrun, the interpreter, `import torch`,
  the rendezvous and process group, CUDA, the checkpoint loaded: the example prints it after its load);
* `first_print_s`: from there to rank 0's first "step K" line (the example prints every 10 steps);
* `pause_s`: SIGTERM to that line: the whole time the job made no progress, give or take ten steps;
* `steps_per_s_before`, `steps_per_s_after`: rank 0's steady rate at the old and the new size.

`--device cpu` hides the GPUs from the workers (the example then uses gloo on the CPU): the test runs that. Writes
`DIR/example_resize.csv` (one row per size change, the first start included), `DIR/meta.json` and `DIR/workers.log`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script from anywhere: the repo's packages

EXAMPLE = HERE.parent / "docs" / "examples" / "elastic_train.py"
CSV_FIELDS = ["change", "from_workers", "from_share", "to_workers", "to_share", "saved_step", "resumed_step",
              "steps_per_s_before", "steps_per_s_after", "signal_to_saved_s", "stop_s", "mps_s", "resumed_s",
              "first_print_s", "pause_s", "error"]
GRACE_S = 60.0  # SIGKILL (and an error in the row) if a worker has not left by then
START_TIMEOUT_S = 180.0
STEP = re.compile(r"step (\d+) loss")
RESUMED = re.compile(r"rank 0: (?:resumed at step (\d+)|started) on")
SAVED = re.compile(r"saved step (\d+)")


@dataclass
class Worker:
    """One worker of a size: its torchrun process, and each line it printed with when it was read."""

    rank: int
    proc: subprocess.Popen[str]
    launched: float
    lease: str | None
    lines: list[tuple[float, str]] = field(default_factory=list)
    # Its step prints as (when read, step), parsed as they are read: the coordinator polls them every 10 ms while a
    # size runs, and reading every line again each time would take CPU from the run it times.
    step_prints: list[tuple[float, int]] = field(default_factory=list)
    exited: float | None = None

    def read(self, log: TextIO, lock: threading.Lock) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            self.lines.append((now, line.rstrip("\n")))
            if m := STEP.search(line):
                self.step_prints.append((now, int(m.group(1))))
            with lock:
                log.write(f"[w{self.rank} {now:.3f}] {line}")

    def first(self, pattern: re.Pattern[str], after: float = 0.0) -> tuple[float, re.Match[str]] | None:
        for t, line in list(self.lines):
            m = pattern.search(line)
            if m and t >= after:
                return t, m
        return None

    def steps(self, after: float = 0.0) -> list[tuple[float, int]]:
        prints = list(self.step_prints)  # (a copy: the reader thread appends)
        return prints[bisect_left(prints, (after, -1)):]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rate(points: list[tuple[float, int]]) -> float | None:
    """Steps per second over `points` (time, step), the first two prints left out (a start is slower)."""
    points = points[2:]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return round((points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0]), 1)


class Runner:
    def __init__(self, args: argparse.Namespace, log: TextIO, mps: Any, mem_gb: float) -> None:
        self.args, self.log, self.mps, self.mem_gb = args, log, mps, mem_gb
        self.lock = threading.Lock()
        self.attempt = 0
        self.began = time.monotonic()

    def say(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.began:6.1f} s] {msg}", flush=True)

    def launch(self, workers: int, share: int, ckpt: Path) -> tuple[list[Worker], float]:
        """The size's workers, each with the environment Corral's worker gives a rank, running the docs' entrypoint;
        and the seconds the MPS leases took."""
        from benchmarks.gpu_resize import take_lease
        from scheduler.live.runs import Launch, RankSpec, actor_name, rank_env

        self.attempt += 1
        port = free_port()
        specs = tuple(RankSpec(r, f"n{r}", (0,), share / 100, self.mem_gb) for r in range(workers))
        launch = Launch(1, self.attempt, "command", specs, 0.0, 1.0, "", str(ckpt))
        started, mps_s = [], 0.0
        for spec in specs:
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                   **rank_env(spec, workers, "127.0.0.1", port, launch)}
            if self.args.device == "cpu":
                env["CUDA_VISIBLE_DEVICES"] = ""
            lease, spent = take_lease(self.mps, actor_name(1, self.attempt, spec.rank), spec.share, env)
            mps_s += spent
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={env['WORLD_SIZE']}",
                   f"--nproc-per-node={env['LOCAL_WORLD_SIZE']}", f"--node-rank={env['NODE_RANK']}",
                   "--rdzv-backend=c10d", f"--rdzv-endpoint={env['MASTER_ADDR']}:{env['MASTER_PORT']}",
                   f"--rdzv-id=1-{env['CORRAL_ATTEMPT']}", str(EXAMPLE), "--steps", str(10**9),
                   "--batch", str(self.args.batch), *(["--backend", "gloo"] if workers > 1 else [])]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                    start_new_session=True)
            w = Worker(spec.rank, proc, time.monotonic(), lease)
            threading.Thread(target=w.read, args=(self.log, self.lock), daemon=True).start()
            started.append(w)
        return started, mps_s

    def release(self, workers: list[Worker]) -> float:
        from benchmarks.gpu_resize import release_leases

        return release_leases(self.mps, workers)

    def wait_prints(self, workers: list[Worker], after: float, count: int, timeout_s: float) -> str:
        """Until rank 0 printed `count` step lines after `after` (and `--steady-s` passed since its first)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for w in workers:
                if w.proc.poll() is not None:
                    return f"worker {w.rank} exited with {w.proc.returncode} (its output is in workers.log)"
            steps = workers[0].steps(after)
            if len(steps) >= count and time.monotonic() - steps[0][0] >= self.args.steady_s:
                return ""
            if time.monotonic() > deadline:
                return f"fewer than {count} step prints in {timeout_s:.0f} s"
            time.sleep(0.01)

    @staticmethod
    def stop(workers: list[Worker]) -> tuple[float, str]:
        signalled = time.monotonic()
        for w in workers:
            if w.proc.poll() is None:
                os.killpg(w.proc.pid, signal.SIGTERM)  # Corral stops a worker's process group
        errors = []
        for w in workers:
            try:
                w.proc.wait(timeout=max(0.0, signalled + GRACE_S - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(w.proc.pid, signal.SIGKILL)
                w.proc.wait()
                errors.append(f"worker {w.rank} killed after the {GRACE_S:.0f} s grace")
            w.exited = time.monotonic()
        return signalled, "; ".join(errors)

    def size(self, prev: tuple[int, int], cur: tuple[int, int], current: list[Worker], ckpt: Path
             ) -> tuple[dict[str, Any], list[Worker]]:
        """One row: the old size stopped (if any), the new one started and run steady."""
        row: dict[str, Any] = {"change": (f"{prev[0]}x{prev[1]}->" if current else "start->") + f"{cur[0]}x{cur[1]}",
                               "from_workers": prev[0], "from_share": prev[1], "to_workers": cur[0],
                               "to_share": cur[1], "error": ""}
        mps_s = 0.0
        paused_at = time.monotonic()
        if current:
            begun = current[0].steps()[0][0] if current[0].steps() else 0.0
            paused_at, row["error"] = self.stop(current)
            row["steps_per_s_before"] = rate([p for p in current[0].steps(begun) if p[0] <= paused_at])
            saved = current[0].first(SAVED, paused_at)
            if saved:
                row["signal_to_saved_s"] = round(saved[0] - paused_at, 3)
                row["saved_step"] = int(saved[1].group(1))
            elif not row["error"]:
                row["error"] = "rank 0 printed no 'saved step' after the signal"
            row["stop_s"] = round(max(w.exited or paused_at for w in current) - paused_at, 3)
            mps_s += self.release(current)
        if row["error"]:
            return row, []
        workers, acquire_s = self.launch(cur[0], cur[1], ckpt)
        mps_s += acquire_s
        row["mps_s"] = round(mps_s, 3)
        row["error"] = self.wait_prints(workers, 0.0, 1, START_TIMEOUT_S)
        if row["error"]:
            return row, workers
        resumed = workers[0].first(RESUMED)
        first_print = workers[0].steps()[0][0]
        if resumed:
            row["resumed_s"] = round(resumed[0] - min(w.launched for w in workers), 3)
            row["resumed_step"] = int(resumed[1].group(1) or 0)
            row["first_print_s"] = round(first_print - resumed[0], 3)
        row["pause_s"] = round(first_print - paused_at, 3)
        row["error"] = self.wait_prints(workers, 0.0, self.args.min_prints, self.args.max_run_s)
        row["steps_per_s_after"] = rate(workers[0].steps())
        return row, workers


def run(args: argparse.Namespace) -> int:
    from benchmarks.gpu_colocation import gpu_facts
    from benchmarks.gpu_resize import close_mps, filesystem_of, open_mps, parse_plan

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = parse_plan(args.plan)
    _nvml, facts = gpu_facts()
    work = Path(tempfile.mkdtemp(prefix="example-resize-", dir=args.work_dir))
    meta: dict[str, Any] = {
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "python": platform.python_version(), **facts,
        "settings": vars(args), "checkpoint_fs": filesystem_of(work),
    }
    mps, mps_folder, meta["mps"] = open_mps(args.mps_control, "worker")
    log = (out / "workers.log").open("w")
    runner = Runner(args, log, mps, facts.get("memory_mib", 0) / 1024 or 80.0)
    rows: list[dict[str, Any]] = []
    current: list[Worker] = []
    try:
        with (out / "example_resize.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
            writer.writeheader()
            prev = (0, 0)
            for cur in plan:
                if current and time.monotonic() - runner.began > args.budget_s:
                    runner.say("past the budget: no more resizes")
                    break
                row, current = runner.size(prev, cur, current, work)
                writer.writerow(row)
                f.flush()
                rows.append(row)
                runner.say(f"{row['change']}: pause {row.get('pause_s')} s {row['error']}")
                if row["error"]:
                    break
                prev = cur
    finally:
        if current:
            runner.stop(current)
            runner.release(current)
        close_mps(mps, mps_folder, meta)
        shutil.rmtree(work, ignore_errors=True)
        log.close()
    import torch

    meta.update(torch=torch.__version__, cuda=torch.version.cuda, elapsed_s=round(time.monotonic() - runner.began, 1))
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    cols = ["change", "steps_per_s_before", "steps_per_s_after", "signal_to_saved_s", "stop_s", "mps_s", "resumed_s",
            "first_print_s", "pause_s", "error"]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join("" if r.get(c) is None else str(r.get(c)) for c in cols))
    return 1 if any(r["error"] for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out/gpu_example_resize", help="folder for example_resize.csv, meta.json and "
                   "workers.log")
    p.add_argument("--plan", default="1x100,2x50,1x100,2x50,1x100", help="the sizes in turn, WORKERSxSHARE each")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--batch", type=int, default=256, help="the example's samples per process per step")
    p.add_argument("--min-prints", type=int, default=10, help="step prints (10 steps each) of each size")
    p.add_argument("--steady-s", type=float, default=2.0, help="and at least this many seconds of them")
    p.add_argument("--max-run-s", type=float, default=60.0, help="a size's run must print that many by then")
    p.add_argument("--budget-s", type=float, default=1e9, help="no resize is begun after this many seconds")
    p.add_argument("--mps-control", default="nvidia-cuda-mps-control", help="the MPS control program ('none': "
                   "fractional workers run without MPS)")
    p.add_argument("--work-dir", default=None, help="where the checkpoint goes (default: the system's temp folder)")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())

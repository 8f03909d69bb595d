"""What an elastic resize costs a real training job: each pause timed while the job is moved between MPS shares.

    python benchmarks/gpu_resize.py --out DIR [--workloads resnet50,bert-base] [--plan 1x100,2x50,1x100]

Corral resizes a running job the way it preempts one: SIGTERM, the grace period in which the job checkpoints, then its
next run at the new size, which resumes from that checkpoint. This runs `gpu_train_job.py` (the job that keeps
Corral's checkpoint contract) through a plan of sizes, `RxS` being R ranks at an MPS share of S% each, and times every
pause of every resize:

* `signal_to_saved_s`: from SIGTERM to the checkpoint written (the step in progress finishes first); `save_s` is the
  `torch.save` alone;
* `stop_s`: from SIGTERM to the process gone (the save, then the interpreter's and CUDA context's teardown);
* `mps_s`: the node's MPS daemon started for the first fractional rank, or stopped after the last one
  (`scheduler.live.node.mps.MpsManager`, the leases Corral's worker takes and releases);
* `restart_s`: from the process started to its checkpoint loaded, split into `python_s` (interpreter and `import
  torch`), `cuda_init_s` (the CUDA context, through MPS for a fractional rank), `build_s` (the model on the GPU) and
  `load_s` (the checkpoint read and loaded); the slowest rank's;
* `first_step_s`: the first training step after the resume (cudnn autotuning, allocator growth), the slowest rank's;
  `warmup_extra_s` is what steps 2 to 10 took beyond the steady step time;
* `pause_s`: from SIGTERM to every rank of the new size done with its first step: the whole time the job made no
  progress, as measured end to end;
* `steady_before_ms`, `steady_after_ms`: the median step time of a rank at the old and the new size; `items_per_s_*`
  the job's throughput summed over its ranks.

Each rank is a process started with the environment Corral's worker gives it (`scheduler.live.runs.rank_env`:
`CORRAL_CHECKPOINT_DIR`, `RANK`, `WORLD_SIZE`, and for a fractional rank `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`,
`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` and the daemon's pipe folder). The ranks of one size are *independent* data-parallel
replicas, not DDP: NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), and the train job has no gradient
exchange. Each rank resumes from the same checkpoint; rank 0 keeps the job's checkpoint folder and a rank above 0 gets
its own, seeded with a hard link to rank 0's file (the job saves from every rank, and two ranks writing one
`train.tmp` would race); on a shrink the job resumes from rank 0's checkpoint.

How the times are taken: the job runs unmodified under `--job`, which wraps `gpu_workloads.build` (each step is timed,
with a device sync), `torch.save` and `torch.load`, and writes each event with its `time.monotonic()` (one clock for
every process of the machine) to a file the coordinator reads. The coordinator stamps the signal and the process start
and end. `--device cpu --size tiny` runs the same code path on a CPU in seconds (the test does, against a stand-in MPS
control program). Writes `DIR/resize.csv` (one row per size change per workload, the job's first start included,
flushed as it goes), `DIR/meta.json` (GPU, driver, torch, date, command) and `DIR/jobs.log`, and prints a table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script from anywhere: the repo's packages

EVENTS_ENV = "GPU_RESIZE_EVENTS"  # the benchmark's own variable (not Corral's): where a job writes its timed events
CSV_FIELDS = ["workload", "params", "ckpt_mb", "change", "from_ranks", "from_share", "to_ranks", "to_share",
              "saved_step", "resumed_step", "steady_before_ms", "steady_after_ms", "items_per_s_before",
              "items_per_s_after", "signal_to_saved_s", "save_s", "stop_s", "mps_s", "restart_s", "python_s",
              "cuda_init_s", "build_s", "load_s", "first_step_s", "warmup_extra_s", "pause_s", "error"]
STEADY_SKIP = 3  # steps left out of a steady step time: the first ones after a start are slower
WARMUP_STEPS = 10  # warmup_extra_s counts steps 2 to this one
START_TIMEOUT_S = 300.0  # a rank's first step must end this long after its start
GRACE_S = 120.0  # the grace period: SIGKILL (and an error in the row) if a rank has not left by then
POLL_S = 0.01


# ---- the job's side: the unmodified train job, its steps, saves and loads timed ------------------------------------


class Events:
    """JSON lines, one per event, each with its `time.monotonic()`, flushed at once (the coordinator reads them live)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a")  # noqa: SIM115 - open for the process's life

    def emit(self, ev: str, **body: Any) -> None:
        self._file.write(json.dumps({"ev": ev, "t": time.monotonic(), **body}) + "\n")
        self._file.flush()


def job_main(argv: list[str]) -> int:
    """Run `gpu_train_job.main(argv)` with timing hooks; the events go to the file `$GPU_RESIZE_EVENTS` names."""
    events = Events(os.environ[EVENTS_ENV])
    import torch

    events.emit("torch_imported", torch=torch.__version__)
    import benchmarks.gpu_train_job as train_job
    import benchmarks.gpu_workloads as workloads

    device = argv[argv.index("--device") + 1] if "--device" in argv else "cuda"
    cuda = device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    if cuda:  # the context the model's build would create, made first so its cost is told apart from the build's
        torch.empty(1, device=device)
        sync()
        events.emit("cuda_ready", cuda=torch.version.cuda, device_name=torch.cuda.get_device_name())
    else:
        events.emit("cuda_ready", cuda=None, device_name=platform.processor() or "cpu")

    build, save, load = workloads.build, torch.save, torch.load

    def timed_build(*args: Any, **kwargs: Any) -> Any:
        wl = build(*args, **kwargs)
        sync()
        events.emit("built", params=wl.params, items=wl.items)
        step = wl.step

        def timed_step() -> Any:
            t0 = time.monotonic()
            out = step()
            sync()  # the job's own float(loss) syncs too: this only moves the sync before the stamp
            events.emit("step", t0=t0)
            return out

        wl.step = timed_step
        return wl

    def timed_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        t0 = time.monotonic()
        save(obj, f, *args, **kwargs)
        size = os.path.getsize(f) if isinstance(f, str | os.PathLike) else None
        events.emit("saved", t0=t0, step=obj.get("step") if isinstance(obj, dict) else None, bytes=size)

    def timed_load(*args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        obj = load(*args, **kwargs)
        events.emit("loaded", t0=t0, step=obj.get("step") if isinstance(obj, dict) else None)
        return obj

    workloads.build = timed_build  # type: ignore[assignment]
    torch.save = timed_save  # type: ignore[assignment]
    torch.load = timed_load  # type: ignore[assignment]
    return int(train_job.main(argv))


# ---- the coordinator's side --------------------------------------------------------------------------------------


@dataclass
class Rank:
    """One rank's process of one run (one size) of the job."""

    rank: int
    share: int
    proc: subprocess.Popen[bytes]
    events_path: Path
    ckpt_dir: Path
    launched: float  # time.monotonic() just before the process was started
    lease: str | None = None  # its MPS lease's owner name, while it holds one
    exited: float | None = None
    _seen: list[dict[str, Any]] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        """The events written so far (a line still being written is left for the next read)."""
        try:
            text = self.events_path.read_text()
        except FileNotFoundError:
            return []
        lines = text.split("\n")[:-1]  # the last piece has no newline yet, or is empty
        if len(lines) > len(self._seen):
            self._seen.extend(json.loads(line) for line in lines[len(self._seen):])
        return self._seen

    def first(self, ev: str) -> dict[str, Any] | None:
        return next((e for e in self.events() if e["ev"] == ev), None)

    def steps(self) -> list[tuple[float, float]]:
        """(start, end) of each step so far."""
        return [(e["t0"], e["t"]) for e in self.events() if e["ev"] == "step"]


def parse_plan(text: str) -> list[tuple[int, int]]:
    """'1x100,2x50' -> [(1, 100), (2, 50)]: ranks and each rank's MPS share in percent, all on one GPU."""
    plan = []
    for part in text.split(","):
        try:
            ranks, share = (int(x) for x in part.strip().split("x"))
        except ValueError:
            raise SystemExit(f"--plan: {part!r} is not RANKSxSHARE (e.g. 2x50)") from None
        if ranks < 1 or not 1 <= share <= 100 or ranks * share > 100:
            raise SystemExit(f"--plan: {part!r}: ranks >= 1, share 1..100, and ranks x share at most 100 (one GPU)")
        plan.append((ranks, share))
    if len(plan) < 2:
        raise SystemExit("--plan: at least two sizes (a resize is a change from one to the next)")
    return plan


def median_ms(durations: list[float]) -> float | None:
    return round(statistics.median(durations) * 1000, 3) if durations else None


class Coordinator:
    """Runs each workload through the plan, one CSV row per size (the first start, then each resize)."""

    def __init__(self, args: argparse.Namespace, log: TextIO, mem_gb: float, mps: Any, writer: Any,
                 csv_file: TextIO) -> None:
        self.args = args
        self.log = log
        self.mem_gb = mem_gb
        self.mps = mps  # MpsManager, or None (no daemon: a fractional rank runs without MPS, as on such a node)
        self.writer = writer
        self.csv_file = csv_file
        self.began = time.monotonic()
        self.results: list[dict[str, Any]] = []
        self.software: dict[str, Any] = {}  # torch, CUDA and device name, as the first job reported them
        self.job_id = 0
        self.attempt = 0

    def say(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.began:6.1f} s] {msg}", flush=True)

    def over_budget(self) -> bool:
        return time.monotonic() - self.began > self.args.budget_s

    def launch(self, workload: str, ranks: int, share: int, ckpt_root: Path, events_dir: Path
               ) -> tuple[list[Rank], float]:
        """Start `ranks` processes of the job at `share`% each with the environment Corral's worker gives them; also
        the seconds spent taking MPS leases (the first starts the daemon)."""
        from scheduler.live.runs import Launch, RankSpec, actor_name, rank_env

        a = self.args
        self.attempt += 1
        specs = tuple(RankSpec(r, "bench", (0,), share / 100, self.mem_gb) for r in range(ranks))
        launch = Launch(self.job_id, self.attempt, "command", specs, 0.0, 1.0, "", str(ckpt_root / "rank0"))
        job_args = ["--workload", workload, "--device", a.device, "--size", a.size, "--steps", str(10**9),
                    "--every", str(10**9), *a.job_args.split()]  # saves on SIGTERM only: none inside a steady run
        started, mps_s = [], 0.0
        for spec in specs:
            env = {**os.environ, "PYTHONUNBUFFERED": "1", **rank_env(spec, ranks, "127.0.0.1", 29500, launch)}
            ckpt = ckpt_root / f"rank{spec.rank}"
            if spec.rank > 0:
                seed(ckpt_root / "rank0", ckpt)
                env["CORRAL_CHECKPOINT_DIR"] = str(ckpt)
            lease, spent = take_lease(self.mps, actor_name(self.job_id, self.attempt, spec.rank), spec.share, env)
            mps_s += spent
            events = events_dir / f"a{self.attempt}-r{spec.rank}.jsonl"
            env[EVENTS_ENV] = str(events)
            self.log.write(f"=== {workload} attempt {self.attempt} rank {spec.rank} at {share}%\n")
            self.log.flush()
            launched = time.monotonic()
            proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--job", *job_args],
                                    stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=HERE.parent)
            started.append(Rank(spec.rank, share, proc, events, ckpt, launched, lease))
        return started, mps_s

    def release(self, ranks: list[Rank]) -> float:
        return release_leases(self.mps, ranks)

    @staticmethod
    def wait_steps(ranks: list[Rank], count: int, timeout_s: float, steady_s: float = 0.0) -> str:
        """Wait until every rank has done `count` steps and `steady_s` seconds have passed since the last rank's first
        step ended; an error if a rank exits or the time runs out."""
        deadline = time.monotonic() + timeout_s
        while True:
            for r in ranks:
                if r.proc.poll() is not None:
                    return f"rank {r.rank} exited with {r.proc.returncode} (its output is in jobs.log)"
            steps = [r.steps() for r in ranks]
            if all(len(s) >= count for s in steps) and time.monotonic() - max(s[0][1] for s in steps) >= steady_s:
                return ""
            if time.monotonic() > deadline:
                return f"fewer than {count} steps in {timeout_s:.0f} s"
            time.sleep(POLL_S)

    @staticmethod
    def stop(ranks: list[Rank]) -> tuple[float, str]:
        """SIGTERM every rank at once, as a preemption or a resize does; SIGKILL after the grace period. Returns when
        the signal was sent, and an error if a rank did not leave with the train job's 143 (saved, stopped)."""
        signalled = time.monotonic()
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGTERM)
        errors = []
        for r in ranks:
            try:
                code = r.proc.wait(timeout=max(0.0, signalled + GRACE_S - time.monotonic()))
            except subprocess.TimeoutExpired:
                r.proc.kill()
                code = r.proc.wait()
                errors.append(f"rank {r.rank} killed after the {GRACE_S:.0f} s grace")
            r.exited = time.monotonic()
            if code != 143 and not errors:
                errors.append(f"rank {r.rank} exited with {code}, not 143")
        return signalled, "; ".join(errors)

    @staticmethod
    def steady(ranks: list[Rank], until: float) -> tuple[float | None, float | None]:
        """The median step time (seconds) over every rank's steps ended before `until`, the first few left out, and
        the job's items per second at it (each rank's batch, summed)."""
        durations = []
        items = 0
        for r in ranks:
            durations += [end - start for start, end in r.steps()[STEADY_SKIP:] if end <= until]
            built = r.first("built")
            items += int(built["items"]) if built else 0
        if not durations:
            return None, None
        step = statistics.median(durations)
        return step, round(items / step, 2)

    def stopped_side(self, ranks: list[Rank], signalled: float) -> dict[str, Any]:
        """What the stop of the old size cost: the checkpoint written, the processes gone."""
        saves = [e for r in ranks for e in r.events() if e["ev"] == "saved"]
        row: dict[str, Any] = {"stop_s": round(max(r.exited or signalled for r in ranks) - signalled, 3)}
        if saves:
            row["signal_to_saved_s"] = round(max(e["t"] for e in saves) - signalled, 3)
            row["save_s"] = round(max(e["t"] - e["t0"] for e in saves), 3)
            row["ckpt_mb"] = round(max(e["bytes"] or 0 for e in saves) / 1e6, 1)
            row["saved_step"] = next((e["step"] for e in ranks[0].events() if e["ev"] == "saved"), None)
        return row

    def started_side(self, ranks: list[Rank], paused_at: float) -> dict[str, Any]:
        """What the start of the new size cost, from each rank's events: the slowest rank's restart and its parts,
        the slowest first step, and the whole pause from `paused_at` (the signal, or the launch of a first start)."""
        parts = []
        for r in ranks:
            ev = {name: r.first(name) for name in ("torch_imported", "cuda_ready", "built", "loaded")}
            first = r.steps()[0]
            restart = first[0] - r.launched
            parts.append((restart, r, ev, first))
        restart, slowest, ev, first = max(parts, key=lambda p: p[0])
        if not self.software and ev["torch_imported"] and ev["cuda_ready"]:
            self.software = {"torch": ev["torch_imported"]["torch"], "cuda": ev["cuda_ready"]["cuda"],
                             "device_name": ev["cuda_ready"]["device_name"]}
        row: dict[str, Any] = {"restart_s": round(restart, 3),
                               "first_step_s": round(max(p[3][1] - p[3][0] for p in parts), 3),
                               "pause_s": round(max(p[3][1] for p in parts) - paused_at, 3)}
        if ev["torch_imported"] and ev["cuda_ready"] and ev["built"]:
            row["python_s"] = round(ev["torch_imported"]["t"] - slowest.launched, 3)
            row["cuda_init_s"] = round(ev["cuda_ready"]["t"] - ev["torch_imported"]["t"], 3)
            row["build_s"] = round(ev["built"]["t"] - ev["cuda_ready"]["t"], 3)
            row["load_s"] = round(first[0] - ev["built"]["t"], 3)
            row["params"] = ev["built"]["params"]
        loaded = ranks[0].first("loaded")
        row["resumed_step"] = loaded["step"] if loaded else None
        return row

    def warmup_extra(self, ranks: list[Rank], steady: float | None) -> float | None:
        """What steps 2 to WARMUP_STEPS took beyond the steady step time, the most of any rank."""
        if steady is None:
            return None
        extra = [sum(max(0.0, (end - start) - steady) for start, end in r.steps()[1:WARMUP_STEPS]) for r in ranks]
        return round(max(extra), 3)

    def run_workload(self, workload: str, plan: list[tuple[int, int]]) -> None:
        a = self.args
        self.job_id += 1
        folder = Path(tempfile.mkdtemp(prefix=f"resize-{workload}-", dir=a.work_dir))
        ckpt_root, events_dir = folder / "ckpt", folder / "events"
        (ckpt_root / "rank0").mkdir(parents=True)
        events_dir.mkdir()
        current: list[Rank] = []
        try:
            for i, (ranks, share) in enumerate(plan):
                if current and self.over_budget():
                    self.say(f"{workload}: past the budget, no more resizes")
                    break
                prev = plan[i - 1] if i else (0, 0)
                row: dict[str, Any] = {"workload": workload, "change": (f"{prev[0]}x{prev[1]}->" if i else "start->")
                                       + f"{ranks}x{share}", "from_ranks": prev[0], "from_share": prev[1],
                                       "to_ranks": ranks, "to_share": share, "error": ""}
                mps_s = 0.0
                if current:
                    signalled, row["error"] = self.stop(current)
                    steady, items = self.steady(current, signalled)
                    row["steady_before_ms"] = round(steady * 1000, 3) if steady else None
                    row["items_per_s_before"] = items
                    row.update(self.stopped_side(current, signalled))
                    mps_s += self.release(current)
                    current = []
                    paused_at = signalled
                else:
                    paused_at = time.monotonic()
                if not row["error"]:
                    current, acquire_s = self.launch(workload, ranks, share, ckpt_root, events_dir)
                    mps_s += acquire_s
                    row["error"] = self.wait_steps(current, 1, START_TIMEOUT_S)
                if not row["error"]:
                    row.update(self.started_side(current, paused_at))
                    row["error"] = self.wait_steps(current, STEADY_SKIP + a.min_steps, a.max_run_s, a.steady_s)
                    steady, items = self.steady(current, time.monotonic())
                    row["steady_after_ms"] = round(steady * 1000, 3) if steady else None
                    row["items_per_s_after"] = items
                    row["warmup_extra_s"] = self.warmup_extra(current, steady)
                row["mps_s"] = round(mps_s, 3)
                self.writer.writerow(row)
                self.csv_file.flush()
                self.results.append(row)
                self.say(f"{workload} {row['change']}: pause {row.get('pause_s')} s {row['error']}")
                if row["error"]:
                    break
        finally:
            if current:
                self.stop(current)
                self.release(current)
            shutil.rmtree(folder, ignore_errors=True)


def open_mps(program: str, who: str) -> tuple[Any, Path, str]:
    """The node's MPS daemon as Corral's worker runs it (`MpsManager`: started by the first lease, stopped after the
    last), its folder, and words for `meta.json`; no manager where `program` is 'none' or not found."""
    from scheduler.live.node.mps import MpsConfig, MpsManager

    control = shutil.which(program) if program != "none" else None
    folder = Path(tempfile.mkdtemp(prefix="corral-mps-"))  # short: the daemon's socket path has a length limit
    if control is None:
        return None, folder, f"none: no {program} (fractional {who}s run without MPS)"
    mps = MpsManager(folder, MpsConfig(control, str(folder / "pipe"), str(folder / "log")))
    return mps, folder, f"{control}, started by the first fractional {who}'s lease"


def close_mps(mps: Any, folder: Path, meta: dict[str, Any]) -> None:
    """Stop the daemon if it still runs (a failure is recorded in `meta`), and remove its folder."""
    from scheduler.live.node.mps import MpsError

    if mps is not None:
        try:
            mps.shutdown()
        except MpsError as exc:
            meta["mps_stop"] = str(exc)
    shutil.rmtree(folder, ignore_errors=True)


def take_lease(mps: Any, name: str, share: float, env: dict[str, str]) -> tuple[str | None, float]:
    """For a rank below a whole GPU, an MPS lease as `Worker._acquire_mps` takes one (the first starts the node's
    daemon), its variables added to `env`: the lease's name (None: no lease) and the seconds it took."""
    if share >= 1.0 or mps is None:
        return None, 0.0
    t0 = time.monotonic()
    env.update(mps.acquire(name))
    return name, time.monotonic() - t0


def release_leases(mps: Any, holders: Sequence[Any]) -> float:
    """Drop the holders' MPS leases (each one's `lease`, then None), as `Worker._finish` does (the last one out stops
    the daemon); the seconds it took."""
    t0 = time.monotonic()
    for h in holders:
        if h.lease is not None and mps is not None:
            mps.release(h.lease)
            h.lease = None
    return time.monotonic() - t0


def seed(src: Path, dst: Path) -> None:
    """A rank above 0 resumes from rank 0's checkpoint: a hard link (the job replaces its file, never writes into it),
    a copy where links are refused."""
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    if (src / "train.pt").exists():
        try:
            os.link(src / "train.pt", dst / "train.pt")
        except OSError:
            shutil.copy2(src / "train.pt", dst / "train.pt")


def filesystem_of(path: Path) -> str:
    """The type and mount point of the file system `path` is on (from /proc/mounts): a checkpoint's write and read
    times depend on it (tmpfs, a local disk, network storage)."""
    try:
        mounts = [line.split()[:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "unknown"
    target = str(path.resolve())
    best = max((m for m in mounts if target == m[1] or target.startswith(m[1].rstrip("/") + "/")),
               key=lambda m: len(m[1]), default=None)
    return f"{best[2]} at {best[1]} ({best[0]})" if best else "unknown"


def print_table(rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    console.print(f"{meta.get('gpu')} driver {meta.get('driver')}, torch {meta.get('torch')}, {meta['date_utc']}; "
                  f"MPS: {meta.get('mps')}")
    cols = ["workload", "change", "ckpt_mb", "steady_before_ms", "steady_after_ms", "signal_to_saved_s", "save_s",
            "stop_s", "mps_s", "restart_s", "python_s", "cuda_init_s", "build_s", "load_s", "first_step_s",
            "warmup_extra_s", "pause_s", "error"]
    t = Table(*cols, title="Pauses of each resize (seconds; step times in ms)")
    for r in rows:
        t.add_row(*("" if r.get(c) is None else str(r.get(c)) for c in cols))
    console.print(t)


def run(args: argparse.Namespace) -> int:
    from benchmarks.gpu_colocation import gpu_facts, sm_clock
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = parse_plan(args.plan)
    nvml, facts = gpu_facts()
    meta: dict[str, Any] = {
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "python": platform.python_version(), **facts,
        "settings": {k: v for k, v in vars(args).items() if k != "job"},
        "ranks": "independent data-parallel replicas on one GPU (not DDP: NCCL refuses two ranks on one GPU)",
    }
    mem_gb = facts.get("memory_mib", 0) / 1024 or 80.0
    meta["checkpoint_fs"] = filesystem_of(Path(args.work_dir or tempfile.gettempdir()))
    mps, mps_folder, meta["mps"] = open_mps(args.mps_control, "rank")
    log = (out / "jobs.log").open("w")
    csv_file = (out / "resize.csv").open("w", newline="")
    writer = csv.DictWriter(csv_file, fieldnames=CSV_FIELDS)
    writer.writeheader()
    coord = Coordinator(args, log, mem_gb, mps, writer, csv_file)
    try:
        for name in args.workloads.split(","):
            if coord.over_budget():
                coord.say(f"{name}: skipped, past the budget")
                meta.setdefault("skipped_over_budget", []).append(name)
                continue
            coord.say(f"{name}: plan {args.plan}")
            coord.run_workload(name, plan)
    finally:
        close_mps(mps, mps_folder, meta)
    meta.update(coord.software)
    meta["elapsed_s"] = round(time.monotonic() - coord.began, 1)
    meta["sm_clock_end_mhz"] = sm_clock(nvml)
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    csv_file.close()
    log.close()
    print_table(coord.results, meta)
    return 1 if any(r["error"] for r in coord.results) else 0


def main(argv: list[str] | None = None) -> int:
    from benchmarks.gpu_workloads import TRAINING

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--job"]:
        return job_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="out/gpu_resize", help="folder for resize.csv, meta.json and jobs.log")
    p.add_argument("--workloads", default="resnet50,bert-base", help=f"comma-separated, of: {', '.join(TRAINING)}")
    p.add_argument("--plan", default="1x100,2x50,1x100", help="the sizes the job runs at in turn, RANKSxSHARE each")
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", choices=("full", "tiny"), default="full")
    p.add_argument("--min-steps", type=int, default=20, help="steps of each size timed for its steady step time")
    p.add_argument("--steady-s", type=float, default=3.0, help="and at least this many seconds of them")
    p.add_argument("--max-run-s", type=float, default=60.0, help="a size's steady run ends after this many seconds")
    p.add_argument("--budget-s", type=float, default=1e9, help="no resize and no workload is begun after this many "
                   "seconds (the CSV keeps what was measured)")
    p.add_argument("--mps-control", default="nvidia-cuda-mps-control", help="the MPS control program ('none': "
                   "fractional ranks run without MPS)")
    p.add_argument("--job-args", default="", help="more arguments for gpu_train_job.py (e.g. '--threads 1')")
    p.add_argument("--work-dir", default=None, help="where the checkpoints go (default: the system's temp folder)")
    args = p.parse_args(argv)
    unknown = set(args.workloads.split(",")) - set(TRAINING)
    if unknown:
        p.error(f"--workloads: unknown {', '.join(sorted(unknown))} (training workloads: {', '.join(TRAINING)})")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())

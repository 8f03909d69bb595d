"""Co-location measured on a real GPU: every workload alone, then every pair sharing the GPU, under plain
time-slicing and under CUDA MPS at thread shares 25/75, 50/50 and 75/25.

    python benchmarks/gpu_colocation.py --out DIR [--budget-s 420] [--mps-control PATH] [--workloads a,b,...]

Runs on any CUDA machine with PyTorch (the workloads are `gpu_workloads.py`: synthetic data, nothing downloaded);
`--device cpu --size tiny` runs the same code path on a CPU in seconds (the test does, without MPS). Writes
`DIR/colocation.csv` (one row per job per configuration, flushed as it goes: a run stopped early keeps what it
measured) and `DIR/meta.json` (the GPU, driver, clocks, software, date and command), and prints a table.

How a configuration is measured: each job runs in its own process (as Corral runs a job), built and warmed up once per
phase; the coordinator tells the jobs of a configuration to start at the same instant, they run for `warmup + windows x
window` seconds, and each job's rate is the median over the timed windows of its steps per second (counted between
the first and last step that end inside the window, so a slow step does not quantise the rate). Training jobs run
closed-loop; an inference service answers requests that arrive at a fixed rate (`--load` times the capacity it showed
alone, time-sliced), one at a time, and reports p50/p99 latency from arrival (queueing included) and its median
service time. Under MPS, each job's process is started with `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` and
`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` set as Corral's worker sets them (`scheduler.live.runs.rank_env`), against an MPS
control daemon this script starts with its own pipe folder (`scheduler.live.node.mps.MpsDaemon`) and stops at the end.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import platform
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self, TextIO

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script from anywhere: the repo's packages

CSV_FIELDS = ["phase", "config", "mode", "job", "kind", "share", "partner", "partner_share", "items_per_s",
              "steps_per_s", "offered_rps", "p50_ms", "p99_ms", "service_ms", "windows", "util_gpu", "util_mem",
              "error"]
READY_TIMEOUT_S = 300.0
REPLY_SLACK_S = 60.0  # a job's answer may come this long after its run should have ended (a straggling last step)


# ---- the job's side ----------------------------------------------------------------------------------------------


def _emit(out: TextIO, body: dict[str, Any]) -> None:
    out.write(json.dumps(body) + "\n")
    out.flush()


def worker_main(name: str, device: str, size: str) -> int:
    """One job's process: build, warm up, then answer `run` commands on stdin with its step times on stdout."""
    import torch

    from benchmarks.gpu_workloads import build

    proto = sys.stdout
    sys.stdout = sys.stderr  # anything a library prints must not corrupt the protocol
    cuda = device.startswith("cuda")
    if not cuda:
        # On a CPU each job gets one thread: two jobs of all the cores each would measure the OS scheduler instead.
        torch.set_num_threads(1)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    try:
        wl = build(name, device, size)
        began = time.monotonic()
        for i in range(1000):  # warm-up: cudnn autotuning, allocator growth, lazy init
            wl.step()
            sync()
            if i >= 3 and time.monotonic() - began > 1.0:
                break
    except Exception as exc:  # noqa: BLE001 - reported to the coordinator, which records it
        _emit(proto, {"ready": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
        return 1
    mem_mb = torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0
    _emit(proto, {"ready": True, "kind": wl.kind, "items": wl.items, "params": wl.params, "mem_mb": round(mem_mb, 1),
                  "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
                  "device_name": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu"})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            break
        t0, end, rate = float(cmd["t0"]), float(cmd["t0"]) + float(cmd["duration"]), cmd.get("rate")
        while (wait := t0 - time.monotonic()) > 0:
            time.sleep(min(wait, 0.01))
        arrivals: list[float] = []
        starts: list[float] = []
        ends: list[float] = []
        try:
            k = 0
            while True:
                if rate:  # open loop: request k arrives at t0 + k / rate whether or not the last one is done
                    arrival = t0 + k / float(rate)
                    if arrival >= end:
                        break
                    while (wait := arrival - time.monotonic()) > 0:
                        time.sleep(wait)
                    arrivals.append(arrival)
                elif time.monotonic() >= end:
                    break
                starts.append(time.monotonic())
                wl.step()
                sync()
                ends.append(time.monotonic())
                k += 1
        except Exception as exc:  # noqa: BLE001
            _emit(proto, {"error": f"{type(exc).__name__}: {exc}"[:500]})
            continue
        _emit(proto, {"arrivals": arrivals, "starts": starts, "ends": ends})
    return 0


# ---- the coordinator's side --------------------------------------------------------------------------------------


@dataclass
class Job:
    """A running job process: one workload at one share in one phase."""

    name: str
    share: int  # MPS thread percentage (100: no MPS, time-sliced)
    proc: subprocess.Popen[str]
    kind: str = ""
    items: int = 1
    info: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    def send(self, body: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(body) + "\n")
        self.proc.stdin.flush()

    def read(self, timeout_s: float) -> dict[str, Any]:
        """The job's next line, or an error if it sent none in time or died."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not ready:
            return {"error": f"no answer in {timeout_s:.0f} s"}
        line = self.proc.stdout.readline()
        if not line:
            return {"error": f"the process exited ({self.proc.wait()}); its stderr is in the run's log"}
        return dict(json.loads(line))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "quit"})
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def start_jobs(specs: list[tuple[str, int]], args: argparse.Namespace, env: dict[str, str], log: TextIO,
               mem_gb: float) -> dict[tuple[str, int], Job]:
    """Start every (workload, share) process at once (they build and warm up in parallel), then wait for each."""
    from scheduler.live.runs import Launch, RankSpec, rank_env

    jobs: dict[tuple[str, int], Job] = {}
    for name, share in specs:
        job_env = dict(env)
        if share < 100:  # exactly the variables Corral's worker gives a fractional rank
            spec = RankSpec(0, "bench", (0,), share / 100, mem_gb)
            launch = Launch(0, 1, "command", (spec,), 0.0, 1.0, "", "")
            mps = rank_env(spec, 1, "127.0.0.1", 0, launch)
            job_env.update({k: v for k, v in mps.items() if k.startswith("CUDA_MPS_")})
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", name, "--device",
                                 args.device, "--size", args.size], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=log, env=job_env, text=True, cwd=HERE.parent)
        jobs[(name, share)] = Job(name, share, proc)
    for job in jobs.values():
        hello = job.read(READY_TIMEOUT_S)
        if not hello.get("ready"):
            job.error = str(hello.get("error", "not ready"))
            print(f"  {job.name} (share {job.share}): did not start: {job.error}", flush=True)
            job.close()
            continue
        job.kind, job.items, job.info = hello["kind"], int(hello["items"]), hello
    return jobs


class UtilSampler:
    """NVML utilisation (SM busy %, memory-controller busy %) sampled while a configuration runs; None without
    NVML."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._stop = threading.Event()
        self.samples: list[tuple[int, int]] = []
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        if self.nvml is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        nv, h = self.nvml
        while not self._stop.wait(0.05):
            try:
                u = nv.nvmlDeviceGetUtilizationRates(h)
                self.samples.append((int(u.gpu), int(u.memory)))
            except nv.NVMLError:
                return

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def means(self) -> tuple[float | None, float | None]:
        if not self.samples:
            return None, None
        return (round(statistics.fmean(s[0] for s in self.samples), 1),
                round(statistics.fmean(s[1] for s in self.samples), 1))


def window_rates(ends: list[float], start: float, window: float, count: int) -> list[float]:
    """Steps per second in each of `count` windows from `start`: (steps ending inside - 1) / (last end - first end).
    A window with fewer than two step ends has no rate."""
    rates = []
    for k in range(count):
        lo, hi = start + k * window, start + (k + 1) * window
        inside = [e for e in ends if lo <= e < hi]
        if len(inside) >= 2 and inside[-1] > inside[0]:
            rates.append((len(inside) - 1) / (inside[-1] - inside[0]))
    return rates


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    i = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[i]


class Runner:
    def __init__(self, args: argparse.Namespace, writer: Any, csv_file: TextIO, nvml: Any) -> None:
        self.args = args
        self.writer = writer
        self.csv_file = csv_file
        self.nvml = nvml
        self.began = time.monotonic()
        self.config = 0
        self.skipped = 0
        self.rates: dict[str, float] = {}  # inference: offered requests per second
        self.results: list[dict[str, Any]] = []

    def over_budget(self) -> bool:
        return time.monotonic() - self.began > self.args.budget_s

    def measure(self, phase: str, jobs: list[Job], capacity: bool = False) -> list[dict[str, Any]]:
        """Run `jobs` together once; one CSV row per job. `capacity`: an inference job runs closed-loop (to find
        the rate it can serve alone) instead of at its offered rate."""
        a = self.args
        if self.over_budget():
            self.skipped += 1
            return []
        self.config += 1
        duration = a.warmup_s + a.windows * a.window_s
        t0 = time.monotonic() + 0.2
        for job in jobs:
            rate = None if capacity or job.kind != "inference" else self.rates.get(job.name)
            job.send({"cmd": "run", "t0": t0, "duration": duration, "rate": rate})
        with UtilSampler(self.nvml if len(jobs) == 1 else None) as util:
            replies = [job.read(duration + REPLY_SLACK_S) for job in jobs]
        rows = []
        for job, reply in zip(jobs, replies, strict=True):
            partner = next((j for j in jobs if j is not job), None)
            row: dict[str, Any] = {
                "phase": phase, "config": self.config, "mode": "pair" if partner else
                ("capacity" if capacity and job.kind == "inference" else "isolated"), "job": job.name,
                "kind": job.kind, "share": job.share, "partner": partner.name if partner else "",
                "partner_share": partner.share if partner else "", "error": reply.get("error", "")}
            if not row["error"]:
                ends = reply["ends"]
                steps = window_rates(ends, t0 + a.warmup_s, a.window_s, a.windows)
                row["windows"] = len(steps)
                if steps:
                    row["steps_per_s"] = round(statistics.median(steps), 4)
                    row["items_per_s"] = round(row["steps_per_s"] * job.items, 3)
                if reply["arrivals"]:
                    timed = [(s, e, r) for s, e, r in zip(reply["starts"], ends, reply["arrivals"], strict=True)
                             if r >= t0 + a.warmup_s]
                    if timed:
                        lat = [(e - r) * 1000 for _, e, r in timed]
                        row["p50_ms"] = round(percentile(lat, 50), 3)
                        row["p99_ms"] = round(percentile(lat, 99), 3)
                        row["service_ms"] = round(statistics.median((e - s) * 1000 for s, e, _ in timed), 3)
                        row["offered_rps"] = self.rates.get(job.name)
                if not steps and not reply["arrivals"]:
                    row["error"] = "no step ended inside a window: make --window-s longer"
            if len(jobs) == 1:
                row["util_gpu"], row["util_mem"] = util.means()
            self.writer.writerow(row)
            rows.append(row)
        self.csv_file.flush()
        self.results.extend(rows)
        return rows


def gpu_facts() -> tuple[Any, dict[str, Any]]:
    """NVML's handle of GPU 0 (or None) and what the data must be recorded with: model, driver, memory, clocks."""
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no NVML (a CPU run): recorded as such
        return None, {"nvml": f"unavailable: {exc}"}
    h = nv.nvmlDeviceGetHandleByIndex(0)

    def get(fn: str, *args: Any) -> Any:
        try:
            value = getattr(nv, fn)(*args)
        except Exception as exc:  # noqa: BLE001 - a field this board or driver does not report
            return f"n/a ({exc})"
        return value.decode() if isinstance(value, bytes) else value

    facts = {
        "gpu": get("nvmlDeviceGetName", h), "driver": get("nvmlSystemGetDriverVersion"),
        "cuda_driver": get("nvmlSystemGetCudaDriverVersion"),
        "memory_mib": int(nv.nvmlDeviceGetMemoryInfo(h).total) // 2**20,
        "sm_clock_mhz": get("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM),
        "sm_clock_max_mhz": get("nvmlDeviceGetMaxClockInfo", h, nv.NVML_CLOCK_SM),
        "mem_clock_mhz": get("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM),
        "power_limit_w": power / 1000 if isinstance(power := get("nvmlDeviceGetPowerManagementLimit", h), int)
        else power,  # NVML answers in milliwatts
        "compute_mode": get("nvmlDeviceGetComputeMode", h),
        "mig_mode": get("nvmlDeviceGetMigMode", h),
    }
    return (nv, h), facts


def sm_clock(nvml: Any) -> Any:
    if nvml is None:
        return None
    nv, h = nvml
    try:
        return nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
    except nv.NVMLError:
        return None


def run(args: argparse.Namespace) -> int:
    from scheduler.live.node.mps import MpsConfig, MpsDaemon, MpsError

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = args.workloads.split(",")
    shares = sorted({int(s) for s in args.shares.split(",")})
    if any(100 - s not in shares for s in shares):
        raise SystemExit(f"--shares {args.shares}: each share needs its complement (a pair splits the GPU s/100-s)")
    nvml, facts = gpu_facts()
    meta: dict[str, Any] = {
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]), **facts,
        "settings": {k: v for k, v in vars(args).items() if k not in ("worker",)},
    }
    mem_gb = facts.get("memory_mib", 0) / 1024 or 80.0
    log = (out / "jobs.log").open("w")
    csv_file = (out / "colocation.csv").open("w", newline="")
    writer = csv.DictWriter(csv_file, fieldnames=CSV_FIELDS)
    writer.writeheader()
    runner = Runner(args, writer, csv_file, nvml)
    base_env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def say(msg: str) -> None:
        print(f"[{time.monotonic() - runner.began:6.1f} s] {msg}", flush=True)

    # Phase 1: time-sliced (no MPS). Capacity and the offered rates of the inference services come from here.
    say(f"time-sliced: starting {len(names)} jobs")
    plain = start_jobs([(n, 100) for n in names], args, base_env, log, mem_gb)
    live = [j for j in plain.values() if not j.error]
    meta["jobs"] = {j.name: j.info for j in live}
    for job in live:
        if job.kind == "inference":
            rows = runner.measure("timeslice", [job], capacity=True)
            if rows and rows[0].get("steps_per_s"):
                runner.rates[job.name] = round(args.load * rows[0]["steps_per_s"], 2)
        runner.measure("timeslice", [job])
    meta["sm_clock_after_isolated_mhz"] = sm_clock(nvml)
    say("time-sliced: isolated done; pairs")
    for a, b in itertools.combinations(live, 2):
        runner.measure("timeslice", [a, b])
    for job in plain.values():
        job.close()

    # Phase 2: MPS at each share, pairs split s / 100 - s.
    control = shutil.which(args.mps_control) if args.mps_control != "none" else None
    meta["mps_control"] = control
    if control is None:
        meta["mps"] = f"not run: no {args.mps_control} on PATH"
        say(meta["mps"])
    else:
        folder = Path(tempfile.mkdtemp(prefix="corral-mps-"))  # short: the daemon's socket path has a length limit
        config = MpsConfig(control, str(folder / "pipe"), str(folder / "log"))
        daemon = MpsDaemon(config)
        try:
            daemon.start()
            meta["mps"] = "daemon started"
        except MpsError as exc:
            meta["mps"] = f"daemon did not start: {exc}"
            say(meta["mps"])
        if meta["mps"] == "daemon started":
            try:
                say(f"MPS: starting {len(names) * len(shares)} jobs (shares {shares})")
                env = {**base_env, **config.client_env()}
                mps_jobs = start_jobs([(n, s) for n in names for s in shares], args, env, log, mem_gb)
                ok = {k: j for k, j in mps_jobs.items() if not j.error}
                meta["mps_start_errors"] = {f"{k[0]}@{k[1]}": j.error for k, j in mps_jobs.items() if j.error}
                for s in shares:
                    for n in names:
                        if (n, s) in ok:
                            runner.measure("mps", [ok[(n, s)]])
                say("MPS: isolated done; pairs")
                # 50/50 first, then the uneven splits: the most useful data first if the budget runs out.
                for s in sorted((s for s in shares if s <= 50), key=lambda s: -s):
                    for a, b in itertools.combinations(names, 2):
                        for sa, sb in {(s, 100 - s), (100 - s, s)}:
                            if (a, sa) in ok and (b, sb) in ok:
                                runner.measure("mps", [ok[(a, sa)], ok[(b, sb)]])
                for job in mps_jobs.values():
                    job.close()
            finally:
                try:
                    daemon.stop()
                except MpsError as exc:
                    meta["mps_stop"] = str(exc)
                meta["mps_log"] = _tail(folder / "log" / "control.log")
                shutil.rmtree(folder, ignore_errors=True)
    meta["configs_measured"] = runner.config
    meta["configs_skipped_over_budget"] = runner.skipped
    meta["elapsed_s"] = round(time.monotonic() - runner.began, 1)
    meta["sm_clock_end_mhz"] = sm_clock(nvml)
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    csv_file.close()
    log.close()
    print_summary(runner.results, meta)
    return 0


def _tail(path: Path, lines: int = 20) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def print_summary(rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Each job alone, then its slowdown beside each partner (isolated time-sliced rate / rate in the pair)."""
    from rich.console import Console
    from rich.table import Table

    alone = {r["job"]: r for r in rows if r["phase"] == "timeslice" and r["mode"] == "isolated" and not r["error"]}
    console = Console(width=160)
    console.print(f"{meta.get('gpu')} driver {meta.get('driver')}, {meta.get('date_utc')}: "
                  f"{meta['configs_measured']} configurations measured, {meta['configs_skipped_over_budget']} skipped "
                  f"(budget); MPS: {meta.get('mps')}")
    t = Table("job", "kind", "alone items/s", "p50 / p99 ms", "util SM/mem %", "MPS 25/50/75 alone (x of full)",
              title="Alone")
    for name, r in alone.items():
        at = [next((x for x in rows if x["phase"] == "mps" and x["mode"] == "isolated" and x["job"] == name
                    and x["share"] == s and x.get("steps_per_s")), None) for s in (25, 50, 75)]
        frac = " / ".join(f"{x['steps_per_s'] / r['steps_per_s']:.2f}" if x and r.get("steps_per_s") else "-"
                          for x in at)
        lat = f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f}" if r.get("p50_ms") is not None else ""
        t.add_row(name, r["kind"], f"{r.get('items_per_s', 0):.1f}", lat, f"{r.get('util_gpu')}/{r.get('util_mem')}",
                  frac)
    console.print(t)
    pairs = Table("job", "partner", "time-sliced", "MPS 50/50", "MPS 25 (partner 75)", "MPS 75 (partner 25)",
                  title="Slowdown in a pair (alone, time-sliced / in the pair; inference: median service time ratio)")
    for name, r in alone.items():
        for partner in alone:
            if partner == name:
                continue
            cells = []
            for phase, share in (("timeslice", 100), ("mps", 50), ("mps", 25), ("mps", 75)):
                x = next((x for x in rows if x["phase"] == phase and x["mode"] == "pair" and x["job"] == name
                          and x["partner"] == partner and x["share"] == share and not x["error"]), None)
                cells.append(f"{slowdown(r, x):.2f}" if x and slowdown(r, x) else "-")
            pairs.add_row(name, partner, *cells)
    console.print(pairs)


def slowdown(alone: dict[str, Any], shared: dict[str, Any]) -> float | None:
    """How many times slower a job ran shared than alone: steps per second for training, median service time for an
    inference service (its offered rate is fixed, so its throughput says nothing until it saturates)."""
    if alone["kind"] == "inference":
        a, s = alone.get("service_ms"), shared.get("service_ms")
        return s / a if a and s else None
    a, s = alone.get("steps_per_s"), shared.get("steps_per_s")
    return a / s if a and s else None


def main(argv: list[str] | None = None) -> int:
    from benchmarks.gpu_workloads import NAMES

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="out/gpu_colocation", help="folder for colocation.csv, meta.json and jobs.log")
    p.add_argument("--workloads", default=",".join(NAMES), help=f"comma-separated, of: {', '.join(NAMES)}")
    p.add_argument("--shares", default="25,50,75", help="MPS thread percentages (each with its complement)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", choices=("full", "tiny"), default="full")
    p.add_argument("--warmup-s", type=float, default=0.5, help="seconds each configuration runs before timing")
    p.add_argument("--window-s", type=float, default=0.5, help="one timed window")
    p.add_argument("--windows", type=int, default=3, help="timed windows per configuration (the median is kept)")
    p.add_argument("--load", type=float, default=0.5, help="an inference service's offered rate, as a fraction of "
                   "the rate it served alone")
    p.add_argument("--budget-s", type=float, default=1e9, help="stop starting configurations after this many "
                   "seconds (the CSV keeps what was measured; meta.json counts what was skipped)")
    p.add_argument("--mps-control", default="nvidia-cuda-mps-control", help="the MPS control program ('none': "
                   "time-sliced only)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.device, args.size)
    unknown = set(args.workloads.split(",")) - set(NAMES)
    if unknown:
        p.error(f"--workloads: unknown {', '.join(sorted(unknown))} (known: {', '.join(NAMES)})")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())

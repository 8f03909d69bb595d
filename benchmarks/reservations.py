"""Large gangs on a busy cluster: reservations with EASY backfill against the same policy without them (issue 28's
reservation target).

Workload: synthetic windows (seeds from 100 on, which training never draws) of `--window` jobs whose sizes put 10% of
the jobs at 16 or 32 GPUs (the rest 1 to 8), arrivals rescaled to `--load` on `--cluster`. Durations are the
generator's lognormal with median 15 minutes, but with log-sd `--sigma` (1; the generator's default is 2, Philly's
2.5) and independent of size (`size_duration_exponent` 0; the generator's default makes a 32-GPU job 5.7 times as
long): with Philly's tail and size scaling, a few multi-day 32-GPU jobs decide every figure, reservations or not. Every
job gets a time limit of `--limit-factor` times its isolated duration (the traces have none; the factor is printed),
which is what backfill needs to know a job ends before a reservation starts. Each policy runs each window twice,
identical but for the reservation rule (`scheduler.core.reservations`: a job that waited `--after` seconds, or one of
at least `--share` of the GPUs if given, holds one).

Printed per policy, as the mean over windows with a 95% t interval: the p99 wait (submission to first start) of the
large jobs without and with reservations and their ratio (target: at least 2), the average JCT with over without
(target: at most 1.05), the jobs that timed out in each run, and the jobs backfilled onto reserved GPUs. And where the
JCT cost comes from: the small jobs' (under 16 GPUs) average JCT with over without, and the GPU-time free GPUs stood
idle, held for a reservation, as a share of the run's GPU-time (its makespan times the GPUs).

    python benchmarks/reservations.py [--policies fifo,...] [--load 1.3] [--windows 5] [--window 1000]
        [--cluster dgx-a100:16] [--after 7200] [--share F] [--sigma 1] [--limit-factor 1.2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.evaluate import interval_text
from policies import available, make_policy
from scheduler.core.model import JobPhase, parse_cluster
from scheduler.core.reservations import ReservationFrame, ReservationRule, with_time_limits
from scheduler.core.simulator import SimResult, Simulator
from scheduler.core.traces import scale_to_load, synthetic
from scheduler.core.traces.windows import offered_load

SIZES = {1: 0.6, 2: 0.12, 4: 0.1, 8: 0.08, 16: 0.06, 32: 0.04}  # 10% of jobs at 16 GPUs or more
LARGE = 16


def large_p99_wait(result: SimResult) -> float:
    waits = [j.first_start_s - j.spec.submit_s for j in result.jobs
             if j.spec.num_gpus >= LARGE and j.first_start_s is not None]
    return float(np.percentile(waits, 99)) if waits else math.nan


def small_jct(result: SimResult) -> float:
    return float(np.mean([j.end_s - j.spec.submit_s for j in result.jobs
                          if j.spec.num_gpus < LARGE and j.end_s is not None]))


def timed_out(result: SimResult) -> int:
    return sum(j.state is JobPhase.TIMED_OUT for j in result.jobs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", help="comma-separated (default: every heuristic)")
    ap.add_argument("--load", type=float, default=1.3)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--window", type=int, default=1000, help="jobs per window")
    ap.add_argument("--cluster", default="dgx-a100:16")
    ap.add_argument("--share", type=float, default=None, help="reserve for jobs of at least this share of the GPUs")
    ap.add_argument("--after", type=float, default=7200.0, help="reserve for jobs that waited this many seconds")
    ap.add_argument("--sigma", type=float, default=1.0, help="log-sd of the durations")
    ap.add_argument("--limit-factor", type=float, default=1.2, help="time limit = this x the isolated duration")
    ap.add_argument("--json", type=Path, help="write each window's figures here")
    args = ap.parse_args()
    cluster = parse_cluster(args.cluster)
    policies = args.policies.split(",") if args.policies else [p for p in available() if ":" not in p]
    rule = ReservationRule(args.after, args.share)
    windows = []
    for k in range(args.windows):
        jobs = synthetic(args.window, seed=100 + k, sizes=SIZES, duration_sigma=args.sigma,
                         size_duration_exponent=0.0).jobs
        jobs = with_time_limits(scale_to_load(jobs, cluster.num_gpus, args.load), args.limit_factor)
        windows.append(jobs)
    large = np.mean([sum(j.num_gpus >= LARGE for j in w) / len(w) for w in windows])
    print(f"{args.windows} synthetic windows of {args.window} jobs ({large:.1%} of 16 GPUs or more) at load "
          f"{np.mean([offered_load(w, cluster.num_gpus) for w in windows]):.2f} on {args.cluster} "
          f"({cluster.num_gpus} GPUs), duration log-sd {args.sigma:g}; time limits {args.limit_factor:g}x the isolated "
          f"duration; reservations after {args.after:g} s of waiting"
          + (f" or for jobs of {args.share:.0%} of the GPUs or more" if args.share else ""))
    print(f"{'policy':<18} {'large p99 wait, without':>24} {'with':>24} {'without/with':>22} {'JCT with/without':>22} "
          f"{'timed out w/o, with':>20} {'backfilled':>11} {'small JCT with/without':>22} {'held idle':>16}  met")
    rows: list[dict[str, object]] = []
    every = True
    for name in policies:
        t0 = time.perf_counter()
        p99_off, p99_on, gain, jct, out_off, out_on, filled = [], [], [], [], [], [], []
        small, idle = [], []
        for k, jobs in enumerate(windows):
            off = Simulator(cluster, jobs, make_policy(name)).run()
            sim = Simulator(cluster, jobs, make_policy(name), reservations=rule)
            on = sim.run()
            frame = sim.policy
            a, b = large_p99_wait(off), large_p99_wait(on)
            p99_off.append(a)
            p99_on.append(b)
            gain.append(a / b if b > 0 else math.inf)
            jct.append(on.metrics["avg_jct_s"] / off.metrics["avg_jct_s"])
            out_off.append(timed_out(off))
            out_on.append(timed_out(on))
            filled.append(frame.backfilled if isinstance(frame, ReservationFrame) else 0)
            small.append(small_jct(on) / small_jct(off))
            held = frame.held_gpu_s if isinstance(frame, ReservationFrame) else 0.0
            idle.append(held / (on.metrics["makespan_s"] * cluster.num_gpus))
            rows.append({"policy": name, "window": k, "large_p99_wait_without_s": a, "large_p99_wait_with_s": b,
                         "avg_jct_without_s": off.metrics["avg_jct_s"], "avg_jct_with_s": on.metrics["avg_jct_s"],
                         "timed_out_without": out_off[-1], "timed_out_with": out_on[-1], "backfilled": filled[-1],
                         "small_jct_ratio": small[-1], "held_idle_share": idle[-1]})
        finite = [g for g in gain if math.isfinite(g)]
        met = float(np.mean(p99_off)) >= 2 * float(np.mean(p99_on)) and float(np.mean(jct)) <= 1.05
        every &= met
        print(f"{name:<18} {interval_text(p99_off, '.0f'):>24} {interval_text(p99_on, '.0f'):>24} "
              f"{interval_text(finite, '.2f'):>22} {interval_text(jct, '.3f'):>22} {np.mean(out_off):>9.1f} "
              f"{np.mean(out_on):>9.1f} {np.mean(filled):>11.1f} {interval_text(small, '.2f'):>22} "
              f"{interval_text([100 * i for i in idle], '.1f') + '%':>16}  "
              f"{'yes' if met else 'NO'}  [{time.perf_counter() - t0:.0f} s]", flush=True)
    print("target (mean large-job p99 wait at least 2x lower, mean avg JCT within 5%): "
          + ("met by every policy" if every else "NOT met by every policy (see the rows marked NO)"))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

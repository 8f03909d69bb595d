"""High-priority jobs on a busy cluster: do they wait as if it were empty? (issue 28's priority target)

Held-out windows of the Philly dev trace (its last quarter, model seeds training never draws) sized to a load, on the
window's cluster. In each window a seeded draw puts `--high` of the jobs (10%) at priority 10; the rest keep 0. Each
policy runs the window three ways:

- **mix**: every job, with the priorities (the rules of `scheduler.core.priorities`);
- **alone**: only the high-priority jobs, on the same cluster otherwise empty (the target's reference);
- **flat**: every job, all at priority 0 (what the high jobs got before priorities).

Printed per policy, as the mean over windows with a 95% t interval: the high jobs' average wait (submission to first
start) in each run, the ratio mix / alone per window, the difference in seconds, and the whole window's average JCT
with priorities over without (what the low jobs pay, in JCT; no target). A window whose high jobs wait under a second
alone has no ratio (one of near-zeros says nothing); how many is printed. The target is met when the high jobs' mean
wait over the windows in the mix is at most 1.10 times their mean wait alone, plus one second (the floor that keeps
a zero alone from demanding an exact zero).

    python benchmarks/priorities.py [--policies fifo,tiresias,...] [--load 1.3] [--windows 5] [--window 500]
        [--high 0.1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.evaluate import interval_text
from agents.scenarios import held_out
from policies import available, make_policy
from scheduler.core.simulator import Simulator
from scheduler.core.traces.generator import HIGH_PRIORITY

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly_day60.csv"
MIN_ALONE_WAIT_S = 1.0  # below this, a window's ratio is left out (its difference still counts)


def waits(result: object, names: set[str]) -> list[float]:
    return [j.first_start_s - j.spec.submit_s for j in result.jobs  # type: ignore[attr-defined]
            if j.spec.name in names and j.first_start_s is not None]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", help="comma-separated (default: every heuristic and rl:default)")
    ap.add_argument("--load", type=float, default=1.3)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--window", type=int, default=500, help="jobs per window")
    ap.add_argument("--high", type=float, default=0.1, help="share of jobs at high priority")
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--json", type=Path, help="write each window's figures here")
    args = ap.parse_args()
    if not args.trace.is_file():
        print(f"{args.trace}: not found (the dev traces live in ../shared/traces beside the project)")
        return 1
    policies = args.policies.split(",") if args.policies else [p for p in available() if ":" not in p] + [
        "rl:default"]
    scenarios = held_out([str(args.trace)], ["pcie-v100"], args.window, (args.load, args.load), args.windows)
    windows = []
    for k, sc in enumerate(scenarios):
        cluster, jobs = sc.build()
        draw = np.random.default_rng(1000 + k).random(len(jobs)) < args.high
        high = [replace(j, priority=HIGH_PRIORITY) if d else j for j, d in zip(jobs, draw, strict=True)]
        windows.append((cluster, jobs, high, {j.name for j, d in zip(jobs, draw, strict=True) if d}))
    print(f"{args.trace.name}: {args.windows} held-out windows of {args.window} jobs at load {args.load}, "
          f"{args.high:.0%} of jobs at priority {HIGH_PRIORITY}, on {windows[0][0].name} "
          f"({windows[0][0].num_gpus} GPUs)")
    header = (f"{'policy':<18} {'high wait mix s':>26} {'alone s':>24} {'flat s':>24} {'mix/alone':>24} "
              f"{'mix-alone s':>24} {'JCT prio/flat':>24}  met")
    print(header)
    rows: list[dict[str, object]] = []
    ok_all = True
    for name in policies:
        t0 = time.perf_counter()
        mix_w, alone_w, flat_w, ratio, diff, jct = [], [], [], [], [], []
        for k, (cluster, flat_jobs, jobs, names) in enumerate(windows):
            mix = Simulator(cluster, jobs, make_policy(name)).run()
            alone = Simulator(cluster, [j for j in jobs if j.name in names], make_policy(name)).run()
            flat = Simulator(cluster, flat_jobs, make_policy(name)).run()
            m, a, f = (float(np.mean(waits(r, names))) for r in (mix, alone, flat))
            mix_w.append(m)
            alone_w.append(a)
            flat_w.append(f)
            diff.append(m - a)
            if a >= MIN_ALONE_WAIT_S:
                ratio.append(m / a)
            jct.append(mix.metrics["avg_jct_s"] / flat.metrics["avg_jct_s"])
            rows.append({"policy": name, "window": k, "high_jobs": len(names), "high_wait_mix_s": m,
                         "high_wait_alone_s": a, "high_wait_flat_s": f, "avg_jct_s": mix.metrics["avg_jct_s"],
                         "avg_jct_flat_s": flat.metrics["avg_jct_s"],
                         "preemptions": mix.metrics.get("preemptions")})
        met = float(np.mean(mix_w)) <= 1.10 * float(np.mean(alone_w)) + MIN_ALONE_WAIT_S
        ok_all &= met
        left = args.windows - len(ratio)
        print(f"{name:<18} {interval_text(mix_w, '.1f'):>26} {interval_text(alone_w, '.1f'):>24} "
              f"{interval_text(flat_w, '.1f'):>24} {interval_text(ratio):>24} {interval_text(diff, '.1f'):>24} "
              f"{interval_text(jct):>24}  {'yes' if met else 'NO'}"
              + (f"  ({left} window(s) under {MIN_ALONE_WAIT_S:g} s alone: difference only)" if left else "")
              + f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
    print(f"target (high jobs' average wait within 10% of the empty cluster's, every policy): "
          f"{'met' if ok_all else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

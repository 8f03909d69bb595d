"""Policy comparison on the real traces over several seeds (the seed draws each job's model).

`python benchmarks/policies.py [--seeds 3]` prints, per trace and cluster, each policy's average JCT for every seed,
their mean, and the mean queueing delay, contention slowdown, p99 JCT and SLO-violation share. One seed is one
`corral simulate` run; differences smaller than the spread across seeds are noise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from policies import make_policy
from scheduler.core.model import parse_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.traces import load_trace

TRACES = ROOT.parent / "shared" / "traces"
CASES = [
    ("philly_day60.csv", "pcie-v100:48"),
    ("philly_day60.csv", "dgx-a100:32"),
    ("alibaba_openb_before_day130.csv", "pcie-v100:4"),
    ("alibaba_openb_before_day130.csv", "pcie-v100:6"),
]
POLICIES = "fifo,fifo-backfill,consolidate,gandiva,tiresias,contention-greedy"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--policies", default=POLICIES)
    args = parser.parse_args()
    for trace_name, cluster_spec in CASES:
        path = TRACES / trace_name
        if not path.exists():
            print(f"{trace_name}: skipped, {path} is absent")
            continue
        cluster = parse_cluster(cluster_spec)
        traces = [load_trace(str(path), seed=s) for s in range(args.seeds)]
        print(f"\n{trace_name} on {cluster_spec} ({cluster.num_gpus} GPUs), contention on, seeds 0..{args.seeds - 1}")
        print(f"{'policy':>18}  {'avg JCT per seed (h)':<26} {'mean':>7} {'queue h':>8} {'contention':>10}"
              f" {'p99 h':>7} {'SLO miss':>8}")
        for name in args.policies.split(","):
            rows = [Simulator(cluster, t.jobs, make_policy(name, seed=i)).run().metrics for i, t in enumerate(traces)]
            jct = np.array([m["avg_jct_s"] for m in rows]) / 3600
            mean = {k: float(np.mean([m[k] for m in rows]))
                    for k in ("avg_queue_s", "avg_contention_slowdown", "p99_jct_s", "slo_violation_frac")}
            print(f"{name:>18}  {' '.join(f'{x:7.2f}' for x in jct):<26} {jct.mean():7.2f}"
                  f" {mean['avg_queue_s'] / 3600:8.2f} {mean['avg_contention_slowdown']:10.3f}"
                  f" {mean['p99_jct_s'] / 3600:7.1f} {mean['slo_violation_frac']:8.1%}")


if __name__ == "__main__":
    main()

"""Which heuristic teaches the agent in which regime: tiresias, gittins and tiresias with a finer first queue, on
TRAINING windows only (first three quarters of each dev trace, model seeds 0-3; synthetic seeds training draws), 4
windows of 300 jobs per workload and load. Prints each policy's geometric-mean avg JCT ratio to the first (tiresias);
`agents.imitation.BEST` was read off its output.

    python benchmarks/teachers.py [--loads 0.8,1.3,2.2] [--windows 4] [--window 300] [--nodes 3,6]
                                  [--workloads synthetic:multinode,alibaba_openb_before_day130]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.scenarios import draw
from policies import make_policy
from scheduler.core.simulator import Simulator

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
WORKLOADS = {  # workload -> the preset it is evaluated on (benchmarks/decision_quality.py)
    str(TRACES / "alibaba_openb_before_day130.csv"): "pcie-t4",
    str(TRACES / "philly_day60.csv"): "pcie-v100",
    "synthetic": "dgx-a100",
    "synthetic:short": "dgx-a100",
    "synthetic:long": "dgx-a100",
    "synthetic:fractional": "dgx-a100",
    "synthetic:multinode": "dgx-a100",
    "synthetic:gangs": "hgx-h100@fat-tree-3:1",  # and the mix's other clusters (agents.scenarios.MIX_PRESETS)
}
POLICIES = ("tiresias", "gittins", "tiresias:thresholds=300,3600,36000")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default="0.8,1.3,2.2")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--window", type=int, default=300, help="jobs per window")
    ap.add_argument("--nodes", default="3,6", help="synthetic cluster sizes drawn from, LO,HI")
    ap.add_argument("--workloads", default="", help="comma-separated subset of the workloads (default: all)")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated; the first is the baseline")
    args = ap.parse_args()
    policies = [p for p in re.split(r",(?=[a-z])", args.policies) if p]  # a comma inside thresholds=300,3600 stays
    nodes = tuple(int(x) for x in args.nodes.split(","))
    only = {w for w in args.workloads.split(",") if w}
    for workload, preset in WORKLOADS.items():
        if only and workload not in only and Path(workload).stem not in only:
            continue
        if not workload.startswith("synthetic") and not Path(workload).is_file():
            print(f"{workload}: not found (needs ../shared/traces next to the project); skipped")
            continue
        for load in (float(x) for x in args.loads.split(",")):
            rng = np.random.default_rng(7)
            res: dict[str, list[float]] = {p: [] for p in policies}
            for _ in range(args.windows):
                cluster, jobs = draw(rng, [workload], [preset], (nodes[0], nodes[-1]), args.window, (load, load),
                                       "train").build()
                for p in policies:
                    res[p].append(Simulator(cluster, jobs, make_policy(p)).run().metrics["avg_jct_s"])
            base = np.array(res[policies[0]])
            ratios = {p: round(float(np.exp(np.mean(np.log(np.array(v) / base)))), 3) for p, v in res.items()}
            print(f"{Path(workload).stem if not workload.startswith('synthetic') else workload} {load}: {ratios}",
                  flush=True)


if __name__ == "__main__":
    main()

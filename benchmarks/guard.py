"""The guard of learned policies (issue 50) on TRAINING windows, where its settings may be tuned: `guarded:rl:default`
under several settings against `rl:default` alone, with tiresias and gittins for reference.

    python benchmarks/guard.py [--loads 1.3,1.7,2.2] [--seeds 4] [--window 500]

Each case is a window of the first three quarters of the Alibaba trace (what `corral train` draws from; the held-out
quarter is `benchmarks/decision_quality.py`'s), brought to each load on PCIe T4 servers. A row is one case: each
guard setting's average JCT over the agent's alone and its switches, and tiresias' and gittins' over the agent's (a
value below 1 is a case the agent loses, which the guard should catch). Prints a table; a few minutes per case on one
core (the guard replays each window under five policies).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the project's packages before this folder's scripts (benchmarks/policies.py)

from agents.evaluate import Case, build_cases
from agents.scenarios import MODEL_SEEDS
from policies import make_policy
from policies.guarded import Guarded
from scheduler.core.decisions import Policy
from scheduler.core.guard import GuardSettings
from scheduler.core.simulator import Simulator

ALIBABA = ROOT / "../shared/traces/alibaba_openb_before_day130.csv"
SETTINGS = {
    "default": GuardSettings(),
    "strict (1.05, alpha 0.01)": GuardSettings(threshold=1.05, alpha=0.01),
    "more windows (8 of 16)": GuardSettings(min_windows=8, keep=16),
}


def avg_jct(case: Case, policy: Policy) -> float:
    return float(Simulator(case.cluster, case.jobs, policy).run().jct().mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default="1.3,1.7,2.2")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--window", type=int, default=500)
    a = ap.parse_args()
    if not ALIBABA.is_file():
        raise SystemExit(f"{ALIBABA.resolve()} is absent (the shared traces are not here)")
    table = Table(title="guarded:rl:default on training windows of Alibaba: avg JCT over rl:default's (switches)")
    for col in ("load", "case", *SETTINGS, "tiresias", "gittins"):
        table.add_column(col, justify="right")
    console = Console()
    for load in (float(x) for x in a.loads.split(",")):
        cases = build_cases([str(ALIBABA)], "pcie-t4:1", a.seeds, window_size=a.window, part="train", load=load,
                            first_seed=MODEL_SEEDS)
        for case in cases:
            alone = avg_jct(case, make_policy("rl:default"))
            cells = []
            for settings in SETTINGS.values():
                guarded = Guarded("rl:default", settings=settings)
                cells.append(f"{avg_jct(case, guarded) / alone:.3f} ({sum(v.switched for v in guarded.verdicts)})")
            ref = [f"{avg_jct(case, make_policy(p)) / alone:.3f}" for p in ("tiresias", "gittins")]
            table.add_row(f"{load:g}", str(case.seed), *cells, *ref)
            console.print(f"load {load:g} case {case.seed}: " + ", ".join(cells + ref))
    console.print(table)


if __name__ == "__main__":
    main()

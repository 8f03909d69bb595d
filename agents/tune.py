"""`corral tune`: pick Tiresias' queue thresholds on training windows, so the baselines a learned policy must beat are
tuned too, not left at their defaults.

A small grid (`DEFAULT_GRID`: geometric ladders of ratio 10 starting at 10 to 3600 GPU-seconds, two to four thresholds,
and Tiresias' default) is run on the same scenarios: windows drawn with `agents.scenarios.draw(part="train")`, so
trace windows come from the first three quarters only (`scheduler.core.traces.HOLDOUT_FROM`) and never from the hold-out
that evaluations report on, at offered loads drawn from 0.8-2.2. Each candidate's average JCT is compared with
default `tiresias` case by case (`agents.evaluate.compare`: geometric mean of the per-case ratios with a 95% Student's t
interval), and the candidate with the lowest geometric-mean ratio is chosen (the default when nothing beats it).
The result is a policy name, e.g. `tiresias:thresholds=60,600,6000`. Runs are sequential (two-core machines).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.evaluate import compare
from agents.scenarios import SYNTHETIC, Scenario, draw
from policies import make_policy
from policies.tiresias import DEFAULT_THRESHOLDS, format_thresholds
from scheduler.core.simulator import Simulator

BASELINE = "tiresias"
# Geometric ladders (ratio 10) from 10 to 3600 GPU-seconds with 2-4 thresholds, and Tiresias' default (1 and 10 GPU-h).
DEFAULT_GRID: tuple[tuple[float, ...], ...] = (
    (10.0, 100.0, 1000.0),
    (30.0, 300.0, 3000.0, 30000.0),
    (60.0, 600.0),
    (60.0, 600.0, 6000.0),
    (60.0, 600.0, 6000.0, 60000.0),
    (300.0, 3000.0, 30000.0),
    (600.0, 6000.0),
    (600.0, 6000.0, 60000.0),
    (3600.0, 36000.0, 360000.0),
    DEFAULT_THRESHOLDS,
)
LOAD = (0.8, 2.2)
NODES = (4, 8)  # synthetic clusters' node range (trace windows are sized to their load)
SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
DEV_TRACES = ("philly_day60.csv", "alibaba_openb_before_day130.csv")


def default_workloads() -> list[str]:
    """Synthetic, plus the dev traces where they sit beside the project (`../shared/traces`)."""
    return [SYNTHETIC] + [str(SHARED_TRACES / name) for name in DEV_TRACES if (SHARED_TRACES / name).is_file()]


def preset_for(workload: str) -> str:
    """Alibaba's windows ask for ~10 GPUs: 4-GPU T4 nodes let a cluster land near its load (as the benchmarks do);
    Philly runs on V100 servers, synthetic workloads on DGX A100s."""
    if workload == SYNTHETIC:
        return "dgx-a100"
    return "pcie-t4" if "alibaba" in Path(workload).name.lower() else "pcie-v100"


def policy_name(thresholds: Sequence[float]) -> str:
    if tuple(thresholds) == tuple(DEFAULT_THRESHOLDS):
        return BASELINE
    return f"{BASELINE}:thresholds={format_thresholds(thresholds)}"


def training_scenarios(workloads: Sequence[str], count: int, seed: int = 0, window: int = 500,
                       load: tuple[float, float] = LOAD) -> list[Scenario]:
    """`count` scenarios, workloads in turn, from the training part of each trace (`part="train"`)."""
    rng = np.random.default_rng(seed)
    return [draw(rng, [w], [preset_for(w)], NODES, window, load, part="train")
            for w in (workloads[k % len(workloads)] for k in range(count))]


@dataclass(frozen=True)
class TuneResult:
    chosen: str
    candidates: list[dict[str, Any]]  # name, thresholds, and compare()'s result against the baseline
    scenarios: list[Scenario] = field(default_factory=list)


def tune(scenarios: Sequence[Scenario], grid: Sequence[Sequence[float]] = DEFAULT_GRID, contention: bool = True,
         progress: Callable[[], None] | None = None) -> TuneResult:
    """Every candidate of `grid` (and the baseline) on every scenario; the lowest geometric-mean avg JCT ratio wins.
    A fresh policy per run, seeded like `corral evaluate` does."""
    if not scenarios:
        raise ValueError("tune needs at least one scenario")
    names = list(dict.fromkeys([BASELINE, *(policy_name(t) for t in grid)]))
    jct: dict[str, list[float]] = {n: [] for n in names}
    for sc in scenarios:
        cluster, jobs = sc.build()
        for name in names:
            sim = Simulator(cluster, jobs, make_policy(name, seed=sc.seed), contention=contention)
            jct[name].append(float(sim.run().metrics["avg_jct_s"]))
            if progress is not None:
                progress()
    base = jct[BASELINE]
    rows = []
    by_name = {policy_name(t): tuple(t) for t in grid}
    by_name.setdefault(BASELINE, tuple(DEFAULT_THRESHOLDS))
    for name in names:
        rows.append({"name": name, "thresholds": list(by_name[name]),
                     **compare(jct[name], base, "ratio"), "avg_jct_s": float(np.mean(jct[name]))})
    # Lowest estimate wins; on a tie the default (no change) is kept, then the one listed first.
    best = min(rows, key=lambda r: (r["estimate"], r["name"] != BASELINE))
    return TuneResult(best["name"], rows, list(scenarios))

"""`corral evaluate`: every policy on the same cases, over several seeds, as mean and 95% confidence interval.

A case is a trace (or a window of one) with one model assignment on one cluster. Seed `s` draws the trace's model
assignment with `s` and, when `window` is set, the window's start from `default_rng(s)` within the chosen part of
the trace (`test`, the hold-out no training run draws from, by default). With `load` set, the cluster keeps its
preset and gets the node count that puts the case's offered load nearest `load` (`scheduler.traces.offered_load`).
Every policy runs on exactly the same cases, so their differences are paired.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from policies import make_policy
from scheduler.model import PRESETS, Cluster, JobSpec, SpecError, parse_cluster
from scheduler.simulator import Simulator
from scheduler.traces import load_trace, nodes_for_load, offered_load, window, window_starts

METRICS = ("avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "avg_slowdown",
           "avg_contention_slowdown", "gpu_util", "makespan_s", "preemptions", "slo_violation_frac",
           "jobs_completed", "jobs_rejected")


@dataclass(frozen=True)
class Case:
    trace: str
    seed: int
    start: int
    cluster: Cluster
    jobs: list[JobSpec]

    @property
    def label(self) -> str:
        return f"{Path(self.trace).stem} seed {self.seed} (jobs {self.start}+{len(self.jobs)}) on {self.cluster.name}"


def build_cases(traces: Sequence[str], cluster: str, seeds: int, window_size: int | None = None,
                part: str = "test", load: float | None = None) -> list[Case]:
    base = parse_cluster(cluster)
    if load is not None:
        preset, sep, _ = cluster.partition(":")
        if not sep or preset not in PRESETS or "," in cluster:
            raise SpecError(f"--load resizes a single-preset cluster (PRESET:NODES); got --cluster {cluster!r}")
    out = []
    for path in traces:
        for seed in range(seeds):
            jobs = load_trace(path, seed=seed).jobs
            start = 0
            if window_size is not None and window_size < len(jobs):
                lo, hi = window_starts(len(jobs), window_size, part)
                start = int(np.random.default_rng(seed).integers(lo, hi))
                jobs = window(jobs, start, window_size)
            c = base
            if load is not None:
                c = parse_cluster(f"{preset}:{nodes_for_load(jobs, PRESETS[preset].gpus_per_node, load)}")
            out.append(Case(path, seed, start, c, jobs))
    return out


def ci95(values: Sequence[float]) -> float:
    """Half-width of the 95% confidence interval of the mean (Student's t); 0 for a single value."""
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return 0.0
    return float(stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))


def evaluate(cases: Sequence[Case], policies: Sequence[str], contention: bool = True,
             progress: Callable[[], None] | None = None) -> dict[str, Any]:
    """{trace: {"cases": [...], "policies": {name: {metric: {"mean", "ci95", "values"}}}}}."""
    runs: dict[str, dict[str, list[dict]]] = {}
    info: dict[str, list[dict]] = {}
    for case in cases:
        info.setdefault(case.trace, []).append({
            "seed": case.seed, "start": case.start, "jobs": len(case.jobs), "cluster": case.cluster.name,
            "offered_load": round(offered_load(case.jobs, case.cluster.num_gpus), 3),
        })
        for name in policies:
            # A fresh policy per case: policies keep per-run memos, and a seed must not leak into the next case.
            sim = Simulator(case.cluster, case.jobs, make_policy(name, seed=case.seed), contention=contention)
            runs.setdefault(case.trace, {}).setdefault(name, []).append(sim.run().metrics)
            if progress is not None:
                progress()
    out: dict[str, Any] = {}
    for trace, by_policy in runs.items():
        out[trace] = {"cases": info[trace], "policies": {}}
        for name, metrics in by_policy.items():
            out[trace]["policies"][name] = {
                key: {"mean": float(np.mean(vals)), "ci95": ci95(vals), "values": vals}
                for key in METRICS if (vals := [float(m.get(key, 0.0)) for m in metrics])
            }
    return out


def plot(result: dict[str, Any], out: Path) -> None:
    """Average and p99 JCT per policy with 95% intervals, a panel per trace."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(result)
    fig, axes = plt.subplots(len(traces), 2, figsize=(11, 3.6 * len(traces)), squeeze=False)
    for row, trace in zip(axes, traces):
        pols = result[trace]["policies"]
        names = list(pols)
        for ax, key, title in zip(row, ("avg_jct_s", "p99_jct_s"), ("average JCT", "p99 JCT")):
            means = [pols[n][key]["mean"] / 3600 for n in names]
            errs = [pols[n][key]["ci95"] / 3600 for n in names]
            ax.bar(range(len(names)), means, yerr=errs, capsize=4, color="tab:blue", alpha=0.8)
            ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
            ax.set_ylabel("hours")
            ax.set_title(f"{Path(trace).stem}: {title} (mean, 95% CI, {len(result[trace]['cases'])} seeds)")
            ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)

"""`corral evaluate`: every policy on the same cases, over several seeds, compared with a baseline policy case by case.

A case is a trace (or a window of one) with one model assignment on one cluster. Seed `s` draws the trace's model
assignment with `s` and, when `window` is set, the window's start from `default_rng(s)` within the chosen part of
the trace (`test`, the hold-out no training run draws from, by default). With `load` set, the cluster keeps its
preset and gets the node count that puts the case's offered load nearest `load` (`scheduler.core.traces.offered_load`);
where no node count gets within 5%, arrivals are compressed or stretched as well (`scheduler.core.traces.fit_load`), and
each case says which was done.
Every policy runs on exactly the same cases, so their differences are paired.

**How policies are compared.** Cases differ a lot from one another (with `load`, even their clusters' sizes differ),
so an interval over the raw values of a metric mostly measures how the cases differ, not the policies: with 2 seeds
it gave "GPU util 28.2% ± 114.9%". What a policy changes is measured case by case against a baseline policy run on
the same case and seed:

- times, slowdowns, utilisation and makespan (`RATIO_METRICS`): the per-case ratio policy / baseline, summarised by
  its geometric mean with a 95% Student's t interval on the log ratios (n - 1 degrees of freedom, n = cases), so the
  bounds are ratios too and always positive. If a case has a 0 on either side (e.g. no queueing at all), the ratio
  is undefined and the metric falls back to the paired difference, with a note saying so.
- counts and fractions (`DIFFERENCE_METRICS`): the per-case difference policy - baseline, with a Student's t interval.

Nothing is clipped. One case gives no interval (None, with a note). The raw values are still reported per policy as
their mean and range over the cases, which is a description, not an interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from agents.scenarios import SYNTHETIC_MIXES
from policies import make_policy
from scheduler.core.model import PRESETS, Cluster, JobSpec, SpecError, parse_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.traces import (
    fit_load,
    load_trace,
    offered_load,
    parse_synthetic_spec,
    scale_to_load,
    synthetic,
    window,
    window_starts,
)

RATIO_METRICS = ("avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "avg_slowdown",
                 "avg_contention_slowdown", "gpu_util", "makespan_s")
DIFFERENCE_METRICS = ("preemptions", "slo_violation_frac", "jobs_completed", "jobs_rejected")
METRICS = RATIO_METRICS + DIFFERENCE_METRICS
FRACTIONS = ("gpu_util", "slo_violation_frac")  # at most 1; every metric is at least 0
DEFAULT_BASELINE = "tiresias"  # the best heuristic that needs no trained agent
MIN_SEEDS = 3  # fewer cases than this give intervals too wide to say much (t(0.975, 1) = 12.7)


@dataclass(frozen=True)
class Case:
    trace: str
    seed: int
    start: int
    cluster: Cluster
    jobs: list[JobSpec]
    how: str = ""  # how the case was brought to the target load, if one was asked for

    @property
    def label(self) -> str:
        return f"{Path(self.trace).stem} seed {self.seed} (jobs {self.start}+{len(self.jobs)}) on {self.cluster.name}"


def build_cases(traces: Sequence[str], cluster: str, seeds: int, window_size: int | None = None,
                part: str = "test", load: float | None = None, first_seed: int = 0) -> list[Case]:
    """`seeds` cases per trace, seeds `first_seed` .. `first_seed + seeds - 1` (a benchmark on held-out cases starts
    at `agents.scenarios.MODEL_SEEDS`, past the model assignments training draws)."""
    base = parse_cluster(cluster)
    if load is not None:
        preset, sep, _ = cluster.partition(":")
        if not sep or preset not in PRESETS or "," in cluster:
            raise SpecError(f"--load resizes a single-preset cluster (PRESET:NODES); got --cluster {cluster!r}")
    out = []
    for path in traces:
        for seed in range(first_seed, first_seed + seeds):
            jobs = load_trace(path, seed=seed).jobs
            start = 0
            if window_size is not None and window_size < len(jobs):
                lo, hi = window_starts(len(jobs), window_size, part)
                start = int(np.random.default_rng(seed).integers(lo, hi))
                jobs = window(jobs, start, window_size)
            c, how = base, ""
            if load is not None:
                fit = fit_load(jobs, PRESETS[preset].gpus_per_node, load)
                c, jobs, how = parse_cluster(f"{preset}:{fit.nodes}"), fit.jobs, fit.how
            out.append(Case(path, seed, start, c, jobs, how))
    return out


# The held-out cases the benchmarks of one capability draw (benchmarks/elastic.py, benchmarks/estimates.py): the real
# Philly trace's held-out windows on PCIe V100 servers, or synthetic windows on DGX A100 servers.
PHILLY_TRACE, PHILLY_PRESET = "../shared/traces/philly_day60.csv", "pcie-v100"
HELD_OUT_SYNTHETIC_CLUSTER = "dgx-a100:8"


def held_out_cases(workload: str, load: float, seeds: int, window: int) -> list[Case]:
    """`seeds` held-out cases of `window` jobs at offered load `load`: "philly" (its model draws from
    `agents.scenarios.MODEL_SEEDS`, a range training never uses; SystemExit naming the file where the shared traces
    are absent) or "synthetic"."""
    from agents.scenarios import MODEL_SEEDS

    if workload == "philly":
        path = Path(__file__).resolve().parents[1] / PHILLY_TRACE
        if not path.is_file():
            raise SystemExit(f"--workloads philly: {path} is absent (the shared traces are not here)")
        return build_cases([str(path)], f"{PHILLY_PRESET}:8", seeds, window, part="test", load=load,
                           first_seed=MODEL_SEEDS)
    if workload == "synthetic":
        return build_synthetic_cases(f"synthetic:{window}", HELD_OUT_SYNTHETIC_CLUSTER, seeds, load=load)
    raise SystemExit(f"--workloads: {workload!r} is neither philly nor synthetic")


# Synthetic mixes: keyword arguments of `scheduler.core.traces.synthetic` on top of a `synthetic:N[,...]` spec. Each skews
# one thing the default (Philly-like) mix has a little of, so a policy is seen where that thing dominates.
SYNTHETIC_HELD_OUT_SEED = 2**31  # training draws synthetic seeds below this (agents.scenarios.draw)


def build_synthetic_cases(spec: str, cluster: str, seeds: int, load: float | None = None,
                          first_seed: int = SYNTHETIC_HELD_OUT_SEED, mix: str = "default",
                          name: str | None = None) -> list[Case]:
    """`seeds` synthetic cases (`spec` is `synthetic:N[,iat=S][,frac=F][,inference=F]`, `mix` a key of
    `SYNTHETIC_MIXES` whose settings override the spec's), seeds `first_seed` onwards (by default a range training
    never draws), on a fixed cluster `PRESET:NODES`.

    With `load`, the node count stays (grown only if the largest job does not fit) and arrival times are compressed
    or stretched until the offered load is `load` (`scheduler.core.traces.scale_to_load`), as `agents.scenarios` builds
    synthetic episodes; each case says so. The cases' `trace` is `name` (default: the spec, plus the mix unless it is
    the default), which `evaluate` groups by."""
    if mix not in SYNTHETIC_MIXES:
        raise SpecError(f"unknown synthetic mix {mix!r}; choose from {', '.join(SYNTHETIC_MIXES)}")
    n, kwargs = parse_synthetic_spec(spec)
    kwargs = {**kwargs, **SYNTHETIC_MIXES[mix]}
    base = parse_cluster(cluster)
    nodes_text, _at, fabric = cluster.partition("@")  # a fabric (`PRESET:NODES@FABRIC`) stays when the size changes
    fabric_suffix = f"@{fabric}" if fabric else ""
    preset, sep, _ = nodes_text.partition(":")
    if load is not None and (not sep or preset not in PRESETS or "," in nodes_text):
        raise SpecError(f"a synthetic load keeps a single-preset cluster's size (PRESET:NODES[@FABRIC]); got {cluster!r}")
    label = name or (spec if mix == "default" else f"{spec} ({mix})")
    out = []
    for seed in range(first_seed, first_seed + seeds):
        jobs = synthetic(n, seed=seed, **kwargs).jobs
        c, how = base, ""
        if load is not None:
            gpn = PRESETS[preset].gpus_per_node
            nodes = max(base.num_nodes, -(-max(j.workers for j in jobs) // gpn))
            c = base if nodes == base.num_nodes else parse_cluster(f"{preset}:{nodes}{fabric_suffix}")
            scaled = scale_to_load(jobs, nodes * gpn, load)
            span, new_span = jobs[-1].submit_s - jobs[0].submit_s, scaled[-1].submit_s - scaled[0].submit_s
            factor = span / new_span if new_span > 0 else 1.0
            verb = "compressed" if factor >= 1.0 else "stretched"
            grown = "" if nodes == base.num_nodes else " (grown for its largest job)"
            how = f"{nodes} nodes{grown}, arrivals {verb} {max(factor, 1 / factor):.2f}x"
            jobs = scaled
        out.append(Case(label, seed, 0, c, jobs, how))
    return out


def ci95(values: Sequence[float]) -> float:
    """Half-width of the 95% confidence interval of the mean (Student's t); 0 for a single value."""
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return 0.0
    return float(stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))


def interval_text(values: Sequence[float], fmt: str = ".3f") -> str:
    """ "mean [low, high]" with the 95% t interval (`ci95`); the mean alone for one value, "-" for none."""
    if not len(values):
        return "-"
    m, half = float(np.mean(values)), ci95(values)
    return f"{m:{fmt}}" if len(values) < 2 else f"{m:{fmt}} [{m - half:{fmt}}, {m + half:{fmt}}]"


def compare(values: Sequence[float], baseline: Sequence[float], kind: str, upper: float | None = None) -> dict[str, Any]:
    """`values` against `baseline`, paired by case: {"kind", "estimate", "low", "high", "n", "per_case", "note"}.

    kind "ratio": geometric mean of the per-case ratios, interval exp(mean(log r) ± t * sd / sqrt(n)); falls back to
    "difference" when a case has a 0 (the ratio is then undefined). kind "difference": mean of the per-case
    differences ± t * sd / sqrt(n). With one case, low and high are None. A difference bound beyond what the metric
    allows (values are >= 0, and <= `upper` when given) is kept as computed and the note says it is meaningless."""
    x, b = np.asarray(values, dtype=float), np.asarray(baseline, dtype=float)
    if x.shape != b.shape or x.size == 0:
        raise ValueError(f"paired comparison needs as many cases on each side, got {x.size} and {b.size}")
    note = None
    low: float | None  # None with a single case
    high: float | None
    if kind == "ratio" and np.all(x > 0) and np.all(b > 0):
        per_case = np.log(x / b)
        centre, half = float(per_case.mean()), ci95(per_case)
        est, low, high = float(np.exp(centre)), float(np.exp(centre - half)), float(np.exp(centre + half))
        shown = x / b
    else:
        if kind == "ratio":
            note = "ratio undefined (a case has 0 on one side): paired difference instead"
            kind = "difference"
        shown = x - b
        est, half = float(shown.mean()), ci95(shown)
        low, high = est - half, est + half
        lowest, highest = -float(b.mean()), (upper - float(b.mean())) if upper is not None else None
        if x.size > 1 and (low < lowest or (highest is not None and high > highest)):
            note = "; ".join(filter(None, [note, (
                f"the interval [{low:.4g}, {high:.4g}] reaches beyond the possible differences "
                f"[{lowest:.4g}, {'inf' if highest is None else f'{highest:.4g}'}]: too few cases for it to say much")]))
    if x.size < 2:
        low = high = None
        note = "; ".join(filter(None, [note, "one case: no interval"]))
    return {"kind": kind, "estimate": est, "low": low, "high": high, "n": int(x.size),
            "per_case": [float(v) for v in shown], "note": note}


def describe(values: Sequence[float]) -> dict[str, Any]:
    """The raw values over the cases: mean and range (a description of the cases, not an interval)."""
    v = [float(x) for x in values]
    return {"mean": float(np.mean(v)), "min": min(v), "max": max(v), "values": v}


def run_case(case: Case, policy: str, contention: bool = True) -> dict[str, Any]:
    """One policy on one case: the simulator's metrics. A fresh policy per case, seeded with the case: policies keep
    per-run memos, and a seed must not leak into the next case (so a case gives the same wherever it runs)."""
    return Simulator(case.cluster, case.jobs, make_policy(policy, seed=case.seed), contention=contention).run().metrics


def evaluate(cases: Sequence[Case], policies: Sequence[str], contention: bool = True,
             progress: Callable[[], None] | None = None, baseline: str = DEFAULT_BASELINE,
             ray_address: str | None = None) -> dict[str, Any]:
    """{trace: {"cases": [...], "baseline": name, "policies": {name: {metric: {"mean", "min", "max", "values",
    "vs_baseline"}}}}}: `vs_baseline` is `compare()`'s result (None for the baseline itself). The baseline runs too
    when it is not among `policies`. With `ray_address`, the runs are Ray tasks spread over that cluster's CPUs
    (`agents.sweep`): the same result, and each case also says which Ray nodes ran it (`ran_on`, one per policy)."""
    names = list(policies) + ([baseline] if baseline not in policies else [])
    info: dict[str, list[dict]] = {}
    for case in cases:
        info.setdefault(case.trace, []).append({
            "seed": case.seed, "start": case.start, "jobs": len(case.jobs), "cluster": case.cluster.name,
            "offered_load": round(offered_load(case.jobs, case.cluster.num_gpus), 3),
            **({"load_fit": case.how} if case.how else {}),
        })
    tasks = [(i, name) for i in range(len(cases)) for name in names]
    metrics_of: dict[tuple[int, str], dict[str, Any]] = {}
    if ray_address is None:
        for i, name in tasks:
            metrics_of[i, name] = run_case(cases[i], name, contention)
            if progress is not None:
                progress()
    else:
        from concurrent.futures import as_completed

        from agents.sweep import RayPool

        with RayPool(ray_address) as pool:
            refs = [pool.put(c) for c in cases]
            futures = {pool.submit(run_case, refs[i], name, contention): (i, name) for i, name in tasks}
            for f in as_completed(futures):
                metrics_of[futures[f]] = f.result()
                if progress is not None:
                    progress()
            ran_on = {futures[f]: node for f, node in pool.nodes.items()}
        by_trace: dict[str, int] = {}
        for i, case in enumerate(cases):  # the case's entry in `info`, in the order they were added
            k = by_trace[case.trace] = by_trace.get(case.trace, -1) + 1
            info[case.trace][k]["ran_on"] = {name: ran_on[i, name] for name in names}
    runs: dict[str, dict[str, list[dict]]] = {}
    for i, name in tasks:  # in the cases' order, whatever the order the runs ended in
        runs.setdefault(cases[i].trace, {}).setdefault(name, []).append(metrics_of[i, name])
    out: dict[str, Any] = {}
    for trace, by_policy in runs.items():
        out[trace] = {"cases": info[trace], "baseline": baseline, "policies": {}}
        base = by_policy[baseline]
        for name, metrics in by_policy.items():
            out[trace]["policies"][name] = {
                key: {**describe(vals), "vs_baseline": None if name == baseline else compare(
                    vals, [float(m.get(key, 0.0)) for m in base], "ratio" if key in RATIO_METRICS else "difference",
                    upper=1.0 if key in FRACTIONS else None)}
                for key in METRICS if (vals := [float(m.get(key, 0.0)) for m in metrics])
            }
    return out


def plot(result: dict[str, Any], out: Path) -> None:
    """Average and p99 JCT of each policy as a ratio to the baseline's on the same cases (geometric mean, 95%
    interval), a panel per trace. A bar with no interval (one case) has no error bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(result)
    fig, axes = plt.subplots(len(traces), 2, figsize=(11, 3.6 * len(traces)), squeeze=False)
    for row, trace in zip(axes, traces, strict=False):
        res = result[trace]
        pols = {n: p for n, p in res["policies"].items() if n != res["baseline"]}
        names = list(pols)
        for ax, key, title in zip(row, ("avg_jct_s", "p99_jct_s"), ("average JCT", "p99 JCT"), strict=False):
            cmp = [pols[n][key]["vs_baseline"] for n in names]
            est = [c["estimate"] if c["kind"] == "ratio" else np.nan for c in cmp]
            # Asymmetric bars: the interval is symmetric in log space, not around the geometric mean.
            err = np.array([[e - c["low"], c["high"] - e] if c["low"] is not None and c["kind"] == "ratio"
                            else [0.0, 0.0] for e, c in zip(est, cmp, strict=False)]).T.reshape(2, len(names))
            ax.bar(range(len(names)), est, yerr=err, capsize=4, color="tab:blue", alpha=0.8)
            ax.axhline(1.0, color="black", lw=0.8)
            ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
            ax.set_ylabel(f"ratio to {res['baseline']}")
            ax.set_title(f"{Path(trace).stem}: {title} / {res['baseline']} (geo. mean, 95% t, "
                         f"{len(res['cases'])} cases)", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)

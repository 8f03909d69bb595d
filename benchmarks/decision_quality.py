"""Decision quality: every policy against Tiresias and against the best heuristic of each case, across loads.

    python benchmarks/decision_quality.py [--seeds 5] [--loads 0.8,1.0,1.3,1.7,2.2] [--workloads philly,alibaba,synthetic]
        [--policies default,NAME...] [--extra NAME]... [--focus rl:default] [--window 500] [--jobs 2]
        [--json out.json] [--plot out.png] [--markdown] [--ray-address auto|HOST:PORT]

Cases are ones no training run saw. Philly (on pcie-v100 nodes) and Alibaba (on pcie-t4 nodes): windows of `--window`
jobs from the hold-out part of each trace (the last quarter) with model assignments from seed
`agents.scenarios.MODEL_SEEDS` (4) onwards, brought to each load by `scheduler.core.traces.fit_load` (the cluster is resized
where that gets within 5% of the load, arrivals are compressed or stretched where it does not, and each case says
which). Synthetic mixes (`agents.evaluate.SYNTHETIC_MIXES`: default, short, long, fractional, multinode), from seed
2**31 onwards (training draws below it), on a fixed `--synthetic-cluster` with arrivals rescaled to each load. The
same seeds give the same windows at every load.

Policies: by default every registered heuristic (whatever `policies.registry` holds when this runs, so new ones are
picked up), `sjf` (an oracle: it knows durations, so it never counts as "best heuristic") and `rl:default`; `--policies`
replaces that list (the word `default` stands for it), `--extra` adds one name verbatim (for names holding commas,
e.g. `tiresias:thresholds=60,600,3600`). A policy that fails to load is skipped with a note. `tiresias` always runs.

Per (workload, load), paired over the seeds (`agents.evaluate.compare`: geometric mean of the per-case ratios, 95%
Student's t interval): each policy's avg JCT / tiresias', avg JCT / the case's best heuristic (the lowest avg JCT of
the non-oracle heuristics on that case), p99 JCT / tiresias'; and the lower bound no policy can beat, every job alone
from its arrival (the mean isolated duration). Each simulation runs in a pool of `--jobs` worker processes, which
build the policies themselves, or with `--ray-address` as a Ray task on any CPU of that cluster (`agents.sweep`: the
same figures; the JSON report counts the simulations each Ray node ran, in `ray_nodes`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents import sweep
from agents.evaluate import SYNTHETIC_MIXES, Case, build_cases, build_synthetic_cases, compare
from agents.scenarios import MODEL_SEEDS
from scheduler.core.traces import offered_load

BASELINE = "tiresias"
FOCUS = "rl:default"
LOADS = (0.8, 1.0, 1.3, 1.7, 2.2)
TRACES = {  # name: (path relative to the project, node preset)
    "philly": ("../shared/traces/philly_day60.csv", "pcie-v100"),
    "alibaba": ("../shared/traces/alibaba_openb_before_day130.csv", "pcie-t4"),
}
# The big-gang regime (issue 30): LLM-style gangs of 64-512 GPUs beside small jobs, on HGX H100 clusters of 1,024 and
# 4,096 GPUs under a 3:1 fat-tree and a rail-optimised fabric. name: (mix, cluster, jobs per case). A case holds
# about 2 jobs per GPU: fewer leave too little work inside the arrival span to reach the load (a gang runs ~10 h).
FABRIC_WORKLOADS = {
    f"gangs-{fabric}-{nodes * 8}": ("gangs", f"hgx-h100:{nodes}@{fabric}", nodes * 16)
    for nodes in (128, 512) for fabric in ("fat-tree-3:1", "rail-optimised")
}
SYNTHETIC = {f"synthetic-{mix}": mix for mix in SYNTHETIC_MIXES
             if mix not in {m for m, _c, _n in FABRIC_WORKLOADS.values()}}
WORKLOADS = (*TRACES, *SYNTHETIC, *FABRIC_WORKLOADS)
LEARNED_PREFIXES = ("rl", "deepshare")  # a prefixed name with another prefix (tiresias:thresholds=...) is a heuristic
KEPT_METRICS = ("avg_jct_s", "p99_jct_s", "jobs_completed", "jobs_rejected")


# --------------------------------------------------------------------------------------------------------------------
# Cases and policies
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """The cases of one workload at one target load."""

    workload: str
    load: float
    cases: list[Case]


def expand_workloads(names: Iterable[str]) -> list[str]:
    """`philly`, `alibaba`, `synthetic-MIX`, `gangs-FABRIC-GPUS`; `synthetic` stands for every mix but the gangs,
    `gangs` for every fabric workload."""
    out: list[str] = []
    for name in names:
        picked = list(SYNTHETIC) if name == "synthetic" else list(FABRIC_WORKLOADS) if name == "gangs" else [name]
        for w in picked:
            if w not in WORKLOADS:
                raise SystemExit(f"--workloads: unknown workload {w!r}; choose from synthetic, gangs, "
                                 f"{', '.join(WORKLOADS)}")
            if w not in out:
                out.append(w)
    return out


def build_groups(workloads: Sequence[str], loads: Sequence[float], seeds: int, window: int,
                 synthetic_cluster: str = "dgx-a100:8") -> tuple[list[Group], list[str]]:
    """The cases of every (workload, load), and notes on workloads that could not be built (a missing trace)."""
    groups, notes = [], []
    for w in workloads:
        if w in TRACES:
            rel, preset = TRACES[w]
            path = (ROOT / rel).resolve()
            if not path.is_file():
                notes.append(f"{w}: {path} not found (needs ../shared/traces next to the project); skipped")
                continue
            for load in loads:
                groups.append(Group(w, load, build_cases([str(path)], f"{preset}:1", seeds, window_size=window,
                                                         part="test", load=load, first_seed=MODEL_SEEDS)))
        else:
            mix, cluster, size = FABRIC_WORKLOADS.get(w, (SYNTHETIC.get(w, ""), synthetic_cluster, window))
            for load in loads:
                groups.append(Group(w, load, build_synthetic_cases(f"synthetic:{size}", cluster, seeds,
                                                                   load=load, mix=mix, name=w)))
    return groups, notes


def default_policies() -> list[str]:
    """Every registered heuristic (prefixed names excluded), the oracle `sjf` among them, and `rl:default`."""
    from policies import available

    return [n for n in available() if ":" not in n] + [FOCUS]


def resolve_policies(spec: str | None, extra: Sequence[str] = ()) -> list[str]:
    names: list[str] = []
    for token in (spec or "default").split(","):
        token = token.strip()
        for n in default_policies() if token == "default" else [token] if token else []:
            if n not in names:
                names.append(n)
    for n in [*extra, BASELINE]:
        if n not in names:
            names.append(n)
    return names


def lower_bound(case: Case) -> float:
    """Mean JCT if every job ran alone from its arrival: the mean isolated duration (as benchmarks/rl.py)."""
    return float(np.mean([j.duration_s for j in case.jobs]))


# --------------------------------------------------------------------------------------------------------------------
# Running: each (case, policy) simulation is independent; workers build the policies
# --------------------------------------------------------------------------------------------------------------------

_CASES: list[Case] = []
_POOLED = False  # True in a pool's worker process


def _init_worker(cases: list[Case]) -> None:
    global _CASES, _POOLED
    _CASES, _POOLED = cases, True
    os.environ["OMP_NUM_THREADS"] = "1"  # read by torch when a learned policy first imports it
    _one_thread()


def _one_thread() -> None:
    """One torch thread per worker (the workers fill the cores), if a learned policy has brought torch in."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def probe(name: str) -> dict[str, Any]:
    """Build `name` once: {"name", "error" (None when it loads), "oracle", "learned"}."""
    from policies import make_policy
    from policies.registry import wrapped

    try:
        p = make_policy(name, seed=0)
    except Exception as exc:  # noqa: BLE001  (any failure to build is reported, whatever raised it)
        return {"name": name, "error": f"{type(exc).__name__}: {exc}", "oracle": False, "learned": False}
    # A wrapped learned policy (guarded:rl:default) is learned: never a case's "best heuristic".
    prefix, sep, _ = wrapped(name).partition(":")
    return {"name": name, "error": None, "oracle": bool(getattr(p, "oracle", False)),
            "learned": bool(sep) and prefix in LEARNED_PREFIXES}


def simulate(index: int, name: str, contention: bool = True) -> dict[str, Any]:
    """One policy on one case (by index into the worker's cases): the kept metrics, or {"error": text}."""
    return sweep.simulate(_CASES[index], name, contention, KEPT_METRICS, threads_once=_POOLED)


class _Serial:
    """The pool's interface in this process (`jobs=0`): for tests and debugging."""

    def __init__(self, cases: list[Case]) -> None:
        global _CASES
        _CASES = cases

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        from concurrent.futures import Future

        f: Future = Future()
        f.set_result(fn(*args))
        return f

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        return None


def run(groups: Sequence[Group], policies: Sequence[str], jobs: int = 2, progress: bool = True,
        contention: bool = True, log: Callable[[str], None] = print, ray_address: str | None = None) -> dict[str, Any]:
    """Simulate every policy on every case and summarise (see `summarise`). `jobs` worker processes (0: in this
    process), or with `ray_address` Ray tasks over that cluster's CPUs (`agents.sweep`; the report then counts the
    simulations each node ran, in "ray_nodes"). Policies that fail to load, or fail on a case, are skipped with the
    reason. The baseline runs too."""
    policies = list(dict.fromkeys([*policies, BASELINE]))
    cases = [c for g in groups for c in g.cases]
    pool: Any = (sweep.RayPool(ray_address) if ray_address else
                 ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(cases,)) if jobs > 0
                 else _Serial(cases))
    # On Ray, the policies are probed here (this script is not shipped to the nodes) and the cases travel by value.
    prober: Any = _Serial(cases) if ray_address else pool
    refs = [pool.put(c) for c in cases] if ray_address else []
    skipped: dict[str, str] = {}
    runs: dict[str, list[dict[str, float] | None]] = {}
    with pool:
        info = {}
        for f in as_completed([prober.submit(probe, n) for n in policies]):
            r = f.result()
            info[r["name"]] = r
        kinds = {}
        for n in policies:
            if info[n]["error"] is not None:
                skipped[n] = f"failed to load: {info[n]['error']}"
                log(f"note: skipping {n} ({skipped[n]})")
            else:
                kinds[n] = info[n]
        if BASELINE in skipped:
            raise SystemExit(f"the baseline {BASELINE} must run: {skipped[BASELINE]}")
        names = list(kinds)
        futures = {(pool.submit(sweep.simulate, refs[i], n, contention, KEPT_METRICS, True) if ray_address else
                    pool.submit(simulate, i, n, contention)): (i, n) for i in range(len(cases)) for n in names}
        runs = {n: [None] * len(cases) for n in names}
        bar = _progress(len(futures), progress)
        try:
            for f in as_completed(futures):
                i, n = futures[f]
                r = f.result()
                if "error" in r:
                    if n not in skipped:
                        skipped[n] = f"failed on {cases[i].label} at load {_group_of(groups, i).load:g}: {r['error']}"
                        log(f"note: dropping {n} ({skipped[n]})")
                else:
                    runs[n][i] = r
                bar(n)
        except BaseException:  # Ctrl-C or a dead worker: do not sit through the queued simulations
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            bar(None)
    if BASELINE in skipped:
        raise SystemExit(f"the baseline {BASELINE} must run: {skipped[BASELINE]}")
    done = {n: [r for r in rs if r is not None] for n, rs in runs.items() if n not in skipped}
    report = summarise(groups, done, {n: kinds[n] for n in done}, skipped)
    if ray_address:
        report["ray_nodes"] = dict(Counter(pool.nodes.values()))
    return report


def _group_of(groups: Sequence[Group], index: int) -> Group:
    for g in groups:
        if index < len(g.cases):
            return g
        index -= len(g.cases)
    raise IndexError(index)


def _progress(total: int, show: bool) -> Callable[[str | None], None]:
    """A rich progress bar advanced once per simulation; called with None at the end."""
    if not show:
        return lambda _name: None
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(TextColumn("simulations"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.description}"), transient=False)
    task = bar.add_task("", total=total)
    bar.start()

    def advance(name: str | None) -> None:
        if name is None:
            bar.stop()
        else:
            bar.update(task, advance=1, description=name)

    return advance


# --------------------------------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------------------------------


def summarise(groups: Sequence[Group], runs: dict[str, list[dict[str, float]]], kinds: dict[str, dict[str, Any]],
              skipped: dict[str, str]) -> dict[str, Any]:
    """`runs[name]` holds one metrics dict per case, in the order of the groups' cases. The result is JSON-able:
    {"policies", "oracles", "heuristics", "learned", "skipped", "groups": [{"workload", "load", "cases": [...],
    "best_heuristic_counts", "most_often_best", "policies": {name: {"avg_jct_s", "vs_tiresias", "vs_best",
    "p99_vs_tiresias"}}, "best_heuristic": {"vs_tiresias"}, "lower_bound": {"vs_tiresias", "vs_best"}}]}."""
    names = list(runs)
    heuristics = [n for n in names if not kinds[n]["oracle"] and not kinds[n]["learned"]]
    out: dict[str, Any] = {
        "baseline": BASELINE, "policies": names, "oracles": [n for n in names if kinds[n]["oracle"]],
        "heuristics": heuristics, "learned": [n for n in names if kinds[n]["learned"]], "skipped": dict(skipped),
        "groups": [],
    }
    first = 0
    for g in groups:
        idx = range(first, first + len(g.cases))
        first += len(g.cases)
        avg = {n: [runs[n][i]["avg_jct_s"] for i in idx] for n in names}
        p99 = {n: [runs[n][i]["p99_jct_s"] for i in idx] for n in names}
        best_val = [min(avg[h][k] for h in heuristics) for k in range(len(g.cases))]
        # Ties (several heuristics making the same decisions) credit each of them.
        best_names = [[h for h in heuristics if math.isclose(avg[h][k], best_val[k], rel_tol=1e-9)]
                      for k in range(len(g.cases))]
        counts = Counter(h for tied in best_names for h in tied)
        bound = [lower_bound(c) for c in g.cases]
        cases = [{
            "seed": c.seed, "start": c.start, "jobs": len(c.jobs), "cluster": c.cluster.name,
            "offered_load": round(offered_load(c.jobs, c.cluster.num_gpus), 3), "load_fit": c.how,
            "lower_bound_s": bound[k], "best_heuristic": best_names[k], "best_avg_jct_s": best_val[k],
            "policies": {n: runs[n][k + idx.start] for n in names},
        } for k, c in enumerate(g.cases)]
        tir_avg, tir_p99 = avg[BASELINE], p99[BASELINE]
        out["groups"].append({
            "workload": g.workload, "load": g.load, "cases": cases,
            "best_heuristic_counts": dict(counts.most_common()),
            "most_often_best": counts.most_common(1)[0][0] if counts else None,
            "policies": {n: {
                "avg_jct_s": float(np.mean(avg[n])),
                "vs_tiresias": compare(avg[n], tir_avg, "ratio"),
                "vs_best": compare(avg[n], best_val, "ratio"),
                "p99_vs_tiresias": compare(p99[n], tir_p99, "ratio"),
            } for n in names},
            "best_heuristic": {"vs_tiresias": compare(best_val, tir_avg, "ratio")},
            "lower_bound": {"vs_tiresias": compare(bound, tir_avg, "ratio"), "vs_best": compare(bound, best_val, "ratio")},
        })
    return out


def write_json(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=1) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------------------------------
# Output: rich tables, markdown, plot
# --------------------------------------------------------------------------------------------------------------------


def fmt(c: dict[str, Any] | None, digits: int = 2) -> str:
    """'0.98 [0.95, 1.01]' for a ratio comparison ('' when missing; no brackets with one case)."""
    if c is None:
        return ""
    if c["kind"] != "ratio":
        return f"diff {c['estimate']:+.3g}"
    if c["low"] is None:
        return f"{c['estimate']:.{digits}f}"
    return f"{c['estimate']:.{digits}f} [{c['low']:.{digits}f}, {c['high']:.{digits}f}]"


def fit_summary(cases: Sequence[dict[str, Any]], sep: str = ", ") -> str:
    """How the cases were brought to their load, in a few words: node range and how many had arrivals rescaled."""
    names = {c["cluster"] for c in cases}
    fabric = next(iter(names)).partition("@")[2]  # every case of a group is on one fabric (or none)
    nodes = sorted({n.partition("@")[0] for n in names}, key=lambda s: int(s.rsplit(":", 1)[-1]) if ":" in s else 0)
    preset = nodes[0].rsplit(":", 1)[0]
    counts = sorted(int(s.rsplit(":", 1)[1]) for s in nodes)
    where = f"{preset}:{counts[0]}" + (f"-{counts[-1]}" if counts[-1] != counts[0] else "") + (
        f"@{fabric}" if fabric else "")
    rescaled = [c for c in cases if "arrivals" in c["load_fit"]]
    if not rescaled:
        return where
    factors = [float(c["load_fit"].rsplit(" ", 1)[-1].rstrip("x")) for c in rescaled]
    verbs = {"compressed" if "compressed" in c["load_fit"] else "stretched" for c in rescaled}
    span = f"{min(factors):.2f}" + (f"-{max(factors):.2f}" if max(factors) != min(factors) else "")
    share = "" if len(rescaled) == len(cases) else f" in {len(rescaled)}/{len(cases)}"
    return f"{where}{sep}{'' if sep == chr(10) else 'arrivals '}{'/'.join(sorted(verbs))} {span}x{share}"


def print_tables(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    workloads = list(dict.fromkeys(g["workload"] for g in report["groups"]))
    for w in workloads:
        groups = [g for g in report["groups"] if g["workload"] == w]
        n = len(groups[0]["cases"])
        t = Table(title=f"{w}: tir = avg JCT / tiresias', best = avg JCT / the case's best heuristic's, p99 = p99 "
                        f"JCT / tiresias' (geometric mean [95% t] over {n} seeds)", title_justify="left",
                  show_lines=True)
        t.add_column("policy", no_wrap=True)
        for g in groups:
            t.add_column(f"load {g['load']:.1f}\n{fit_summary(g['cases'], sep=chr(10))}", no_wrap=True)
        for name in report["policies"]:
            tag = " (oracle)" if name in report["oracles"] else ""
            cells = []
            for g in groups:
                p = g["policies"][name]
                cells.append(f"tir  {fmt(p['vs_tiresias'])}\nbest {fmt(p['vs_best'])}\np99  {fmt(p['p99_vs_tiresias'])}")
            t.add_row(name + tag, *cells)
        t.add_row("best heuristic", *[f"tir  {fmt(g['best_heuristic']['vs_tiresias'])}\nmost often "
                                      f"{g['most_often_best']} ({g['best_heuristic_counts'][g['most_often_best']]}/{n})"
                                      for g in groups])
        t.add_row("lower bound", *[f"tir  {fmt(g['lower_bound']['vs_tiresias'])}\nbest {fmt(g['lower_bound']['vs_best'])}"
                                   for g in groups])
        t.add_row("tiresias avg JCT", *[f"{g['policies'][BASELINE]['avg_jct_s'] / 3600:.2f} h" for g in groups])
        console.print(t)
    if report["skipped"]:
        for name, why in report["skipped"].items():
            console.print(f"skipped {name}: {why}")


def add_contention_cost(report: dict[str, Any], off: dict[str, Any]) -> None:
    """Each policy's avg JCT with contention over the same without (`off`: the same groups and cases), paired by
    case: what contention itself costs it, into `report`'s groups as policies[name]["contention_cost"]."""
    for g, g_off in zip(report["groups"], off["groups"], strict=True):
        for name, p in g["policies"].items():
            if name in g_off["policies"]:
                on = [c["policies"][name]["avg_jct_s"] for c in g["cases"]]
                without = [c["policies"][name]["avg_jct_s"] for c in g_off["cases"]]
                p["contention_cost"] = compare(on, without, "ratio")


def print_contention_cost(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    groups = report["groups"]
    t = Table(title="contention's own cost: avg JCT with contention / without (geometric mean [95% t] over the seeds)",
              title_justify="left", show_lines=True)
    t.add_column("workload, load", no_wrap=True)
    for name in report["policies"]:
        t.add_column(name, no_wrap=True)
    for g in groups:
        t.add_row(f"{g['workload']} {g['load']:g}",
                  *[fmt(g["policies"][n].get("contention_cost")) for n in report["policies"]])
    console.print(t)


def markdown(report: dict[str, Any], focus: str = FOCUS) -> str:
    """Rows workload x load; columns focus/tiresias, focus/best heuristic (naming the one most often best), best
    heuristic/tiresias, sjf/tiresias, lower bound/tiresias: geometric means with their 95% intervals."""
    seeds = {len(g["cases"]) for g in report["groups"]}
    head = (f"| workload (cluster, load fit) | load | {focus} / tiresias | {focus} / best heuristic (most often best) "
            "| best heuristic / tiresias | sjf (oracle) / tiresias | lower bound / tiresias |")
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for g in report["groups"]:
        pol = g["policies"]
        mine = pol.get(focus)
        best = g["most_often_best"]
        best_cell = (f"{fmt(mine['vs_best'])} ({best}, {g['best_heuristic_counts'][best]}/{len(g['cases'])})"
                     if mine else "skipped")
        lines.append(" | ".join([
            f"| {g['workload']} ({fit_summary(g['cases'])})", f"{g['load']:.1f}",
            fmt(mine["vs_tiresias"]) if mine else "skipped", best_cell,
            fmt(g["best_heuristic"]["vs_tiresias"]),
            fmt(pol["sjf"]["vs_tiresias"]) if "sjf" in pol else "n/a",
            fmt(g["lower_bound"]["vs_tiresias"]) + " |",
        ]))
    lines.append("")
    lines.append(f"Geometric mean of the per-case ratios of average JCT over {'/'.join(map(str, sorted(seeds)))} "
                 "seeds, [95% Student's t interval]; best heuristic: the lowest avg JCT of the non-oracle heuristics "
                 f"({', '.join(report['heuristics'])}) on each case.")
    if report["skipped"]:
        lines.append("Skipped: " + "; ".join(f"{n} ({why})" for n, why in report["skipped"].items()) + ".")
    return "\n".join(lines)


def plot(report: dict[str, Any], out: Path, focus: str = FOCUS) -> None:
    """Avg JCT / tiresias against load, a panel per workload, a line per policy with its 95% interval (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    workloads = list(dict.fromkeys(g["workload"] for g in report["groups"]))
    cols = min(3, len(workloads))
    rows = -(-len(workloads) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols + 2.2, 3.9 * rows), squeeze=False)
    series = [n for n in report["policies"] if n != BASELINE]
    cmap = plt.get_cmap("tab10" if len(series) <= 9 else "tab20")
    palette = [cmap(k) for k in range(cmap.N) if k != 3]  # red (3) is the focus policy's
    colours = ["tab:red" if n == focus else palette[k % len(palette)] for k, n in enumerate(series)]
    for ax, w in zip(axes.flat, workloads, strict=False):
        groups = [g for g in report["groups"] if g["workload"] == w]
        loads = [g["load"] for g in groups]
        lines = [(n, [g["policies"][n]["vs_tiresias"] for g in groups], colours[k], "-")
                 for k, n in enumerate(series)]
        lines.append(("lower bound", [g["lower_bound"]["vs_tiresias"] for g in groups], "black", "--"))
        for k, (name, cmp, colour, style) in enumerate(lines):
            width = 2.4 if name == focus else 1.1
            est = np.array([c["estimate"] if c["kind"] == "ratio" else np.nan for c in cmp])
            err = np.array([[e - c["low"], c["high"] - e] if c["low"] is not None and c["kind"] == "ratio"
                            else [0.0, 0.0] for e, c in zip(est, cmp, strict=False)]).T.reshape(2, len(cmp))
            x = np.array(loads) * (1 + 0.006 * (k - len(lines) / 2))  # a small dodge so the bars do not overlap
            label = name + (" (oracle)" if name in report["oracles"] else "")
            ax.errorbar(x, est, yerr=err, color=colour, ls=style, marker="o", ms=3, capsize=2, lw=width, label=label)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        # Minor ticks labelled at 2, 3 and 5 of each decade only, so labels do not crowd around 1.
        ax.yaxis.set_minor_formatter(FuncFormatter(
            lambda v, _pos: f"{v:g}" if round(v / 10 ** math.floor(math.log10(v)), 6) in (2, 3, 5) else ""))
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_xticks(loads, [f"{v:g}" for v in loads])
        ax.set_xlabel("offered load")
        ax.set_ylabel("avg JCT / tiresias")
        ax.set_title(f"{w} ({len(groups[0]['cases'])} seeds, geo. mean, 95% t)", fontsize=9)
        ax.grid(alpha=0.3, which="both")
    for ax in list(axes.flat)[len(workloads):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1 - 2.2 / (5.2 * cols + 2.2), 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="cases per (workload, load)")
    ap.add_argument("--loads", default=",".join(f"{v:g}" for v in LOADS))
    ap.add_argument("--workloads", default="philly,alibaba,synthetic",
                    help=f"comma-separated: synthetic (every mix), {', '.join(WORKLOADS)}")
    ap.add_argument("--policies", default="default",
                    help="comma-separated; 'default' = every registered heuristic and rl:default")
    ap.add_argument("--extra", action="append", default=[], help="one more policy name, verbatim (may hold commas)")
    ap.add_argument("--focus", default=FOCUS, help="the policy the markdown table reports")
    ap.add_argument("--window", type=int, default=500, help="jobs per case (the gangs-* workloads: 2 per GPU)")
    ap.add_argument("--synthetic-cluster", default="dgx-a100:8", help="PRESET:NODES of the synthetic cases")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (0: run in this process)")
    ap.add_argument("--ray-address", default=None, metavar="ADDR",
                    help="run the simulations as Ray tasks over this cluster's CPUs instead ('auto', HOST:PORT)")
    ap.add_argument("--no-contention", action="store_true")
    ap.add_argument("--contention-cost", action="store_true",
                    help="also run every case without contention and report each policy's avg JCT with / without")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--markdown", action="store_true", help="also print the table for agents/zoo/README.md")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.seeds < 2:
        ap.error("--seeds: at least 2 (one case gives no interval)")
    try:
        loads = [float(v) for v in args.loads.split(",") if v.strip()]
    except ValueError:
        ap.error(f"--loads: {args.loads!r} is not a comma-separated list of numbers")
    if not loads or any(not v > 0 for v in loads):
        ap.error("--loads: give positive loads")
    t0 = time.perf_counter()
    workloads = expand_workloads(w.strip() for w in args.workloads.split(",") if w.strip())
    groups, notes = build_groups(workloads, loads, args.seeds, args.window, args.synthetic_cluster)
    for note in notes:
        print(f"note: {note}")
    if not groups:
        raise SystemExit("no cases to run")
    policies = resolve_policies(args.policies, args.extra)
    n_cases = sum(len(g.cases) for g in groups)
    print(f"{n_cases} cases ({len(groups)} workload x load groups, {args.seeds} seeds), {len(policies)} policies: "
          f"{', '.join(policies)}; "
          f"{f'Ray tasks on {args.ray_address}' if args.ray_address else f'{args.jobs} workers'}")
    if args.ray_address:
        from scheduler.cli.learning_commands import use_ray_token

        use_ray_token()
    report = run(groups, policies, jobs=args.jobs, progress=not args.quiet, contention=not args.no_contention,
                 ray_address=args.ray_address)
    if args.contention_cost:
        if args.no_contention:
            ap.error("--contention-cost compares with contention against without: drop --no-contention")
        add_contention_cost(report, run(groups, list(report["policies"]), jobs=args.jobs, progress=not args.quiet,
                                        contention=False, ray_address=args.ray_address))
    wall = time.perf_counter() - t0
    report["config"] = {"seeds": args.seeds, "loads": loads, "workloads": workloads, "window": args.window,
                        "synthetic_cluster": args.synthetic_cluster, "jobs": args.jobs, "ray_address": args.ray_address,
                        "contention": not args.no_contention, "contention_cost": args.contention_cost, "command": " ".join(["benchmarks/decision_quality.py",
                                                                                   *(argv or sys.argv[1:])])}
    report["wall_s"] = wall
    print_tables(report)
    if args.contention_cost:
        print_contention_cost(report)
    if args.markdown:
        print()
        print(markdown(report, args.focus))
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        plot(report, args.plot, args.focus)
        print(f"wrote {args.plot}")
    print(f"total wall time {wall:.0f} s ({wall / 60:.1f} min) for {n_cases * len(report['policies'])} simulations")
    return report


if __name__ == "__main__":
    main()

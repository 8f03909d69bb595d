"""Elastic jobs (issue 49): the marginal-gain heuristic on an elastic mix against the same jobs kept rigid.

    python benchmarks/elastic.py [--seeds 5] [--loads 1.0,1.3,1.7] [--workloads philly,synthetic] [--window 300]
        [--rigid fifo,fifo-backfill,...] [--elastic marginal-gain,...] [--share 0.5] [--jobs 2] [--json out.json]
        [--plot out.png]

Cases are ones no training run saw (as `benchmarks/decision_quality.py` draws them): Philly windows from the hold-out
part of the trace on pcie-v100 nodes, brought to each load by `scheduler.core.traces.fit_load`, and synthetic windows
from seed 2**31 on a fixed dgx-a100 cluster with arrivals rescaled to each load. The elastic mix is the same jobs with
`--share` of the whole-GPU training jobs made elastic from half to twice their traced size
(`scheduler.core.elastic.elastic_window`, drawn from the case's seed, as `corral simulate --elastic` draws them); the
rigid jobs are the jobs as traced.

Per (workload, load): every `--rigid` heuristic on the rigid jobs, the best of them being the one with the lowest mean
avg JCT over the cases (chosen on these very cases: an optimistic baseline, which makes the comparison harder to
win); every `--elastic` policy on the elastic mix (by default the sizing heuristics, `marginal-gain` reading each job's
true remaining work, `marginal-gain-expected` its expected work, `grow:POLICY` a rigid policy given idle GPUs to grow
running jobs into, and `rl:default`), and the best rigid heuristic that does not time-share there too
with the sizing rule of a scheduler that does not size (`largest:BEST`: each elastic job started at the largest size
that fits, never resized; `policies.sizing`, which refuses tiresias and gittins). For each elastic policy, paired
over the cases (`agents.evaluate.compare`: geometric mean of the per-case ratios, 95% Student's t interval), its avg
JCT and p99 JCT over the best rigid heuristic's on the rigid jobs (issue 49's target: avg JCT ratio <= 0.70, a 30%
cut, with p99 no worse, at every load), and its avg JCT over `largest:BEST`'s on the elastic mix; for the learned
policy, its avg JCT over the best elastic heuristic's and the best deployable one's (no oracle) on the same cases.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.evaluate import Case, compare, held_out_cases
from policies import make_policy
from scheduler.core.elastic import elastic_window
from scheduler.core.simulator import Simulator

LOADS = (1.0, 1.3, 1.7)
RIGID = ("fifo", "fifo-backfill", "sjf", "tiresias", "gittins", "contention-greedy", "consolidate", "topology")
# The sizing heuristics (marginal-gain reads true remaining work: an oracle), and the learned policy.
ELASTIC = ("marginal-gain", "marginal-gain-expected", "grow:gittins", "grow:tiresias", "rl:default")
TIME_SHARING = {"tiresias", "gittins"}  # they preempt to time-share: `largest:` refuses them
TARGET = 0.70


def elastic_mix(case: Case, share: float) -> Case:
    return replace(case, jobs=elastic_window(case.jobs, share, case.seed))


def run(args: tuple[Case, str]) -> dict[str, float]:
    case, policy = args
    t0 = time.process_time()
    metrics = Simulator(case.cluster, case.jobs, make_policy(policy, seed=case.seed)).run().metrics
    return {k: float(v) for k, v in metrics.items()} | {"cpu_s": time.process_time() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--loads", default=",".join(map(str, LOADS)))
    ap.add_argument("--workloads", default="philly,synthetic")
    ap.add_argument("--window", type=int, default=300)
    ap.add_argument("--rigid", default=",".join(RIGID))
    ap.add_argument("--elastic", default=",".join(ELASTIC))
    ap.add_argument("--share", type=float, default=0.5, help="fraction of whole-GPU training jobs made elastic")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    a = ap.parse_args()
    loads = [float(x) for x in a.loads.split(",")]
    rigid, elastic = a.rigid.split(","), a.elastic.split(",")
    for name in [*rigid, *elastic]:
        make_policy(name)  # unknown names fail here, before any work
    report: dict[str, Any] = {"share": a.share, "seeds": a.seeds, "window": a.window, "groups": []}
    with ProcessPoolExecutor(a.jobs) as pool:
        for workload in a.workloads.split(","):
            for load in loads:
                plain = held_out_cases(workload, load, a.seeds, a.window)
                mixed = [elastic_mix(c, a.share) for c in plain]
                work = [(c, p) for p in rigid for c in plain] + [(c, p) for p in elastic for c in mixed]
                results = list(pool.map(run, work))
                by: dict[str, list[dict[str, float]]] = {}
                for (_c, p), r in zip(work, results, strict=True):
                    by.setdefault(p, []).append(r)
                mean_jct = {p: float(np.mean([r["avg_jct_s"] for r in by[p]])) for p in rigid}
                best = min(rigid, key=mean_jct.__getitem__)
                # (a time-sharing policy cannot be sized: `policies.sizing`; the best of the others is)
                sized = f"largest:{min(set(rigid) - TIME_SHARING, key=mean_jct.__getitem__)}"
                by[sized] = list(pool.map(run, [(c, sized) for c in mixed]))
                group = {"workload": workload, "load": load, "best_rigid": best,
                         "how": sorted({c.how for c in plain}),
                         "rigid": {p: {"avg_jct_s": [r["avg_jct_s"] for r in by[p]]} for p in rigid},
                         "elastic": {}}
                print(f"\n{workload} at load {load:g} ({len(plain)} cases): best rigid heuristic {best} "
                      f"(avg JCT {np.mean([r['avg_jct_s'] for r in by[best]]) / 3600:.2f} h)")
                for p in elastic:
                    avg = compare([r["avg_jct_s"] for r in by[p]], [r["avg_jct_s"] for r in by[best]], "ratio")
                    p99 = compare([r["p99_jct_s"] for r in by[p]], [r["p99_jct_s"] for r in by[best]], "ratio")
                    resizes = float(np.mean([r.get("resizes", 0.0) for r in by[p]]))
                    cpu = float(np.mean([r["cpu_s"] for r in by[p]]))
                    vs_sized = compare([r["avg_jct_s"] for r in by[p]], [r["avg_jct_s"] for r in by[sized]], "ratio")
                    group["elastic"][p] = {"avg_jct_ratio": avg, "p99_jct_ratio": p99, "resizes": resizes,
                                           "cpu_s": cpu, "avg_jct_vs_sized": vs_sized}
                    met = avg["estimate"] <= TARGET and p99["estimate"] <= 1.0
                    print(f"  {p}: avg JCT x{avg['estimate']:.3f} [{fmt(avg['low'])}, {fmt(avg['high'])}], "
                          f"p99 x{p99['estimate']:.3f} [{fmt(p99['low'])}, {fmt(p99['high'])}] of {best}'s on "
                          f"the rigid jobs; avg JCT x{vs_sized['estimate']:.3f} [{fmt(vs_sized['low'])}, "
                          f"{fmt(vs_sized['high'])}] of {sized}'s on the elastic mix; {resizes:.0f} resizes and "
                          f"{cpu:.2f} CPU s a case: target (avg <= {TARGET}, p99 <= 1) {'met' if met else 'NOT met'}")
                learned_vs_heuristics(elastic, by, group)
                report["groups"].append(group)
    if a.json:
        a.json.write_text(json.dumps(report, indent=2))
    if a.plot:
        plot(report, a.plot)


def learned_vs_heuristics(elastic: list[str], by: dict[str, list[dict[str, float]]], group: dict[str, Any]) -> None:
    """Each learned policy's avg JCT on the elastic mix over the best elastic heuristic's (the lowest mean avg JCT of
    the `--elastic` heuristics on these cases), and over the best one that reads no true remaining work (the
    deployable ones): issue 49's target is <= 0.95 at one load or more and never above 1.02."""
    learned = [p for p in elastic if p.startswith("rl:")]
    heuristics = [p for p in elastic if not p.startswith("rl:")]
    if not learned or not heuristics:
        return
    mean = {p: float(np.mean([r["avg_jct_s"] for r in by[p]])) for p in heuristics}
    best = min(heuristics, key=mean.__getitem__)
    deployable = [p for p in heuristics if not make_policy(p).oracle]
    fair = min(deployable, key=mean.__getitem__) if deployable else best
    for p in learned:
        for label, other in (("best elastic heuristic", best), ("best deployable one", fair)):
            r = compare([x["avg_jct_s"] for x in by[p]], [x["avg_jct_s"] for x in by[other]], "ratio")
            group["elastic"][p][f"avg_jct_vs_{'best' if other == best else 'deployable'}"] = r | {"policy": other}
            print(f"  {p} against the {label} ({other}): avg JCT x{r['estimate']:.3f} "
                  f"[{fmt(r['low'])}, {fmt(r['high'])}]")
            if best == fair:
                break


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def plot(report: dict[str, Any], out: Path) -> None:
    """Avg JCT over the best rigid heuristic's, per load: one panel per workload, one line per elastic policy (offset
    a little along the load axis so that the intervals do not hide each other), with 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(g["workload"] for g in report["groups"]))
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 4), sharey=True, squeeze=False)
    for ax, workload in zip(axes[0], workloads, strict=True):
        lines: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        for g in report["groups"]:
            if g["workload"] == workload:
                for p, r in g["elastic"].items():
                    lines.setdefault(p, []).append((g["load"], r["avg_jct_ratio"]))
        for k, (p, pts) in enumerate(lines.items()):
            shift = (k - (len(lines) - 1) / 2) * 0.02
            xs = [x + shift for x, _ in pts]
            ys = [r["estimate"] for _, r in pts]
            lo = [r["estimate"] - (r["low"] if r["low"] is not None else r["estimate"]) for _, r in pts]
            hi = [(r["high"] if r["high"] is not None else r["estimate"]) - r["estimate"] for _, r in pts]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=p)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axhline(TARGET, color="red", lw=0.8, ls="--", label=f"target {TARGET}")
        ax.set_title(workload)
        ax.set_xlabel("offered load")
    axes[0][0].set_ylabel("avg JCT / best rigid heuristic's (rigid jobs)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    main()

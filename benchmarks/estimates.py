"""Start estimates (issue 50, item 1): today's replay against the replay under the policy itself, at submission.

    python benchmarks/estimates.py [--policy tiresias[,fifo-backfill,...]] [--loads 1.0,1.3,1.7]
        [--workloads philly,synthetic] [--seeds 10] [--window 300] [--samples 40] [--eligible 0.75] [--sigma 0]
        [--horizon-h 168] [--max-events 200000] [--full] [--jobs 2] [--json out.json]

Cases are ones no training run saw (as `benchmarks/elastic.py` and `benchmarks/decision_quality.py` draw them):
Philly windows from the hold-out part of the trace on pcie-v100 nodes brought to each load
(`scheduler.core.traces.fit_load`), and synthetic windows from seed 2**31 on dgx-a100:8 with arrivals rescaled to
each load. Each case runs under each `--policy` in the simulator. A first run finds the arrivals that wait (not started
by the scheduling round at their arrival instant: the jobs whose page would show an estimate); up to `--samples` of
them, evenly spaced, among the first `--eligible` share of the window's jobs (a job arriving near the window's end
would see no later arrivals, which flatters every estimate), are the sample. A second run, identical, stops after each
sampled job's arrival round and estimates its start both ways:

* today: `scheduler.live.explain.start_estimates`, fed as the live service fed it from the store before it replayed
  the policy (`scheduler.live.estimates` now does: the replay below, over the store's present): the
  running jobs' predicted ends (work left at their current rate), then the queue in submission order with each job's
  `duration_s`, on every GPU (no outages here), gang and memory rules;
* replay: `scheduler.core.estimates.estimate` over the simulator's present (`present_of`), under a fresh copy of the
  policy, stopped once the sampled job starts (bounded by `--horizon-h` and `--max-events`); with `--full`, also the
  replay of the whole queue at once (what a service recomputing every estimate does), timed, and checked to give the
  sampled job the same estimate.

After the run, each estimate is scored against the wait that happened: a hit is within 2x of it (0.5 to 2 times) or
within 5 minutes; a job estimated never to start, or not within the bounds, is a miss (every job here does start). The
median absolute error counts those as infinite. The issue's target: >= 80% hits at loads 1.0-1.7.

Durations: the simulation runs each job's `duration_s`, and by default both estimates know it (`--sigma 0`: durations
as estimated, the issue's setting; the figures then isolate the replay's rule). With `--sigma S`, the estimates see
`duration_s` times a mean-one log-normal factor (spread S, drawn per job from the case's seed), as a user's guess; the
replay's jobs then run their guessed work. The default run (2 workloads x 3 loads x 10 windows, at most 40 samples each,
under tiresias) takes about a CPU-minute: a replay stopped once its job starts costs milliseconds to a tenth of a
second here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.evaluate import Case, held_out_cases
from policies import make_policy
from scheduler.core.estimates import ARRIVALS_WINDOW_S, Bounds, Outlook, estimate, expected_arrivals
from scheduler.core.replay import Present, present_of
from scheduler.core.simulator import Simulator
from scheduler.live.explain import Queued, Running, start_estimates

LOADS = (1.0, 1.3, 1.7)
TARGET = 0.80
NEAR_S = 300.0  # within 5 minutes is a hit whatever the ratio


def dev_cases(workload: str, load: float, seeds: int, window: int) -> list[Case]:
    """`held_out_cases`' twins on what training and tuning may see: Philly's first three quarters, synthetic seeds
    from 1,000 (training draws below 2**31)."""
    from agents.evaluate import (
        HELD_OUT_SYNTHETIC_CLUSTER,
        PHILLY_PRESET,
        PHILLY_TRACE,
        build_cases,
        build_synthetic_cases,
    )

    if workload == "philly":
        path = ROOT / PHILLY_TRACE
        if not path.is_file():
            raise SystemExit(f"--workloads philly: {path} is absent (the shared traces are not here)")
        return build_cases([str(path)], f"{PHILLY_PRESET}:8", seeds, window, part="train", load=load, first_seed=1000)
    if workload == "synthetic":
        return build_synthetic_cases(f"synthetic:{window}", HELD_OUT_SYNTHETIC_CLUSTER, seeds, load=load,
                                     first_seed=1000)
    raise SystemExit(f"--workloads: {workload!r} is neither philly nor synthetic")


def guesses(case: Case, sigma: float) -> dict[str, float]:
    """Each job's guessed duration over its true one (all 1 with sigma 0), by name."""
    rng = np.random.default_rng(case.seed)
    f = np.exp(sigma * rng.standard_normal(len(case.jobs)) - sigma**2 / 2) if sigma > 0 else np.ones(len(case.jobs))
    return {j.name: float(x) for j, x in zip(case.jobs, f, strict=True)}


def today(sim: Simulator, guess: dict[str, float]) -> list[float | None]:
    """Today's estimates for the queue, fed from the simulator as the live service fed them from the store before;
    entry i is the i-th pending job's in (submit time, id) order."""
    now, profiles = sim.now, sim.profiles
    running = []
    for job in sim.running.values():
        assert job.placement is not None
        work = job.work_left - max(0.0, now - job.last_update) * job.rate
        left = max(work * guess[job.spec.name], 0.0) / job.rate + max(0.0, job.last_update - now)
        running.append(Running({g: job.placement.share for g in job.placement.gpus}, left, job.spec.team))
    queue = [Queued(j.spec.num_gpus, j.spec.duration_s * guess[j.spec.name], j.spec.team,
                    profiles[j.spec.model].mem_gb) for j in _queue(sim)]
    gpu_mem = {g: float(m) for g, m in enumerate(sim.cluster.gpu_mem)}
    return start_estimates(range(sim.cluster.num_gpus), running, queue, gpu_mem=gpu_mem)


def _queue(sim: Simulator) -> list[Any]:
    return sorted([*sim.pending.values(), *sim.blocked.values()], key=lambda j: (j.spec.submit_s, j.id))


def guessed(present: Present, guess: dict[str, float]) -> Present:
    """The present with every job's work left as its owner guessed it."""
    running = [replace(p, spec=replace(p.spec, duration_s=p.work_left * guess[p.spec.name]),
                       work_left=p.work_left * guess[p.spec.name]) for p in present.running]
    pending = [replace(w, spec=replace(w.spec, duration_s=w.spec.duration_s * guess[w.spec.name]))
               for w in present.pending]
    return replace(present, running=running, pending=pending)


def waiting_arrivals(case: Case, policy: str) -> tuple[list[int], list[float]]:
    """The ids of the arrivals not started by their arrival round, and every job's first start (a first run)."""
    sim = Simulator(case.cluster, case.jobs, make_policy(policy, seed=case.seed))
    sim.run()
    starts = [j.first_start_s if j.first_start_s is not None else math.nan for j in sim.jobs]
    return [j.id for j in sim.jobs[:len(case.jobs)] if not (j.first_start_s is not None
                                                                and j.first_start_s <= j.spec.submit_s)], starts


def run_case(args: tuple[Case, str, int, float, float, Bounds, bool, float]) -> dict[str, Any]:
    case, policy, samples, eligible, sigma, bounds, full, window_s = args
    t0 = time.process_time()
    waited, first = waiting_arrivals(case, policy)
    limit = int(len(case.jobs) * eligible)
    pool = [i for i in waited if i < limit]
    picks = sorted({pool[int(k)] for k in np.linspace(0, len(pool) - 1, min(samples, len(pool)))}) if pool else []
    guess = guesses(case, sigma)
    sim = Simulator(case.cluster, case.jobs, make_policy(policy, seed=case.seed))
    todo = list(reversed(picks))
    made: dict[int, tuple[float, float | None, Any]] = {}  # id -> (when, today's, the policy's Estimate)
    replay_cpu = 0.0
    full_cpu: list[float] = []
    full_jobs: list[int] = []
    while todo and sim.advance():
        sim.schedule()
        while todo and sim.jobs[todo[-1]].spec.submit_s <= sim.now:
            i = todo.pop()
            job = sim.jobs[i]
            if job.first_start_s is not None:  # (started at its arrival: the first run said otherwise)
                continue
            order = [j.id for j in _queue(sim)]
            old = today(sim, guess)[order.index(i)]
            c0 = time.process_time()
            present = present_of(sim)
            if sigma > 0:
                present = guessed(present, guess)
            # The arrivals of the last `window_s` seconds (what the service has seen by now), arriving again.
            recent = [(j.submit_s, j) for j in case.jobs if sim.now - window_s < j.submit_s <= sim.now]
            coming = expected_arrivals(recent, sim.now, window_s) if window_s > 0 else []
            new = estimate(present, make_policy(policy, seed=case.seed), bounds, track={i}, arrivals=coming).by_key[i]
            c1 = time.process_time()
            replay_cpu += c1 - c0
            if full:  # every pending job's estimate, as a service would make them all at once
                whole = estimate(present, make_policy(policy, seed=case.seed), bounds, arrivals=coming)
                full_cpu.append(time.process_time() - c1)
                full_jobs.append(len(present.pending))
                assert whole.by_key[i] == new, "a tracked replay differs from the whole one"
            made[i] = (sim.now, old, new)
    sim.run()
    rows = []
    for i, (when, old, new) in made.items():
        start = sim.jobs[i].first_start_s
        assert start is not None and start == first[i], "the second run differs from the first"
        rows.append({"id": i, "actual_s": start - when, "today_s": old,
                     "replay_s": new.start_s if new.outlook is Outlook.STARTS else None,
                     "replay_outlook": new.outlook.value})
    return {"case": case.label, "cluster": case.cluster.name, "how": case.how, "jobs": len(case.jobs),
            "waited": len(waited), "samples": rows, "cpu_s": time.process_time() - t0, "replay_cpu_s": replay_cpu,
            "full_cpu_s": full_cpu, "full_pending": full_jobs}


def hit(est: float | None, actual: float) -> bool:
    if est is None:
        return False
    return abs(est - actual) <= NEAR_S or (actual > 0 and 0.5 <= est / actual <= 2.0)


def score(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    if not rows:
        return {"n": 0, "within": math.nan, "median_abs_err_s": math.nan, "none": 0}
    err = [abs(r[key] - r["actual_s"]) if r[key] is not None else math.inf for r in rows]
    return {"n": len(rows), "within": float(np.mean([hit(r[key], r["actual_s"]) for r in rows])),
            "median_abs_err_s": float(np.median(err)), "none": sum(r[key] is None for r in rows)}


def share(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0%}"


def minutes(s: float) -> str:
    return "-" if math.isnan(s) else ("inf" if math.isinf(s) else f"{s / 60:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="tiresias", help="comma-separated: one table row per policy")
    ap.add_argument("--loads", default=",".join(map(str, LOADS)))
    ap.add_argument("--workloads", default="philly,synthetic")
    ap.add_argument("--seeds", type=int, default=10, help="held-out windows per (workload, load)")
    ap.add_argument("--window", type=int, default=300, help="jobs per window")
    ap.add_argument("--samples", type=int, default=40, help="arrivals estimated per window (at most)")
    ap.add_argument("--eligible", type=float, default=0.75, help="share of the window's first jobs sampled from")
    ap.add_argument("--sigma", type=float, default=0.0, help="log-normal spread of the guessed durations (0: exact)")
    ap.add_argument("--horizon-h", type=float, default=168.0, help="the policy replay's horizon, hours")
    ap.add_argument("--max-events", type=int, default=200_000, help="the policy replay's instants, at most")
    ap.add_argument("--full", action="store_true",
                    help="also time the replay of every pending job's estimate at each sample (as a service would)")
    ap.add_argument("--arrivals-h", type=float, default=ARRIVALS_WINDOW_S / 3600.0,
                    help="the replay repeats the arrivals of the last this many hours (0: nothing arrives)")
    ap.add_argument("--dev", action="store_true",
                    help="development windows (Philly's first three quarters, synthetic seeds training draws) to "
                         "choose settings on, instead of the held-out ones")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    policies = a.policy.split(",")
    for name in policies:
        make_policy(name)  # an unknown name fails here, before any work
    if not (0 < a.eligible <= 1) or a.samples < 1 or a.sigma < 0:
        raise SystemExit("--eligible must be in (0, 1], --samples >= 1, --sigma >= 0")
    bounds = Bounds(horizon_s=a.horizon_h * 3600.0, max_events=a.max_events)
    loads = [float(x) for x in a.loads.split(",")]
    groups = [(p, w, load) for p in policies for w in a.workloads.split(",") for load in loads]
    cases = dev_cases if a.dev else held_out_cases
    built = {(w, load): cases(w, load, a.seeds, a.window) for _p, w, load in groups}
    work = [(c, p, a.samples, a.eligible, a.sigma, bounds, a.full, a.arrivals_h * 3600.0)
            for p, w, load in groups for c in built[w, load]]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(a.jobs) as pool:
        results = list(pool.map(run_case, work))
    report: dict[str, Any] = {"policies": policies, "seeds": a.seeds, "window": a.window, "samples": a.samples,
                              "eligible": a.eligible, "sigma": a.sigma, "groups": []}
    per = len(work) // len(groups)
    every: list[dict[str, Any]] = []
    for k, (p, w, load) in enumerate(groups):
        res = results[k * per:(k + 1) * per]
        rows = [r for x in res for r in x["samples"]]
        every += rows
        report["groups"].append({"policy": p, "workload": w, "load": load, "cases": res,
                                 "today": score(rows, "today_s"), "replay": score(rows, "replay_s"),
                                 "waited": sum(x["waited"] for x in res), "jobs": sum(x["jobs"] for x in res),
                                 "cpu_s": sum(x["cpu_s"] for x in res),
                                 "replay_cpu_s": sum(x["replay_cpu_s"] for x in res)})
    report["all"] = {"today": score(every, "today_s"), "replay": score(every, "replay_s")}
    report["wall_s"] = time.perf_counter() - t0
    print_table(report)
    if a.json:
        a.json.write_text(json.dumps(report, indent=2))


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    sigma = report["sigma"]
    durations = "exact" if sigma == 0 else f"guessed, sigma {sigma:g}"
    t = Table(title=f"Start estimates at submission ({report['seeds']} held-out windows of "
                    f"{report['window']} jobs per row; durations {durations}): share within 2x of the actual wait or "
                    f"5 min (target >= {TARGET:.0%}), median |error| in min",
              title_justify="left")
    for col in ("policy", "workload", "load", "waited", "n", "actual wait\nmedian min", "today\nwithin",
                "today\nmed err", "replay\nwithin", "replay\nmed err", "replay\nno time", "replay\nCPU s/est"):
        t.add_column(col, justify="left" if col in ("policy", "workload") else "right", no_wrap=True)
    for g in report["groups"]:
        rows = [r for c in g["cases"] for r in c["samples"]]
        old, new = g["today"], g["replay"]
        actual = float(np.median([r["actual_s"] for r in rows])) if rows else math.nan
        t.add_row(g["policy"], g["workload"], f"{g['load']:g}", f"{g['waited']}/{g['jobs']}", str(old["n"]),
                  minutes(actual), share(old["within"]), minutes(old["median_abs_err_s"]),
                  share(new["within"]), minutes(new["median_abs_err_s"]), str(new["none"]),
                  f"{g['replay_cpu_s'] / max(new['n'], 1):.2f}")
    old, new = report["all"]["today"], report["all"]["replay"]
    t.add_row("all", "", "", "", str(old["n"]), "", share(old["within"]), minutes(old["median_abs_err_s"]),
              share(new["within"]), minutes(new["median_abs_err_s"]), str(new["none"]), "")
    Console(width=160).print(t)
    met = all(g["replay"]["within"] >= TARGET for g in report["groups"] if g["replay"]["n"])
    empty = sum(not g["replay"]["n"] for g in report["groups"])
    full = [(c, n) for g in report["groups"] for x in g["cases"] for c, n in zip(x["full_cpu_s"], x["full_pending"],
                                                                                  strict=True)]
    if full:
        cpu = np.array([c for c, _ in full])
        pending = np.median([n for _, n in full])
        print(f"whole-queue replays ({len(full)}, every pending job's estimate at once; {pending:.0f} "
              f"pending jobs median, {max(n for _, n in full)} at most): CPU s median {np.median(cpu):.3f}, p95 "
              f"{np.percentile(cpu, 95):.3f}, max {cpu.max():.3f}")
    print(f"target (>= {TARGET:.0%} within 2x or 5 min in every row with samples): {'met' if met else 'NOT met'}"
          + (f" ({empty} row(s) without a waiting arrival to estimate)" if empty else "")
          + f"; wall {report['wall_s']:.0f} s")


if __name__ == "__main__":
    main()

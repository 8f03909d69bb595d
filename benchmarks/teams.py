"""Teams on a dev trace: fairness, starvation and what the tenancy frame costs in JCT (issue 13's simulator target).

Held-out windows of the Philly dev trace (last quarter, model seeds training never draws) sized to a load; the jobs
are given to 4 teams with skewed demand (`team_draw`: 48/24/16/12% of the jobs), each with a quarter of the cluster
as quota and no borrowing limit. Each window runs under the policy with teams and without; printed per window and as
the mean with a 95% t interval over windows:

- Jain's index over the teams with demand (target >= 0.95),
- the largest share of a team's time in the system spent starved: under 95% of its quota while one of its pending
  jobs fits within it (target: none),
- avg JCT with teams over avg JCT of the same policy without (target <= 1.05),
- Themis' finish-time fairness: the largest rho, a job's JCT over its JCT with its team's jobs alone on the team's
  quota under the same policy (no target; 1 or less: no job did worse than on its quota alone), and the same figure
  for the run without teams against the same isolated JCTs. A maximum over jobs is heavy-tailed (one short job that
  waited), so it is summarised by its median and range over windows, not a t interval. Jobs larger than a quota have
  no rho; how many is printed.

Preemptions with teams are split into the frame's reclaims and swaps (a team's own jobs the policy preempted to start
another of its jobs beyond its quota).

    python benchmarks/teams.py [--policy tiresias] [--load 1.3] [--windows 5] [--window 500] [--half-life 3600]
        [--json out.json]

`--json` writes every window's figures (avg JCT with and without teams among them), so two policies, or two
versions of one, can be compared case by case (the windows depend only on the seed, load and trace).
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
from policies import make_policy
from scheduler.core.simulator import Simulator
from scheduler.core.tenancy import Teams
from scheduler.core.traces.generator import team_draw

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly_day60.csv"
TEAMS = 4


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="tiresias")
    ap.add_argument("--load", type=float, default=1.3)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--window", type=int, default=500, help="jobs per window")
    ap.add_argument("--half-life", type=float, default=3600.0, help="fair-share half-life, seconds")
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--json", type=Path, help="write each window's figures here")
    args = ap.parse_args()
    if not args.trace.is_file():
        print(f"{args.trace}: not found (the dev traces live in ../shared/traces beside the project)")
        return 1
    scenarios = held_out([str(args.trace)], ["pcie-v100"], args.window, (args.load, args.load), args.windows)
    jains, starved, ratios, rhos, rhos_plain = [], [], [], [], []
    rows: list[dict[str, object]] = []
    print(f"{args.policy} on {args.trace.name}, load {args.load}, {TEAMS} teams (skewed demand), "
          f"half-life {args.half_life:g} s")
    for k, sc in enumerate(scenarios):
        cluster, jobs = sc.build()
        names = team_draw(np.random.default_rng(1000 + k), TEAMS, len(jobs))
        jobs = [replace(j, team=t) for j, t in zip(jobs, names, strict=True)]
        quota = cluster.num_gpus / TEAMS
        teams = Teams.parse({"half_life_s": args.half_life,
                             "teams": [{"name": f"team{i}", "quota_gpus": quota} for i in range(TEAMS)]},
                            cluster.num_gpus)
        t0 = time.perf_counter()
        plain = Simulator(cluster, jobs, make_policy(args.policy)).run()
        shared = Simulator(cluster, jobs, make_policy(args.policy), teams=teams).run()
        assert shared.teams is not None and shared.isolated is not None
        report = shared.teams
        alone = shared.isolated.jct
        rho_plain = max((j.end_s - j.spec.submit_s) / alone[j.id] for j in plain.jobs
                        if j.end_s is not None and j.id in alone)  # the same jobs: ids follow the sorted trace
        worst = max(t["starved_s"] / t["in_system_s"] for t in report["teams"].values() if t["in_system_s"] > 0)
        ratio = shared.metrics["avg_jct_s"] / plain.metrics["avg_jct_s"]
        jains.append(report["jain"])
        starved.append(worst)
        ratios.append(ratio)
        rhos.append(report["rho_max"])
        rhos_plain.append(rho_plain)
        rows.append({"window": k, "scenario": sc.label, "gpus": cluster.num_gpus,
                     "avg_jct_s": shared.metrics["avg_jct_s"], "avg_jct_s_without_teams": plain.metrics["avg_jct_s"],
                     "p99_jct_s": shared.metrics["p99_jct_s"], "jain": report["jain"], "worst_starved": worst,
                     "rho_max": report["rho_max"], "rho_max_without_teams": rho_plain,
                     "preemptions": shared.metrics["preemptions"], "reclaims": report["reclaims"],
                     "swaps": report["swaps"], "teams": report["teams"]})
        used = ", ".join(f"{n} {t['gpu_hours']:.0f}/{t['quota_gpu_hours']:.0f}"
                         for n, t in sorted(report["teams"].items()))
        print(f"  window {k}: {cluster.num_gpus} GPUs, Jain {report['jain']:.3f}, worst starved {worst:.1%}, "
              f"avg JCT x{ratio:.3f} ({shared.metrics['preemptions']} preemptions: {report['reclaims']} reclaims, "
              f"{report['swaps']} in swaps; {plain.metrics['preemptions']} without teams), max rho "
              f"{report['rho_max']:.2f} (without teams {rho_plain:.2f}; {report['rho_excluded']} jobs larger than "
              f"their quota); GPU-h used/quota: {used}  [{time.perf_counter() - t0:.1f} s]")
    print(f"Jain's index: {interval_text(jains)}")
    print(f"worst team's starved share of its time: {interval_text(starved)} (max {max(starved):.1%})")
    print(f"avg JCT with teams / without: {interval_text(ratios)}")
    for label, xs in (("with teams", rhos), ("without teams", rhos_plain)):
        print(f"finish-time fairness, max rho {label}: median {np.median(xs):.2f} over windows, range "
              f"[{min(xs):.2f}, {max(xs):.2f}]")
    if args.json is not None:
        args.json.write_text(json.dumps({"policy": args.policy, "load": args.load, "trace": args.trace.name,
                                         "half_life_s": args.half_life, "windows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

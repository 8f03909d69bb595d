"""Digests of what the scheduling rules decide: one SHA-256 per (trace window, policy) of `corral simulate`'s JSON.

    python benchmarks/rule_digests.py [--tree PATH] [--limit 1500] [--policies fifo,...] [--json out.json]

A refactoring of the rules (admission, the ask-apply loop, progress rates, queue order, preemption) must leave every
decision as it was: run this before and after (`--tree` points at another checkout, e.g. a `git worktree` of the
commit before) and compare the lines. Each digest covers the whole result `corral simulate --json` writes for one
policy (its metrics at full precision: JCT mean and percentiles, queueing, slowdowns, utilisation, preemptions,
event count; one decision changed anywhere moves them) except the wall clock, which differs run to run.

Windows: the first `--limit` jobs of the Philly trace on 4 pcie-v100 nodes, and of the Alibaba trace on 8 pcie-t4
nodes (both from `../shared/traces`; the script says so and stops if they are absent), and a synthetic mix shared
by three teams under quotas (the tenancy frame) on 2 dgx-a100 nodes. Policies: every heuristic the
registry holds (`policies.available()`, the names without `:NAME`), plus `rl:default`.

The RL environments are digested too (window `env`): a few episodes of `corral/Placement-v0` (without teams and inside
the tenancy frame) and of `corral/DeepShare-v0`, each with seeded random valid actions; the digest covers every
observation, mask, reward and the final metrics, so one step decided differently anywhere moves it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
WINDOWS = {  # name: (trace file or synthetic spec, cluster, teams YAML or None)
    "philly": ("philly_day60.csv", "pcie-v100:4", None),
    "alibaba": ("alibaba_openb_before_day130.csv", "pcie-t4:8", None),
    # The tenancy frame's rules (quotas, borrowing, reclaim, swaps), on a mix with shares and inference services.
    "teams": ("synthetic:600,iat=240,frac=0.2,inference=0.1,teams=3", "dgx-a100:2",
              ("half_life_s: 86400\nteams:\n"
               "  - {name: team0, quota_gpus: 6}\n  - {name: team1, quota_gpus: 6}\n"
               "  - {name: team2, quota_gpus: 4, borrow_limit_gpus: 12}\n")),
}
WALL_CLOCK = {"wall_s", "wall_clock_s", "elapsed_s"}
# Episodes of the environments: (label, environment class, its arguments, reset seed). Runs in the checked tree.
ENV_EPISODES = r"""
import hashlib, json, sys
import numpy as np
from agents.env import PlacementEnv
from agents.deepshare_env import DeepShareEnv
EPISODES = [
    ("placement", PlacementEnv, dict(window=300), 0),
    ("placement", PlacementEnv, dict(window=300), 1),
    ("placement-teams", PlacementEnv, dict(window=300, team_share=1.0), 0),
    ("placement-teams", PlacementEnv, dict(window=300, team_share=1.0), 1),
    ("placement-teams", PlacementEnv, dict(window=300, team_share=1.0), 2),
    ("deepshare", DeepShareEnv, dict(window=60, max_decisions=3000), 0),
]
out = {}
for label, cls, kwargs, seed in EPISODES:
    env, rng, h = cls(**kwargs), np.random.default_rng(seed), hashlib.sha256()
    obs, _ = env.reset(seed=seed)
    while True:
        mask = env.action_masks() if hasattr(env, "action_masks") else np.ones(env.action_space.n, dtype=bool)
        h.update(np.asarray(obs, dtype=np.float32).tobytes()); h.update(np.asarray(mask, dtype=bool).tobytes())
        obs, reward, done, truncated, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        h.update(repr(float(reward)).encode())
        if done or truncated:
            h.update(json.dumps(info.get("metrics"), sort_keys=True).encode())
            break
    key = f"{label}/{seed}"
    out[key] = h.hexdigest()[:16]
json.dump(out, sys.stdout)
"""


def _scrub(value: object) -> object:
    """The result without wall-clock fields (the only part that differs between two identical runs)."""
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in WALL_CLOCK}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _policies(tree: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-c", "from policies import available; print(','.join(available()))"],
                         cwd=tree, env=os.environ | {"PYTHONPATH": str(tree)}, check=True, capture_output=True,
                         text=True).stdout.strip()
    return [p for p in out.split(",") if ":" not in p] + ["rl:default"]


def digests(tree: Path, limit: int, policies: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for window, (trace, cluster, teams) in WINDOWS.items():
            path = Path(tmp) / f"{window}.json"
            source = trace if trace.startswith("synthetic:") else str(TRACES / trace)
            cmd = [sys.executable, "-c", "from scheduler.cli.commands import main; main()", "simulate",
                   "--trace", source, "--limit", str(limit), "--cluster", cluster,
                   "--policy", ",".join(policies), "--seed", "0", "--json", str(path)]
            if teams is not None:
                (Path(tmp) / "teams.yaml").write_text(teams)
                cmd += ["--teams", str(Path(tmp) / "teams.yaml")]
            run = subprocess.run(cmd, cwd=tree, env=os.environ | {"PYTHONPATH": str(tree)}, capture_output=True,
                                 text=True, check=False)  # its return code is checked below, with its stderr
            if run.returncode != 0:
                sys.exit(f"corral simulate failed on {window} in {tree}:\n{run.stderr[-2000:]}")
            data = json.loads(path.read_text())
            out[window] = {}
            for policy, result in data["policies"].items():
                text = json.dumps(_scrub(result), sort_keys=True, separators=(",", ":"))
                out[window][policy] = hashlib.sha256(text.encode()).hexdigest()[:16]
    run = subprocess.run([sys.executable, "-c", ENV_EPISODES], cwd=tree, env=os.environ | {"PYTHONPATH": str(tree)},
                         capture_output=True, text=True, check=False)  # checked below, with its stderr
    if run.returncode != 0:
        sys.exit(f"the environment episodes failed in {tree}:\n{run.stderr[-2000:]}")
    out["env"] = json.loads(run.stdout)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout to run (default: this one)")
    ap.add_argument("--limit", type=int, default=1500, help="jobs per trace window")
    ap.add_argument("--policies", default=None, help="comma-separated (default: every heuristic and rl:default)")
    ap.add_argument("--json", type=Path, default=None, help="also write the digests here")
    args = ap.parse_args()
    if not TRACES.is_dir():
        sys.exit(f"the traces are not at {TRACES} (the shared folder beside the project): nothing to digest")
    tree = args.tree.resolve()
    policies = args.policies.split(",") if args.policies else _policies(tree)
    result = digests(tree, args.limit, policies)
    print(f"{'window':<8} {'policy':<18} sha256[:16] of `corral simulate --json` (wall clock removed)")
    for window, by_policy in result.items():
        for policy, digest in by_policy.items():
            print(f"{window:<8} {policy:<18} {digest}")
    if args.json is not None:
        args.json.write_text(json.dumps({"tree": str(tree), "limit": args.limit, "digests": result}, indent=2) + "\n")


if __name__ == "__main__":
    main()

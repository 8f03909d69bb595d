"""Episodes: a window of jobs on a cluster sized for a target offered load, drawn for training or held out for tests.

A `Scenario` is a small, JSON-able recipe, so the RL environment, the evaluation callback and the baselines it is
compared with build exactly the same jobs on exactly the same cluster. Real-trace windows come from the part of a
trace before `scheduler.core.traces.HOLDOUT_FROM` when training and from the part after it when evaluating, so a reported
figure is always on jobs the agent never saw.

Load is `scheduler.core.traces.offered_load` (GPUs busy during the window's arrivals if every job started on arrival):
a trace window gets the node count that brings it nearest the target, and its arrivals are compressed or stretched
where no node count gets within 5% (`scheduler.core.traces.fit_load`: Alibaba's 8-GPU pods keep small clusters from
shrinking further); a synthetic window keeps its node count and has its arrival times rescaled to the target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from scheduler.core.elastic import elastic_window
from scheduler.core.model import PRESETS, Cluster, JobSpec, parse_cluster
from scheduler.core.tenancy import Teams
from scheduler.core.traces import (
    TraceError,
    fit_load,
    load_trace,
    offered_load,
    scale_to_load,
    synthetic,
    window,
    window_starts,
)
from scheduler.core.traces.generator import HIGH_PRIORITY, team_draw

__all__ = ["MIX_PRESETS", "SYNTHETIC", "SYNTHETIC_MIXES", "Scenario", "ScenarioSource", "draw", "held_out", "is_synthetic", "scale_to_load", "trace_jobs"]

SYNTHETIC = "synthetic"
# Synthetic mixes (`synthetic:MIX` as a workload): settings of `scheduler.core.traces.synthetic` for the regimes a learned
# policy must not lose in. Training draws them; `benchmarks/decision_quality.py` evaluates on unseen seeds of each.
SYNTHETIC_MIXES: dict[str, dict[str, Any]] = {
    "default": {},
    "short": {"median_duration_s": 120.0, "duration_sigma": 2.5},  # most jobs minutes long, a heavy tail
    "long": {"median_duration_s": 4 * 3600.0, "duration_sigma": 1.0},  # hours-long jobs, a narrower spread
    "fractional": {"frac_share": 0.6, "inference_share": 0.1},  # most jobs take a GPU share (MPS)
    "multinode": {"sizes": {1: 0.45, 2: 0.1, 4: 0.1, 8: 0.15, 16: 0.15, 32: 0.05}},  # gangs spanning servers
    # LLM-style gangs of 64-512 GPUs beside the usual jobs: for clusters of 1,024 GPUs and more, on a fabric
    # (benchmarks/decision_quality.py's gangs-* workloads); 5% of jobs, about 80% of the GPU-time.
    "gangs": {"large_gang_share": 0.05},
}
# Mixes made for particular clusters: drawn (for training, validation and teachers) on these presets, with their
# fabrics and, where given, at least this many nodes (`PRESET[:NODES][@FABRIC]`), whatever presets are asked for the
# other workloads. The gangs' LLM profiles need 80 GB GPUs, and what they are for is the tiers of a datacentre fabric.
# Their clusters grow to hold the window's largest gang (32-64 servers). At the 128 servers of the benchmark's
# gangs-*-1024 workloads another heuristic is best (topology since its compactness waits); agents trained there
# (`hgx-h100:128@...`, taught by contention-greedy on 2026-11-26 and by topology on 2026-11-28) were not kept: the
# second matched topology within 2% and was not better than the shipped agent (agents/zoo/README.md).
MIX_PRESETS: dict[str, tuple[str, ...]] = {
    "gangs": ("hgx-h100@fat-tree-3:1", "hgx-h100@rail-optimised"),
}


def is_synthetic(workload: str) -> bool:
    return workload == SYNTHETIC or workload.startswith(SYNTHETIC + ":")


def synthetic_mix(workload: str) -> dict[str, Any]:
    """The generator settings of `synthetic` or `synthetic:MIX`; TraceError naming the mixes for an unknown one."""
    mix = workload.partition(":")[2] or "default"
    if mix not in SYNTHETIC_MIXES:
        raise TraceError(f"--workload: unknown synthetic mix {mix!r}; choose synthetic or synthetic:MIX with MIX one "
                         f"of {', '.join(SYNTHETIC_MIXES)}")
    return SYNTHETIC_MIXES[mix]
MODEL_SEEDS = 4  # model assignments drawn for trace windows in training (each seed a different mix of models)
TEAM_COUNTS = (2, 4)  # inclusive range of teams a training window with teams is shared by
# Fair-share half-life of windows with teams: as `benchmarks/teams.py`, short enough that usage within a window of a
# few hundred jobs matters (the 7-day default would make it the window's whole history).
TEAM_HALF_LIFE_S = 3600.0
PRIORITY_DRAW = (0.1, 0.05)  # a window with priorities: this share of jobs at HIGH_PRIORITY, this share not preemptible
# An elastic window: this share of its whole-GPU training jobs elastic from half to twice their size, as issue 49's
# elastic mix (`benchmarks/elastic.py`).
ELASTIC_DRAW = 0.5


def presets_for(workload: str, presets: Sequence[str]) -> Sequence[str]:
    """The presets a workload is drawn on: its mix's own (`MIX_PRESETS`) or the ones asked for."""
    if is_synthetic(workload):
        return MIX_PRESETS.get(workload.partition(":")[2], presets)
    return presets


def split_preset(preset: str) -> tuple[str, int, str]:
    """`PRESET[:NODES][@FABRIC]` -> (the node preset, the fewest nodes (1 if not given), the cluster suffix for
    `parse_cluster`: "" or "@FABRIC")."""
    head, at, fabric = preset.partition("@")
    name, _, nodes = head.partition(":")
    return name, int(nodes or 1), f"{at}{fabric}"


@cache
def trace_jobs(path: str, seed: int) -> tuple[JobSpec, ...]:
    return tuple(load_trace(path, seed=seed).jobs)


@dataclass(frozen=True)
class Scenario:
    """`workload` is "synthetic" or a trace path; `seed` picks the trace's model assignment or the synthetic draw;
    `nodes` is the synthetic cluster's size (trace windows are sized to `load`)."""

    workload: str
    preset: str
    load: float
    window: int
    seed: int
    start: int = 0
    nodes: int = 0
    teams: int = 0  # shared by this many teams (`tenancy`), 0: no teams
    priorities: bool = False  # some jobs drawn at a high priority, some not preemptible (`PRIORITY_DRAW`)
    elastic: bool = False  # `ELASTIC_DRAW` of the whole-GPU training jobs elastic (`scheduler.core.elastic`)

    @property
    def label(self) -> str:
        name = self.workload if is_synthetic(self.workload) else Path(self.workload).stem
        where = f"seed {self.seed}" if is_synthetic(self.workload) else f"jobs {self.start}+{self.window}, seed {self.seed}"
        shared = f", {self.teams} teams" if self.teams else ""
        ranked = ", priorities" if self.priorities else ""
        elastic = ", elastic" if self.elastic else ""
        return f"{name} ({where}) on {self.preset}, target load {self.load:.2f}{shared}{ranked}{elastic}"

    def build(self) -> tuple[Cluster, list[JobSpec]]:
        """The cluster and the jobs; with teams, each job's team is drawn with skewed demand (`team_draw`: team k
        submits in proportion to 1 / (k + 1)), from the scenario's own seed."""
        cluster, jobs = self._build()
        if self.teams:
            names = team_draw(np.random.default_rng([self.seed, self.start, self.teams]), self.teams, len(jobs))
            jobs = [replace(j, team=t) for j, t in zip(jobs, names, strict=True)]
        if self.priorities:  # as `synthetic:N,high=F,pinned=F` draws them, from the scenario's own seed
            high_share, pinned_share = PRIORITY_DRAW
            g = np.random.default_rng([self.seed, self.start, 7])
            high = g.random(len(jobs)) < high_share
            pinned = g.random(len(jobs)) < pinned_share
            jobs = [replace(j, priority=HIGH_PRIORITY if h else j.priority, preemptible=j.preemptible and not p)
                    for j, h, p in zip(jobs, high.tolist(), pinned.tolist(), strict=True)]
        if self.elastic:  # as `corral simulate --elastic` and `benchmarks/elastic.py` draw them
            jobs = elastic_window(jobs, ELASTIC_DRAW, self.seed + self.start)
        return cluster, jobs

    def tenancy(self, cluster: Cluster) -> Teams | None:
        """The teams sharing the cluster: each an equal share of it as quota, no borrowing limit (as
        `benchmarks/teams.py`); None without teams."""
        if not self.teams:
            return None
        quota = cluster.num_gpus / self.teams
        return Teams.parse({"half_life_s": TEAM_HALF_LIFE_S,
                            "teams": [{"name": f"team{k}", "quota_gpus": quota} for k in range(self.teams)]},
                           cluster.num_gpus)

    def _build(self) -> tuple[Cluster, list[JobSpec]]:
        preset, fewest, fabric = split_preset(self.preset)
        gpn = PRESETS[preset].gpus_per_node
        if is_synthetic(self.workload):
            nodes = max(self.nodes, fewest)
            jobs = synthetic(self.window, seed=self.seed, **synthetic_mix(self.workload)).jobs
            biggest = max(j.workers for j in jobs)
            nodes = max(nodes, -(-biggest // gpn))
            return parse_cluster(f"{preset}:{nodes}{fabric}"), scale_to_load(jobs, nodes * gpn, self.load)
        fit = fit_load(window(trace_jobs(self.workload, self.seed), self.start, self.window), gpn, self.load)
        return parse_cluster(f"{preset}:{fit.nodes}{fabric}"), fit.jobs

    def realised_load(self) -> float:
        cluster, jobs = self.build()
        return offered_load(jobs, cluster.num_gpus)


def draw(
    rng: np.random.Generator, workloads: Sequence[str], presets: Sequence[str], nodes: tuple[int, int],
    window_size: int, load: tuple[float, float], part: str = "train", team_share: float = 0.0,
    priority_share: float = 0.0, elastic_share: float = 0.0,
) -> Scenario:
    """A random scenario: a workload, a preset, a load in the range; trace windows from `part` of the trace; with
    probability `team_share`, shared by `TEAM_COUNTS` teams (none drawn when it is 0, so the draws are those of
    before teams); with probability `elastic_share`, an elastic mix (likewise drawn only when it is above 0)."""
    workload = workloads[int(rng.integers(len(workloads)))]
    own = presets_for(workload, presets)
    preset = own[int(rng.integers(len(own)))]
    target = float(rng.uniform(*load))
    teams = 0
    if team_share > 0 and rng.random() < team_share:
        teams = int(rng.integers(TEAM_COUNTS[0], TEAM_COUNTS[1] + 1))
    # Drawn only when asked for: without it every draw is the one made before priorities existed.
    ranked = priority_share > 0 and bool(rng.random() < priority_share)
    elastic = elastic_share > 0 and bool(rng.random() < elastic_share)
    if is_synthetic(workload):
        return Scenario(workload, preset, target, window_size, int(rng.integers(2**31)),
                        nodes=int(rng.integers(nodes[0], nodes[1] + 1)), teams=teams, priorities=ranked,
                        elastic=elastic)
    seed = int(rng.integers(MODEL_SEEDS))
    n = len(trace_jobs(workload, seed))
    lo, hi = window_starts(n, window_size, part)
    return Scenario(workload, preset, target, min(window_size, n), seed, start=int(rng.integers(lo, hi)), teams=teams,
                    priorities=ranked, elastic=elastic)


class ScenarioSource:
    """Where an environment's episodes come from: a fixed list cycled in order (evaluation), or fresh draws.

    `next(rng, options)` honours the reset options both environments accept: `scenario` (a Scenario or its dict),
    or `workload` and `window` to draw with.
    """

    def __init__(self, workloads: Sequence[str], presets: Sequence[str], nodes: tuple[int, int], window: int,
                 load: tuple[float, float], part: str, scenarios: Sequence[Scenario] | None,
                 team_share: float = 0.0, priority_share: float = 0.0, elastic_share: float = 0.0) -> None:
        self.workloads = list(workloads)
        self.elastic_share = elastic_share
        self.team_share = team_share
        self.priority_share = priority_share
        self.presets = list(presets)
        self.nodes = nodes
        self.window = window
        self.load = load
        self.part = part
        self.scenarios = list(scenarios or [])
        self._next = 0

    def rewind(self) -> None:
        """Start the fixed list over (an evaluation runs each scenario once, in order)."""
        self._next = 0

    def next(self, rng: np.random.Generator, options: Mapping[str, Any]) -> Scenario:
        if "scenario" in options:
            sc = options["scenario"]
            return sc if isinstance(sc, Scenario) else Scenario(**sc)
        if self.scenarios:
            sc = self.scenarios[self._next % len(self.scenarios)]
            self._next += 1
            return sc
        workloads = [options["workload"]] if "workload" in options else self.workloads
        return draw(rng, workloads, self.presets, self.nodes, int(options.get("window", self.window)), self.load,
                    self.part, float(options.get("team_share", self.team_share)),
                    float(options.get("priority_share", self.priority_share)),
                    float(options.get("elastic_share", self.elastic_share)))


def held_out(
    workloads: Sequence[str], presets: Sequence[str], window_size: int, load: tuple[float, float], count: int,
    seed: int = 0, nodes: tuple[int, int] = (4, 8), part: str = "test",
) -> list[Scenario]:
    """`count` scenarios per workload that training never draws: trace windows from `part` with model seeds beyond
    the training ones, synthetic draws from a seed range training's generator does not reach.

    `part="test"` (the hold-out, last quarter) is for reporting; `part="train"` gives validation windows for choosing
    among checkpoints: from the part training may see, with model assignments and synthetic seeds it never draws,
    so choosing on them never looks at the hold-out."""
    rng = np.random.default_rng(10_000 + seed + (0 if part == "test" else 777))
    synthetic_base = 2**31 + (0 if part == "test" else 500_000)
    out = []
    for workload in workloads:
        own = presets_for(workload, presets)
        for k in range(count):
            preset = own[k % len(own)]
            target = float(rng.uniform(*load))
            if is_synthetic(workload):
                out.append(Scenario(workload, preset, target, window_size, synthetic_base + 1000 * seed + k,
                                    nodes=int(rng.integers(nodes[0], nodes[1] + 1))))
                continue
            model_seed = MODEL_SEEDS + k
            n = len(trace_jobs(workload, model_seed))
            lo, hi = window_starts(n, window_size, part)
            out.append(Scenario(workload, preset, target, min(window_size, n), model_seed,
                                start=int(rng.integers(lo, hi))))
    return out


def check_workloads(workloads: Sequence[str]) -> None:
    """Refuse unknown workloads before any work starts (loading a trace here also catches malformed files)."""
    if not workloads:
        raise TraceError("--workload: give at least one (synthetic or a trace path)")
    for w in workloads:
        if is_synthetic(w):
            synthetic_mix(w)
        else:
            if not Path(w).is_file():
                raise TraceError(f"--workload: {w} is neither 'synthetic' nor an existing trace file")
            trace_jobs(w, 0)

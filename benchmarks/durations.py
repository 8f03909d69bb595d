"""Durations learned from history (issue 50, item 2): the predictor's error on the held-out part of real traces.

    python benchmarks/durations.py [--traces alibaba,philly] [--json out.json]

Each trace is replayed in submission order (`scheduler.core.durations.ended_before`): every job is predicted only
from the jobs that ended before it was submitted (a job ends at its submit time plus its run time, the earliest it
could), the predictor warmed up the same causal way on the part of the trace before the hold-out and scored on the
held-out part (jobs from `HOLDOUT_FROM` of the trace on, the split `corral train` never draws). The baseline is the
trace's global median, also causal: the median run time of every job that ended before the job was submitted.

Errors are natural-log: |ln(predicted median / actual run time)|; "off > 2x" counts |error| > ln 2. Printed per
trace: the median absolute log-error of the predictor and of the global median, their ratio (issue 50's target
<= 0.5), the share off by more than 2x (target < 25%), the share whose run time fell in the predicted 10-90% range
(80% for a calibrated spread), which groups answered, and microseconds per job (one `observe` and one `predict`).

Rows besides the default: other groupings tried (`VARIANTS`, the same causal replay), and "hindsight": each held-out
job predicted by the median of its default group over the whole trace but itself (not causal: it sees the future).
It bounds what grouping on these traits can reach, whatever the learning rule. Last, the default scored on the
earlier part (jobs from a quarter of the trace to the hold-out): the settings (`RECENT`, `MIN_SAMPLES`, `LEVELS`) were
chosen looking at both parts, so the two rows together say how far a figure moves between parts of one trace.

Traits: the Alibaba trace has no users, no telling names (`openb-pod-1234`) and no models (the loader draws them at
random, so they are left out); it has the pod's `qos`, `cpu_milli`, `memory_mib` and GPU share (`Trace.features`).
The Philly trace has only the GPU count.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.core.durations import LEVELS, DurationPredictor, ended_before, traits
from scheduler.core.jobs import JobSpec
from scheduler.core.traces import HOLDOUT_FROM, load_trace

TRACES = {
    "alibaba": ROOT.parent / "shared" / "traces" / "alibaba_openb_before_day130.csv",
    "philly": ROOT.parent / "shared" / "traces" / "philly_day60.csv",
}
LN2 = math.log(2.0)
TARGET_RATIO, TARGET_OFF2X = 0.5, 0.25
# Other groupings tried: (label, levels, keyword arguments of DurationPredictor).
VARIANTS: tuple[tuple[str, tuple[tuple[str, ...], ...], dict[str, int]], ...] = (
    ("qos only", (("qos",),), {}),
    ("qos, size", (("qos", "gpus"), ("qos",)), {}),
    ("qos, CPU, memory (no size)", (("qos", "cpu_milli", "memory_mib"), ("qos",)), {}),
    ("CPU, memory, size (no qos)", (("cpu_milli", "memory_mib", "gpus"), ("cpu_milli", "memory_mib"), ("gpus",)), {}),
    ("size only", (("gpus",),), {}),
    ("default, min 2 samples", LEVELS, {"min_samples": 2}),
    ("default, min 10 samples", LEVELS, {"min_samples": 10}),
    ("default, centred on last 4", LEVELS, {"recent": 4}),
    ("default, centred on last 16", LEVELS, {"recent": 16}),
    ("default, centred on all 64 kept", LEVELS, {"recent": 64}),
    ("default, 256 kept, centred on all", LEVELS, {"window": 256, "recent": 256, "all_window": 4096}),
    ("no groups: last 8 jobs", (), {}),
    ("no groups: every job", (), {"all_window": 1 << 20, "recent": 1 << 20}),
)


@dataclass
class Scores:
    label: str
    err: list[float]  # |ln error| per held-out job
    base: list[float]  # the global median's, same jobs
    inside: int = 0  # run time within the predicted 10-90% range
    levels: Counter[str] | None = None
    us_per_job: float = float("nan")

    @property
    def n(self) -> int:
        return len(self.err)


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    m = len(s)
    return (s[m // 2] + s[(m - 1) // 2]) / 2 if m else float("nan")


def _off(xs: Sequence[float]) -> float:
    return sum(1 for x in xs if x > LN2) / len(xs) if xs else float("nan")


def replay(label: str, jobs: Sequence[JobSpec], job_traits: Sequence[Mapping[str, str]], split: int,
           predictor: DurationPredictor, until: int | None = None) -> Scores:
    """The causal replay: observe what ended, predict, score jobs `split`.. (`until`, else the end) against the
    causal global median."""
    finished: list[float] = []  # log run times of every job ended so far, sorted (the global median's history)
    sc = Scores(label, [], [], levels=Counter())
    t0 = time.perf_counter()
    for i, ended in ended_before(jobs):
        for k in ended:
            predictor.observe(job_traits[k], jobs[k].duration_s)
            bisect.insort(finished, math.log(jobs[k].duration_s))
        est = predictor.predict(job_traits[i])
        if i < split or (until is not None and i >= until) or est is None:
            continue
        actual = math.log(jobs[i].duration_s)
        sc.err.append(abs(math.log(est.median_s) - actual))
        sc.base.append(abs(_median(finished) - actual))
        sc.inside += est.quantiles_s[0] <= jobs[i].duration_s <= est.quantiles_s[-1]
        assert sc.levels is not None
        sc.levels[", ".join(est.basis) or "all jobs"] += 1
    sc.us_per_job = (time.perf_counter() - t0) / len(jobs) * 1e6  # includes the baseline's upkeep: an upper bound
    return sc


def hindsight(jobs: Sequence[JobSpec], job_traits: Sequence[Mapping[str, str]], split: int, min_samples: int) -> Scores:
    """Not causal: each held-out job predicted by its default group's median over the whole trace but itself."""
    groups: dict[tuple[int, tuple[str, ...]], list[float]] = {}
    logs = [math.log(j.duration_s) for j in jobs]
    keys = []
    for t, x in zip(job_traits, logs, strict=True):
        ks = [(i, tuple(t[f] for f in lv)) for i, lv in enumerate(LEVELS) if all(t.get(f) for f in lv)]
        keys.append(ks)
        for k in ks:
            groups.setdefault(k, []).append(x)
    overall = _median(logs)
    sc = Scores("hindsight (not causal)", [], [])
    for i in range(split, len(jobs)):
        pred = _median([x for j, x in enumerate(logs) if j != i]) if len(logs) > 1 else overall
        for k in keys[i]:
            g = list(groups[k])
            g.remove(logs[i])
            if len(g) >= min_samples:
                pred = _median(g)
                break
        sc.err.append(abs(pred - logs[i]))
        sc.base.append(abs(overall - logs[i]))
    return sc


def run_trace(name: str, path: Path) -> list[Scores]:
    trace = load_trace(str(path))
    jobs = trace.jobs
    feats = trace.features or tuple({} for _ in jobs)
    # A model the loader drew at random tells nothing of the run time: only the Corral format's models are given.
    job_traits = [traits(j, f, model_given=trace.format == "corral") for j, f in zip(jobs, feats, strict=True)]
    split = int(len(jobs) * HOLDOUT_FROM)
    out = [replay("default (LEVELS)", jobs, job_traits, split, DurationPredictor())]
    for label, levels, kwargs in VARIANTS:
        if levels and levels is not LEVELS and not any(all(f in t for f in levels[0]) for t in job_traits):
            continue  # a grouping on traits this trace does not have
        out.append(replay(label, jobs, job_traits, split, DurationPredictor(levels, **kwargs)))
    out.append(hindsight(jobs, job_traits, split, DurationPredictor().min_samples))
    # The same default on the earlier part (from a quarter of the trace to the hold-out), where its settings could
    # have been chosen without looking at the held-out part: how much the figures move from one part to the next.
    out.append(replay("default, on the earlier part", jobs, job_traits, split // 3, DurationPredictor(), split))
    return out


def speed(jobs: int = 100_000, users: int = 20_000) -> tuple[float, float, int]:
    """Microseconds per `observe` and per `predict` on jobs of `users` distinct users (most groups new: the eviction
    path), and the groups kept at the end (at most `MAX_GROUPS`)."""
    p = DurationPredictor()
    batch = [{"user": f"u{i % users}", "pattern": f"job-# {i % 7}", "model": "ResNet-50", "gpus": str(1 << (i % 4))}
             for i in range(jobs)]
    t0 = time.perf_counter()
    for i, t in enumerate(batch):
        p.observe(t, 60.0 + i % 3600)
    t1 = time.perf_counter()
    for t in batch:
        p.predict(t)
    t2 = time.perf_counter()
    return (t1 - t0) / jobs * 1e6, (t2 - t1) / jobs * 1e6, len(p)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default="alibaba,philly", help=f"comma-separated, of {', '.join(TRACES)}")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    console = Console(width=150)
    report: dict[str, object] = {}
    for name in args.traces.split(","):
        if name not in TRACES:
            raise SystemExit(f"--traces: unknown trace {name!r}; choose from {', '.join(TRACES)}")
        path = TRACES[name]
        if not path.is_file():
            console.print(f"{path}: not found (the dev traces live in ../shared/traces beside the project)")
            return 1
        rows = run_trace(name, path)
        table = Table(title=f"{path.name}: held-out jobs from {HOLDOUT_FROM:g} of the trace, natural-log errors")
        for col in ("predictor", "held-out jobs", "median |ln err|", "global median's", "ratio (<= 0.5)",
                    "off > 2x (< 25%)", "global's off > 2x", "in 10-90%", "us/job"):
            table.add_column(col, justify="left" if col == "predictor" else "right", no_wrap=col == "predictor")
        figures: list[dict[str, object]] = []
        first: tuple[float, float] | None = None  # the default's ratio and share off > 2x
        for sc in rows:
            med, base = _median(sc.err), _median(sc.base)
            ratio = med / base if base > 0 else float("nan")
            inside = f"{sc.inside / sc.n:.0%}" if sc.levels is not None else "-"
            us = f"{sc.us_per_job:.0f}" if math.isfinite(sc.us_per_job) else "-"
            table.add_row(sc.label, str(sc.n), f"{med:.3f}", f"{base:.3f}", f"{ratio:.2f}", f"{_off(sc.err):.0%}",
                          f"{_off(sc.base):.0%}", inside, us)
            figures.append({"predictor": sc.label, "jobs": sc.n, "median_abs_ln_error": med,
                            "global_median_abs_ln_error": base, "ratio": ratio, "off_2x": _off(sc.err),
                            "global_off_2x": _off(sc.base), "in_10_90": sc.inside / sc.n if sc.levels else None,
                            "groups": dict(sc.levels or {}), "us_per_job": sc.us_per_job})
            first = first or (ratio, _off(sc.err))
        console.print(table)
        assert first is not None and rows[0].levels is not None
        answered = ", ".join(f"{k or 'all jobs'}: {v}" for k, v in rows[0].levels.most_common())
        console.print(f"  default: groups that answered: {answered}")
        ok_ratio, ok_off = first[0] <= TARGET_RATIO, first[1] < TARGET_OFF2X
        console.print(f"  targets: ratio <= {TARGET_RATIO} {'met' if ok_ratio else 'NOT met'}; "
                      f"off > 2x < {TARGET_OFF2X:.0%} {'met' if ok_off else 'NOT met'}")
        report[name] = figures
    obs_us, pred_us, kept = speed()
    console.print(f"speed: {obs_us:.1f} us per observe, {pred_us:.1f} us per predict (100,000 jobs of 20,000 users; "
                  f"{kept} groups kept, the cap)")
    report["speed_us"] = {"observe": obs_us, "predict": pred_us, "groups_kept": kept}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

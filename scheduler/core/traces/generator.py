"""Synthetic workloads: a Philly-like job generator and the `synthetic:N,...` spec that names one.

Synthetic workloads (`synthetic()`, or the path `synthetic:N[,iat=S][,frac=F][,inference=F][,teams=T][,high=F]
[,pinned=F]`): Poisson arrivals,
lognormal durations near Philly's (median 15 min, sigma 2, clipped to [10 s, 7 days], longer for larger jobs), sizes
1/2/4/8/16/32 GPUs (mostly 1), GPU shares 0.25/0.5/0.75, models by the rule of `scheduler.core.traces.models`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from scheduler.core.model import DEFAULT_TEAM, JobKind, JobSpec
from scheduler.core.traces.models import draw_models
from scheduler.core.traces.trace import Trace, TraceError
from scheduler.core.workloads import catalog

# Synthetic defaults. Sizes: Philly's day-60 slice is 90% one-GPU jobs and tops out at 16; we keep more multi-GPU jobs
# (and some 32-GPU ones) so that placement and network contention matter in short runs.
SYNTH_SIZES: dict[int, float] = {1: 0.82, 2: 0.05, 4: 0.06, 8: 0.05, 16: 0.015, 32: 0.005}
SYNTH_SHARES: dict[float, float] = {0.25: 0.35, 0.5: 0.45, 0.75: 0.2}
SYNTH_KEYS = {"iat": "mean_interarrival_s", "frac": "frac_share", "inference": "inference_share", "teams": "teams",
              "high": "high_priority_share", "pinned": "non_preemptible_share"}
HIGH_PRIORITY = 10  # the priority of the jobs `high=F` draws (the rest keep 0)
TEAM_SKEW = 1.0  # team k of N submits a share of the jobs proportional to 1 / (k + 1) ** TEAM_SKEW


def parse_synthetic_spec(spec: str) -> tuple[int, dict[str, Any]]:
    """`synthetic:N[,iat=S][,frac=F][,inference=F][,teams=T][,high=F][,pinned=F]` -> (N, keyword arguments of
    `synthetic`: floats, and an int for `teams`)."""
    accepted = ", ".join(f"{k}= ({v})" for k, v in SYNTH_KEYS.items())
    body = spec.removeprefix("synthetic:")
    head, *pairs = [p.strip() for p in body.split(",")]
    try:
        n = int(head)
    except ValueError:
        raise TraceError(f"{spec}: job count {head!r} is not an integer (synthetic:N[,key=value...])") from None
    if n < 1:
        raise TraceError(f"{spec}: job count must be at least 1")
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = (s.strip() for s in pair.partition("="))
        if key not in SYNTH_KEYS or not sep:
            raise TraceError(f"{spec}: {pair!r} is not key=value with a known key; accepted keys: {accepted}")
        try:
            v = float(value)
        except ValueError:
            raise TraceError(f"{spec}: {key}={value!r} is not a number; accepted keys: {accepted}") from None
        if key == "teams":
            if not (v.is_integer() and 1 <= v <= 1000):
                raise TraceError(f"{spec}: teams={value!r} is not a whole number from 1 to 1000")
            v = int(v)
        kwargs[SYNTH_KEYS[key]] = v
    _check_synthetic(spec, kwargs.get("mean_interarrival_s", 60.0), kwargs.get("frac_share", 0.15),
                     kwargs.get("inference_share", 0.05), kwargs.get("high_priority_share", 0.0),
                     kwargs.get("non_preemptible_share", 0.0))
    return n, kwargs


def _check_synthetic(where: str, iat: float, frac: float, inference: float, high: float = 0.0,
                     pinned: float = 0.0) -> None:
    if not 0 <= high <= 1:
        raise TraceError(f"{where}: high (share of jobs at priority {HIGH_PRIORITY}) must be in [0, 1], got {high:g}")
    if not 0 <= pinned <= 1:
        raise TraceError(f"{where}: pinned (share of jobs not preemptible) must be in [0, 1], got {pinned:g}")
    if not (math.isfinite(iat) and iat > 0):
        raise TraceError(f"{where}: iat (mean interarrival seconds) must be positive, got {iat:g}")
    if not 0 <= frac <= 1:
        raise TraceError(f"{where}: frac (share of fractional-GPU jobs) must be in [0, 1], got {frac:g}")
    if not 0 <= inference <= 1:
        raise TraceError(f"{where}: inference (share of inference jobs) must be in [0, 1], got {inference:g}")


def _categorical(g: np.random.Generator, weights: dict, n: int) -> np.ndarray:
    values = np.array(list(weights), dtype=np.float64)
    cum = np.cumsum(np.array(list(weights.values()), dtype=np.float64))
    return values[np.minimum(np.searchsorted(cum, g.random(n) * cum[-1], side="right"), len(values) - 1)]


def synthetic(
    n_jobs: int,
    seed: int = 0,
    *,
    mean_interarrival_s: float = 60.0,
    frac_share: float = 0.15,
    inference_share: float = 0.05,
    median_duration_s: float = 900.0,
    duration_sigma: float = 2.0,
    min_duration_s: float = 10.0,
    max_duration_s: float = 7 * 86400.0,
    size_duration_exponent: float = 0.5,
    sizes: dict[int, float] | None = None,
    shares: dict[float, float] | None = None,
    teams: int = 0,
    high_priority_share: float = 0.0,
    non_preemptible_share: float = 0.0,
) -> Trace:
    """A Philly-like workload: Poisson arrivals, lognormal durations, mostly one-GPU jobs, some GPU shares.

    * Durations: lognormal with the given median (Philly's day-60 slice: median 34 min, log-sd 2.5; the whole trace is
      shorter-lived) times `workers ** size_duration_exponent` (larger jobs run longer: Philly's 8-GPU jobs have 20x
      the median of 1-GPU ones), clipped to [min, max].
    * Kinds and sizes: a job is inference with probability `inference_share`; inference jobs take a GPU share with
      probability min(0.5, frac/inference), else one GPU; training jobs take a share with the probability that makes
      the overall fractional share `frac_share` (as nearly as possible), else a size from `sizes`.
    * Models: the draw rule of `scheduler.core.traces.models`.
    * Teams (`teams=T`, for `corral simulate --teams`): jobs belong to `team0` ... `team{T-1}`, team k submitting a share
      proportional to 1 / (k + 1) (skewed demand: with 4 teams, 48%, 24%, 16% and 12% of the jobs). 0: all `default`.
    * Priorities (`high=F`, `pinned=F`): a job is at priority `HIGH_PRIORITY` with probability `high_priority_share`
      (else 0), and not preemptible with probability `non_preemptible_share`, independently
      (`scheduler.core.priorities`).

    All randomness derives from `default_rng(seed)`: one spawned stream per attribute, so `synthetic(m)` is a prefix
    of `synthetic(n)` for m < n (a `limit` does not change the jobs it keeps). 100,000 jobs take ~0.3 s.
    """
    _check_synthetic(f"synthetic({n_jobs})", mean_interarrival_s, frac_share, inference_share, high_priority_share,
                     non_preemptible_share)
    if n_jobs < 1:
        raise TraceError(f"synthetic: n_jobs must be at least 1, got {n_jobs}")
    if not (median_duration_s > 0 and duration_sigma >= 0 and 0 < min_duration_s <= max_duration_s):
        raise TraceError("synthetic: need median_duration_s > 0, duration_sigma >= 0, 0 < min <= max duration")
    sizes = SYNTH_SIZES if sizes is None else sizes
    shares = SYNTH_SHARES if shares is None else shares
    if any(not (0 < s < 1) for s in shares) or any(int(s) != s or s < 1 for s in sizes):
        raise TraceError("synthetic: sizes must be integers >= 1 and shares fractions in (0, 1)")
    if teams < 0:
        raise TraceError(f"synthetic: teams must be >= 0, got {teams}")
    # Children of a SeedSequence do not depend on how many are spawned: each stream added later (teams, then the
    # priorities) leaves the others, and so every workload generated before it existed, unchanged.
    streams = np.random.default_rng(seed).spawn(10)
    g_arrive, g_kind, g_frac, g_size, g_share, g_dur, g_model, g_team, g_high, g_pinned = streams
    n = n_jobs

    gaps = g_arrive.exponential(mean_interarrival_s, n)
    submit = np.cumsum(gaps)
    submit -= submit[0]

    f_inf = min(0.5, frac_share / inference_share) if inference_share > 0 else 0.0
    q_train = (frac_share - inference_share * f_inf) / (1 - inference_share) if inference_share < 1 else 0.0
    q_train = min(max(q_train, 0.0), 1.0)
    inference = g_kind.random(n) < inference_share
    frac = g_frac.random(n) < np.where(inference, f_inf, q_train)
    size = np.where(inference, 1.0, _categorical(g_size, sizes, n))
    share = _categorical(g_share, shares, n)
    num_gpus = np.where(frac, share, size)

    workers = np.maximum(num_gpus, 1.0)
    duration = np.exp(np.log(median_duration_s) + duration_sigma * g_dur.standard_normal(n))
    duration = np.clip(duration * workers**size_duration_exponent, min_duration_s, max_duration_s)
    duration = np.round(duration, 3)
    submit = np.round(submit, 3)

    models, _ = draw_models(num_gpus, inference, g_model.random(n))
    team_names = team_draw(g_team, teams, n)
    priority = np.where(g_high.random(n) < high_priority_share, HIGH_PRIORITY, 0).tolist()
    preemptible = (g_pinned.random(n) >= non_preemptible_share).tolist()
    profiles = catalog()
    slo = {m: (p.slo_ms or None) for m, p in profiles.items()}
    jobs = [
        JobSpec(
            name=f"syn-{i:06d}", submit_s=s, num_gpus=g, duration_s=d, model=m,
            kind=JobKind.INFERENCE if inf else JobKind.TRAINING, slo_ms=slo[m] if inf else None, team=team,
            priority=int(pr), preemptible=bool(pe),
        )
        for i, (s, g, d, m, inf, team, pr, pe) in enumerate(
            zip(submit.tolist(), num_gpus.tolist(), duration.tolist(), models, inference.tolist(), team_names,
                priority, preemptible)
        )
    ]
    spec = (
        f"synthetic:{n_jobs},iat={mean_interarrival_s:g},frac={frac_share:g},inference={inference_share:g}"
        + (f",teams={teams}" if teams else "") + (f",high={high_priority_share:g}" if high_priority_share else "")
        + (f",pinned={non_preemptible_share:g}" if non_preemptible_share else "") + f" seed={seed}"
    )
    return Trace(name=f"synthetic-{n_jobs}", format="synthetic", jobs=jobs, skipped={}, source=spec)


def team_draw(g: np.random.Generator, teams: int, n: int) -> list[str]:
    """`n` team names, `team0` ... drawn with skewed weights 1 / (k + 1) ** TEAM_SKEW (all `default` if teams is 0).
    Also how benchmarks give a trace without teams (Philly, Alibaba) skewed tenants."""
    if teams <= 0:
        return [DEFAULT_TEAM] * n
    names = [f"team{k}" for k in range(teams)]
    w = 1.0 / np.arange(1, teams + 1) ** TEAM_SKEW
    idx = np.searchsorted(np.cumsum(w / w.sum()), g.random(n), side="right")
    return [names[min(int(i), teams - 1)] for i in idx]

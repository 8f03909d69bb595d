"""Synthetic workloads: a Philly-like job generator and the `synthetic:N,...` spec that names one.

Synthetic workloads (`synthetic()`, or the path `synthetic:N[,iat=S][,frac=F][,inference=F][,teams=T][,high=F]
[,pinned=F][,gangs=F][,elastic=F]`): Poisson arrivals,
lognormal durations near Philly's (median 15 min, sigma 2, clipped to [10 s, 7 days], longer for larger jobs), sizes
1/2/4/8/16/32 GPUs (mostly 1), GPU shares 0.25/0.5/0.75, models by the rule of `scheduler.core.traces.models`.
`gangs=F` makes a share F of the jobs LLM-style gangs instead: training on 64, 128, 256 or 512 whole GPUs, a
language model measured at LLM scale (`GANG_MODELS`), lognormal durations of hours to days (`GANG_DURATION`).
`elastic=F` makes a share F of the whole-GPU training jobs elastic, from half to twice their size
(`scheduler.core.elastic.make_elastic`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.core.elastic import make_elastic
from scheduler.core.model import DEFAULT_TEAM, JobKind, JobSpec
from scheduler.core.traces.models import draw_models
from scheduler.core.traces.trace import Trace, TraceError
from scheduler.core.workloads import catalog

# Synthetic defaults. Sizes: Philly's day-60 slice is 90% one-GPU jobs and tops out at 16; we keep more multi-GPU jobs
# (and some 32-GPU ones) so that placement and network contention matter in short runs.
SYNTH_SIZES: dict[int, float] = {1: 0.82, 2: 0.05, 4: 0.06, 8: 0.05, 16: 0.015, 32: 0.005}
SYNTH_SHARES: dict[float, float] = {0.25: 0.35, 0.5: 0.45, 0.75: 0.2}
SYNTH_KEYS = {"iat": "mean_interarrival_s", "frac": "frac_share", "inference": "inference_share", "teams": "teams",
              "high": "high_priority_share", "pinned": "non_preemptible_share", "gangs": "large_gang_share",
              "elastic": "elastic_share"}
HIGH_PRIORITY = 10  # the priority of the jobs `high=F` draws (the rest keep 0)
TEAM_SKEW = 1.0  # team k of N submits a share of the jobs proportional to 1 / (k + 1) ** TEAM_SKEW

# Large gangs (`gangs=F`, issue 30: the big-gang regime where fabric contention matters). Sizes: the probability halves
# as the size doubles, so each size class asks for the same GPUs in all (a few of the largest jobs hold as much of the
# cluster as many of the smallest), mean 136.5 GPUs. An assumption within published ranges: Acme (Hu et al., NSDI'24;
# InternLM/AcmeTrace, data/cluster_summary.csv) has GPU jobs of up to 1,024 GPUs on both its clusters; the Crux
# trace (SIGCOMM'24) has gangs of 32 to 744 GPUs on 1,024. 512 stays below the 1,024-GPU clusters the benchmark runs.
GANG_SIZES: dict[int, float] = {64: 8 / 15, 128: 4 / 15, 256: 2 / 15, 512: 1 / 15}
# The catalog's LLM-scale profiles, measured on an H100 (`scheduler.core.workloads.llm_profiles`): GPT-1.3B and GPT-2.7B
# (5.3 and 10.6 GB of fp32 gradients a step; also the data-parallel traffic per GPU of a much larger model sharded by
# tensor and pipeline parallelism within servers) and BERT-large (1.3 GB). They need 20-62 GB a GPU: the mix is for
# clusters of 80 GB GPUs (A100-80GB, H100, H200). Equally likely (an assumption).
GANG_MODELS: dict[str, float] = {"GPT-1.3B": 1.0, "GPT-2.7B": 1.0, "BERT-large": 1.0}
# Durations (seconds): lognormal, median 6 h, log-sd 1 (5% under 1.2 h, 5% over 31 h, mean ~10 h), clipped to [1 h,
# 7 days], not scaled by size (an LLM run's length follows its token budget and the failures that end it, not its GPU
# count). An assumption, bounded by Acme's summary (same file): its longest GPU job ran 7.2 days on Kalos, 14 on Seren
# (we clip at the generator's 7 days); its median GPU job (~2 min) is evaluation and debugging, not these runs.
GANG_DURATION = {"median_s": 6 * 3600.0, "sigma": 1.0, "min_s": 3600.0, "max_s": 7 * 86400.0}


def parse_synthetic_spec(spec: str) -> tuple[int, dict[str, Any]]:
    """`synthetic:N[,iat=S][,frac=F][,inference=F][,teams=T][,high=F][,pinned=F][,gangs=F][,elastic=F]` -> (N, keyword
    arguments of `synthetic`: floats, and an int for `teams`)."""
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
                     kwargs.get("non_preemptible_share", 0.0), kwargs.get("large_gang_share", 0.0),
                     kwargs.get("elastic_share", 0.0))
    return n, kwargs


def _check_synthetic(where: str, iat: float, frac: float, inference: float, high: float = 0.0,
                     pinned: float = 0.0, gangs: float = 0.0, elastic: float = 0.0) -> None:
    if not 0 <= elastic <= 1:
        raise TraceError(f"{where}: elastic (share of whole-GPU training jobs made elastic from half to twice their "
                         f"size) must be in [0, 1], got {elastic:g}")
    if not 0 <= gangs <= 1:
        raise TraceError(f"{where}: gangs (share of LLM-style gang jobs of 64-512 GPUs) must be in [0, 1], "
                         f"got {gangs:g}")
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
    large_gang_share: float = 0.0,
    elastic_share: float = 0.0,
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
    * Large gangs (`gangs=F`): a job is an LLM-style gang with probability `large_gang_share`: training on a size of
      `GANG_SIZES` (64-512 whole GPUs), a model of `GANG_MODELS`, a duration drawn as `GANG_DURATION` states; it keeps
      its arrival, team and priorities. The other jobs are drawn as above (so `frac` and `inference` are shares of the
      jobs that are not gangs). Gangs dominate the offered load (mean ~136 GPUs for ~10 h): fit the arrival rate to
      the cluster (`scheduler.core.traces.windows`) rather than using the default `iat`.
    * Elastic jobs (`elastic=F`): a whole-GPU training job (gangs included) is elastic with probability
      `elastic_share`, from half to twice its size (`scheduler.core.elastic.make_elastic`); sizes, arrivals and
      everything else are drawn as without it.

    All randomness derives from `default_rng(seed)`: one spawned stream per attribute, so `synthetic(m)` is a prefix
    of `synthetic(n)` for m < n (a `limit` does not change the jobs it keeps). 100,000 jobs take ~0.3 s.
    """
    _check_synthetic(f"synthetic({n_jobs})", mean_interarrival_s, frac_share, inference_share, high_priority_share,
                     non_preemptible_share, large_gang_share, elastic_share)
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
    # priorities, then the gangs) leaves the others, and so every workload generated before it existed, unchanged.
    streams = np.random.default_rng(seed).spawn(12)
    g_arrive, g_kind, g_frac, g_size, g_share, g_dur, g_model, g_team, g_high, g_pinned, g_gang, g_elastic = streams
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
    if large_gang_share > 0:  # overwrite the gangs' draws; with share 0 the stream is never read
        gang = _gang_draw(g_gang, n, large_gang_share)
        inference = inference & ~gang.mask
        num_gpus = np.where(gang.mask, gang.num_gpus, num_gpus)
        duration = np.where(gang.mask, gang.duration, duration)
        models = [gm if g else m for m, gm, g in zip(models, gang.models, gang.mask.tolist(), strict=False)]
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
                priority, preemptible, strict=False)
        )
    ]
    spec = (
        f"synthetic:{n_jobs},iat={mean_interarrival_s:g},frac={frac_share:g},inference={inference_share:g}"
        + (f",teams={teams}" if teams else "") + (f",high={high_priority_share:g}" if high_priority_share else "")
        + (f",pinned={non_preemptible_share:g}" if non_preemptible_share else "")
        + (f",gangs={large_gang_share:g}" if large_gang_share else "")
        + (f",elastic={elastic_share:g}" if elastic_share else "") + f" seed={seed}"
    )
    if elastic_share > 0:  # with share 0 the stream is never read
        jobs = make_elastic(jobs, elastic_share, g_elastic.random(n).tolist())
    return Trace(name=f"synthetic-{n_jobs}", format="synthetic", jobs=jobs, skipped={}, source=spec)


@dataclass(frozen=True, slots=True)
class _Gangs:
    mask: np.ndarray  # which jobs are gangs
    num_gpus: np.ndarray  # a gang size for every job (used where mask)
    models: list[str]
    duration: np.ndarray  # seconds, rounded like the other durations


def _gang_draw(g: np.random.Generator, n: int, share: float) -> _Gangs:
    """Which of `n` jobs are large gangs, and a size, model and duration for every job, from `g` alone.

    One child stream per attribute, each read in arrival order, keeps the prefix property (`synthetic(m)` is a prefix
    of `synthetic(n)`), as the streams of `synthetic` do."""
    g_is, g_size, g_model, g_dur = g.spawn(4)
    mask = g_is.random(n) < share
    size = _categorical(g_size, GANG_SIZES, n)
    names = list(GANG_MODELS)
    pick = _categorical(g_model, dict(enumerate(GANG_MODELS.values())), n).astype(int)
    d = GANG_DURATION
    duration = np.exp(np.log(d["median_s"]) + d["sigma"] * g_dur.standard_normal(n))
    duration = np.round(np.clip(duration, d["min_s"], d["max_s"]), 3)
    return _Gangs(mask=mask, num_gpus=size, models=[names[i] for i in pick.tolist()], duration=duration)


def team_draw(g: np.random.Generator, teams: int, n: int) -> list[str]:
    """`n` team names, `team0` ... drawn with skewed weights 1 / (k + 1) ** TEAM_SKEW (all `default` if teams is 0).
    Also how benchmarks give a trace without teams (Philly, Alibaba) skewed tenants."""
    if teams <= 0:
        return [DEFAULT_TEAM] * n
    names = [f"team{k}" for k in range(teams)]
    w = 1.0 / np.arange(1, teams + 1) ** TEAM_SKEW
    idx = np.searchsorted(np.cumsum(w / w.sum()), g.random(n), side="right")
    return [names[min(int(i), teams - 1)] for i in idx]

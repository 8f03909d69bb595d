"""The synthetic generator's large-gang mix (`synthetic:N,gangs=F`, issue 30): LLM-style training gangs of 64-512 GPUs
beside the usual small jobs, without changing any workload generated without it."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import numpy as np
import pytest

from policies import make_policy
from scheduler.core.model import JobKind, JobPhase, JobSpec, parse_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.traces import Trace, TraceError, load_trace, parse_synthetic_spec, synthetic
from scheduler.core.traces.generator import GANG_DURATION, GANG_MODELS, GANG_SIZES
from scheduler.core.traces.models import HEAVY_GRAD_MB
from scheduler.core.workloads import catalog

# Digests of workloads as the generator made them before the gang stream existed (computed from the code of commit
# cda508c, with `digest` below). Every simulation result and trained policy recorded so far rests on these draws.
DEFAULT_DIGEST = "aca6bb387c6691ce5b24c7c23d795b0f657719726a664ec991b67386601cbd25"  # synthetic(2000, seed=3)
OPTIONS_DIGEST = "83c8c23371c9e13c27107f9de774c0fdf86ddd8e1038d36e38c1e8cf604afbd8"  # + teams, high, pinned
OPTIONS: dict[str, Any] = {"teams": 4, "high_priority_share": 0.2, "non_preemptible_share": 0.1}
GANG_GPUS = 64  # the smallest gang; ordinary synthetic jobs stop at 32 GPUs, so size tells a gang apart


def digest(trace: Trace) -> str:
    """SHA-256 of the source string and every field the generator sets, job by job (floats by repr: exact)."""
    h = hashlib.sha256(trace.source.encode())
    for j in trace.jobs:
        h.update(repr((j.name, j.submit_s, j.num_gpus, j.duration_s, j.model, j.kind.value, j.slo_ms, j.team,
                       j.priority, j.preemptible)).encode())
    return h.hexdigest()


def gangs(jobs: list[JobSpec]) -> list[JobSpec]:
    return [j for j in jobs if j.num_gpus >= GANG_GPUS]


def test_workloads_without_gangs_are_bit_for_bit_unchanged() -> None:
    assert digest(synthetic(2000, seed=3)) == DEFAULT_DIGEST
    assert digest(synthetic(2000, seed=3, large_gang_share=0.0)) == DEFAULT_DIGEST
    assert digest(load_trace("synthetic:2000,gangs=0", seed=3)) == DEFAULT_DIGEST
    assert digest(synthetic(2000, seed=3, **OPTIONS)) == OPTIONS_DIGEST


def test_gangs_replace_a_share_of_jobs_and_leave_the_others_as_they_were() -> None:
    n, share = 20_000, 0.2
    base = synthetic(n, seed=7, **OPTIONS).jobs
    mixed = synthetic(n, seed=7, large_gang_share=share, **OPTIONS).jobs
    is_gang = np.array([j.num_gpus >= GANG_GPUS for j in mixed])
    assert is_gang.mean() == pytest.approx(share, abs=0.01)
    # Every job that is not a gang is the job the generator makes without the option, field for field.
    assert [b for b, g in zip(base, is_gang, strict=False) if not g] == [m for m, g in zip(mixed, is_gang, strict=False) if not g]
    # A gang keeps the arrival, name, team and priorities its index drew; only kind, size, model and duration change.
    for b, m in zip(base, mixed, strict=False):
        if m.num_gpus >= GANG_GPUS:
            assert (m.name, m.submit_s, m.team, m.priority, m.preemptible) == \
                   (b.name, b.submit_s, b.team, b.priority, b.preemptible)


def test_gang_sizes_models_and_durations() -> None:
    jobs = gangs(synthetic(30_000, seed=5, large_gang_share=0.3).jobs)
    sizes = Counter(int(j.num_gpus) for j in jobs)
    assert set(sizes) == set(GANG_SIZES) == {64, 128, 256, 512}
    for size, weight in GANG_SIZES.items():  # halving as they double: 8/15, 4/15, 2/15, 1/15
        assert sizes[size] / len(jobs) == pytest.approx(weight, abs=0.02)
    assert sizes[64] > sizes[128] > sizes[256] > sizes[512]
    models = Counter(j.model for j in jobs)
    assert set(models) == set(GANG_MODELS)
    assert min(models.values()) / len(jobs) > 0.3  # equally likely: ~1/3 each
    profiles = catalog()
    for name in GANG_MODELS:  # communication-heavy training models that fit an 80 GB GPU
        p = profiles[name]
        assert p.kind is JobKind.TRAINING and p.grad_mb >= HEAVY_GRAD_MB and p.mem_gb <= 80
    assert all(j.kind is JobKind.TRAINING and j.slo_ms is None and j.num_gpus.is_integer() for j in jobs)
    d = np.array([j.duration_s for j in jobs])
    assert d.min() >= GANG_DURATION["min_s"] and d.max() <= GANG_DURATION["max_s"]
    assert np.median(d) == pytest.approx(GANG_DURATION["median_s"], rel=0.05)  # 6 h
    assert np.quantile(d, 0.95) > 86400  # a tail of day-long runs
    assert np.median(d[[j.num_gpus == 512 for j in jobs]]) == pytest.approx(GANG_DURATION["median_s"], rel=0.2)


def test_prefix_property_holds_with_gangs() -> None:
    a = synthetic(2000, seed=11, large_gang_share=0.1)
    assert gangs(a.jobs)
    assert synthetic(300, seed=11, large_gang_share=0.1).jobs == a.jobs[:300]
    assert load_trace("synthetic:2000,gangs=0.1", limit=300, seed=11).jobs == a.jobs[:300]
    assert synthetic(2000, seed=12, large_gang_share=0.1).jobs != a.jobs


def test_spec_round_trips_and_the_source_names_the_option() -> None:
    assert parse_synthetic_spec("synthetic:500,gangs=0.25") == (500, {"large_gang_share": 0.25})
    trace = load_trace("synthetic:500,iat=300,gangs=0.25", seed=4)
    assert ",gangs=0.25 " in trace.source and "gangs" not in synthetic(500, seed=4).source
    n, kwargs = parse_synthetic_spec(trace.source.split()[0])  # "synthetic:500,...,gangs=0.25 seed=4"
    assert synthetic(n, seed=4, **kwargs).jobs == trace.jobs


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ("synthetic:10,gangs=1.5", r"gangs \(share of LLM-style gang jobs of 64-512 GPUs\) must be in \[0, 1\], got 1.5"),
        ("synthetic:10,gangs=-0.1", r"gangs .* must be in \[0, 1\], got -0.1"),
        ("synthetic:10,gangs=many", "gangs='many' is not a number"),
        ("synthetic:10,gang=0.1", r"'gang=0.1' is not key=value with a known key; accepted keys: .*gangs="),
    ],
)
def test_bad_gang_values_name_the_key(spec: str, pattern: str) -> None:
    with pytest.raises(TraceError, match=pattern):
        load_trace(spec)


def test_bad_gang_share_from_python_names_the_key() -> None:
    with pytest.raises(TraceError, match=r"gangs .* got 2"):
        synthetic(10, large_gang_share=2.0)


@pytest.mark.parametrize("policy", ["fifo", "consolidate"])
def test_a_gang_workload_runs_to_the_end_and_a_gang_too_big_is_rejected(policy: str) -> None:
    jobs = synthetic(40, seed=2, mean_interarrival_s=600, large_gang_share=0.3).jobs
    sizes = Counter(j.num_gpus for j in jobs)
    assert sizes[512] == 1 and sum(sizes[s] for s in GANG_SIZES) >= 10  # the seed draws what the test needs
    fits = Simulator(parse_cluster("dgx-a100:80"), jobs, make_policy(policy)).run()  # 640 GPUs: every gang fits
    assert all(j.state is JobPhase.DONE for j in fits.jobs)
    small = Simulator(parse_cluster("dgx-a100:32"), jobs, make_policy(policy)).run()  # 256 GPUs
    rejected = [j for j in small.jobs if j.state is JobPhase.REJECTED]
    assert [j.spec.num_gpus for j in rejected] == [512]
    assert rejected[0].reject_reason == "needs 512 GPUs, the cluster has 256"
    assert all(j.state is JobPhase.DONE for j in small.jobs if j not in rejected)

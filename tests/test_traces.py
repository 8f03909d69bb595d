"""Trace loaders (Corral CSV, Philly, Alibaba), model assignment and the synthetic generator."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from scheduler.core.model import JobKind, JobSpec, SpecError
from scheduler.core.traces import (
    HEAVY_GRAD_MB,
    SMALLEST_GPU_GB,
    Trace,
    TraceError,
    fit_load,
    load_trace,
    offered_load,
    parse_synthetic_spec,
    synthetic,
)
from scheduler.core.workloads import catalog, inference_models, training_models

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"

PHILLY_HEADER = "#job id,arrival time (sec),topology,shape,size,duration (sec)"
ALIBABA_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)


def write(tmp_path: Path, name: str, *lines: str) -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def by_name(trace: Trace) -> dict:
    return {j.name: j for j in trace.jobs}


# --------------------------------------------------------------------------------------------------------------------
# Corral CSV
# --------------------------------------------------------------------------------------------------------------------


def test_corral_values_sorting_and_shift(tmp_path: Path) -> None:
    path = write(
        tmp_path, "t.csv",
        "# a comment before the header",
        "job_id,submit_s,num_gpus,duration_s,kind,model,user,priority,slo_ms,compression",
        "late,500,8,3600,training,FSDP,alice,2,,0.25",
        "",
        "# a comment between rows",
        "early,100,0.5,60.5,inference,ResNet-50-serve,bob,0,30,",
        "mid,250,1,10,training,,,,,",
    )
    trace = load_trace(path)
    assert trace.format == "corral"
    assert [j.name for j in trace.jobs] == ["early", "mid", "late"]
    assert [j.submit_s for j in trace.jobs] == [0.0, 150.0, 400.0]
    jobs = by_name(trace)
    late = jobs["late"]
    assert (late.num_gpus, late.duration_s, late.model, late.kind) == (8, 3600, "FSDP", JobKind.TRAINING)
    assert (late.user, late.priority, late.compression, late.slo_ms) == ("alice", 2, 0.25, None)
    early = jobs["early"]
    assert (early.num_gpus, early.kind, early.slo_ms, early.compression) == (0.5, JobKind.INFERENCE, 30.0, 1.0)
    assert jobs["mid"].model in training_models()
    assert trace.skipped == {}
    assert trace.source == path and trace.name == "t"


def test_corral_inference_without_slo_takes_the_models(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "job_id,submit_s,num_gpus,duration_s,kind,model",
                 "a,0,1,100,inference,LLaMA-7B-serve", "b,1,1,100,inference,")
    jobs = by_name(load_trace(path))
    assert jobs["a"].slo_ms == catalog()["LLaMA-7B-serve"].slo_ms
    assert jobs["b"].model in inference_models()
    assert jobs["b"].slo_ms == catalog()[jobs["b"].model].slo_ms


def test_corral_drawn_models_fit_the_share_and_kind(tmp_path: Path) -> None:
    rows = [f"j{i},{i},{share},100,{kind}," for i, (share, kind) in enumerate(
        [(s, k) for s in ("0.25", "0.5", "0.15", "2", "1") for k in ("training", "inference")] * 20)]
    trace = load_trace(write(tmp_path, "t.csv", "job_id,submit_s,num_gpus,duration_s,kind,model", *rows))
    profiles = catalog()
    for job in trace.jobs:
        p = profiles[job.model]
        assert p.kind is job.kind
        if job.num_gpus < 1:
            assert p.mem_gb <= job.num_gpus * SMALLEST_GPU_GB
    assert Counter(j.model for j in trace.jobs if j.num_gpus == 0.25 and j.kind is JobKind.TRAINING).keys() <= {
        m for m in training_models() if profiles[m].mem_gb <= 4
    }


def test_corral_fraction_with_no_fitting_model_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "job_id,submit_s,num_gpus,duration_s,kind,model",
                 "a,0,1,100,training,", "b,5,0.01,100,training,")
    with pytest.raises(TraceError, match=r"t\.csv line 3: column 'model'.*no training model fits"):
        load_trace(path)


def test_limit_keeps_first_jobs_by_arrival(tmp_path: Path) -> None:
    rows = [f"j{i},{(7 * i) % 50},1,100,training," for i in range(50)]
    path = write(tmp_path, "t.csv", "job_id,submit_s,num_gpus,duration_s,kind,model", *rows)
    full = load_trace(path, seed=4)
    cut = load_trace(path, limit=10, seed=4)
    assert len(cut.jobs) == 10
    assert cut.jobs == full.jobs[:10]  # same jobs, same drawn models
    assert [j.submit_s for j in cut.jobs] == sorted(j.submit_s for j in cut.jobs)


# --------------------------------------------------------------------------------------------------------------------
# Philly
# --------------------------------------------------------------------------------------------------------------------


def test_philly_parsing_skips_and_shift(tmp_path: Path) -> None:
    path = write(
        tmp_path, "philly.csv", PHILLY_HEADER,
        "10,1000.0,CLOS,8+8,16,3600.0",
        "11,900.0,CLOS,1,1,25.0",
        "12,950.0,CLOS,1,1,0.0",
        "13,960.0,CLOS,,0,50.0",
        "14,1200.0,CLOS,2+2,4,7.5",
    )
    trace = load_trace(path)
    assert trace.format == "philly"
    assert [j.name for j in trace.jobs] == ["11", "10", "14"]
    assert [j.submit_s for j in trace.jobs] == [0.0, 100.0, 300.0]
    assert [j.num_gpus for j in trace.jobs] == [1, 16, 4]
    assert [j.duration_s for j in trace.jobs] == [25.0, 3600.0, 7.5]
    assert trace.skipped == {"zero duration": 1, "zero GPUs": 1}
    assert all(j.kind is JobKind.TRAINING and j.model in training_models() for j in trace.jobs)


def test_philly_malformed_number_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, "1,0.0,CLOS,1,1,10.0", "2,5.0,CLOS,1,two,10.0")
    with pytest.raises(TraceError, match=r"p\.csv line 3: column 'size': 'two' is not a number"):
        load_trace(path)


# --------------------------------------------------------------------------------------------------------------------
# Alibaba
# --------------------------------------------------------------------------------------------------------------------


def test_alibaba_parsing_shares_kinds_and_skips(tmp_path: Path) -> None:
    path = write(
        tmp_path, "ali.csv", ALIBABA_HEADER,
        "p-cpu,8000,1024,0,0,,LS,Running,0,100,0",
        "p-ls-share,6000,1024,1,460,,LS,Running,50,1050,60",
        "p-ls-whole,6000,1024,1,1000,,LS,Running,70,500,80",
        "p-be-share,6000,1024,1,250,,BE,Failed,90,190,95",
        "p-pending,6000,1024,1,1000,,BE,Pending,100,200,",
        "p-zero,6000,1024,1,1000,,BE,Failed,110,130,130",
        "p-eight,6000,1024,8,1000,,Burstable,Succeeded,40,5040,45",
        "p-tiny,6000,1024,1,50,,BE,Failed,200,300,200",
    )
    trace = load_trace(path)
    assert trace.format == "alibaba"
    assert trace.skipped == {"cpu-only": 1, "never ran": 1, "zero run time": 1}
    assert [j.name for j in trace.jobs] == ["p-eight", "p-ls-share", "p-ls-whole", "p-be-share", "p-tiny"]
    jobs = by_name(trace)
    assert jobs["p-eight"].submit_s == 0.0 and jobs["p-eight"].num_gpus == 8 and jobs["p-eight"].duration_s == 4995
    share = jobs["p-ls-share"]
    assert (share.submit_s, share.num_gpus, share.duration_s) == (10.0, 0.46, 990.0)
    assert share.kind is JobKind.INFERENCE and share.model in inference_models() and share.slo_ms
    assert catalog()[share.model].mem_gb <= 0.46 * SMALLEST_GPU_GB
    assert jobs["p-ls-whole"].kind is JobKind.TRAINING and jobs["p-ls-whole"].num_gpus == 1
    be = jobs["p-be-share"]
    assert be.kind is JobKind.TRAINING and be.num_gpus == 0.25 and catalog()[be.model].mem_gb <= 4
    # 0.05 of a 16 GB GPU fits no model: the smallest-footprint training model, and describe() says so
    smallest = min(training_models(), key=lambda m: catalog()[m].mem_gb)
    assert jobs["p-tiny"].model == smallest
    assert trace.describe()["fractional_over_share_memory"] == 1


def test_alibaba_ls_share_too_small_for_any_inference_model_is_training(tmp_path: Path) -> None:
    smallest_inf = min(catalog()[m].mem_gb for m in inference_models())
    milli = int(smallest_inf / SMALLEST_GPU_GB * 1000) - 10
    path = write(tmp_path, "ali.csv", ALIBABA_HEADER, f"p,1,1,1,{milli},,LS,Running,0,100,0")
    (job,) = load_trace(path).jobs
    assert job.kind is JobKind.TRAINING and job.num_gpus == milli / 1000


def test_alibaba_malformed_time(tmp_path: Path) -> None:
    path = write(tmp_path, "ali.csv", ALIBABA_HEADER, "p,1,1,1,1000,,BE,Running,0,soon,0")
    with pytest.raises(TraceError, match=r"ali\.csv line 2: column 'deletion_time': 'soon' is not a number"):
        load_trace(path)


# --------------------------------------------------------------------------------------------------------------------
# Bad input: always a TraceError naming the file and where
# --------------------------------------------------------------------------------------------------------------------

CORRAL_HEADER = "job_id,submit_s,num_gpus,duration_s,kind,model"


@pytest.mark.parametrize(
    ("row", "pattern"),
    [
        ("b,10,abc,60,training,", r"line 3: column 'num_gpus': 'abc' is not a number"),
        ("b,10,1.5,60,training,", r"line 3: column 'num_gpus': 1.5 is not an integer >= 1 or a fraction"),
        ("b,10,0,60,training,", r"line 3: column 'num_gpus': 0 is not an integer"),
        ("b,10,1,60,batch,", r"line 3: column 'kind': 'batch' is not one of training, inference"),
        ("b,10,1,-5,training,", r"line 3: column 'duration_s': -5 is not positive"),
        ("b,nan,1,60,training,", r"line 3: column 'submit_s': 'nan' is not a finite number"),
        ("b,,1,60,training,", r"line 3: column 'submit_s': empty"),
        ("b,10,1,60,training,GPT-9", r"line 3: column 'model': unknown model 'GPT-9'; known models: "),
        ("b,10,1,60,training,ResNet-50-serve", r"line 3: column 'model': 'ResNet-50-serve' is a inference model"),
        ("a,10,1,60,training,", r"line 3: column 'job_id': 'a' already used on line 2"),
        ("b,10,1,60,training", r"line 3: 5 fields, the header has 6"),
    ],
)
def test_corral_bad_rows(tmp_path: Path, row: str, pattern: str) -> None:
    path = write(tmp_path, "bad.csv", CORRAL_HEADER, "a,0,1,60,training,", row)
    with pytest.raises(TraceError, match=r"bad\.csv " + pattern):
        load_trace(path)


def test_corral_bad_optional_columns(tmp_path: Path) -> None:
    header = CORRAL_HEADER + ",priority,compression"
    with pytest.raises(TraceError, match=r"line 2: column 'priority': '1.5' is not an integer"):
        load_trace(write(tmp_path, "a.csv", header, "a,0,1,60,training,,1.5,"))
    with pytest.raises(TraceError, match=r"line 2: column 'compression': 0 is not in \(0, 1\]"):
        load_trace(write(tmp_path, "b.csv", header, "a,0,1,60,training,,,0"))


def test_missing_and_unknown_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", "job_id,submit_s,num_gpus,kind,model", "a,0,1,training,")
    with pytest.raises(TraceError, match=r"x\.csv: missing column\(s\) 'duration_s'; expected columns: job_id,"):
        load_trace(path)
    path = write(tmp_path, "y.csv", CORRAL_HEADER + ",prio", "a,0,1,60,training,,1")
    with pytest.raises(TraceError, match=r"y\.csv: unknown column\(s\) 'prio'"):
        load_trace(path)
    path = write(tmp_path, "z.csv", "name,num_gpu,gpu_milli,creation_time", "p,1,1000,0")
    with pytest.raises(TraceError, match=r"z\.csv: missing column\(s\) 'qos', 'deletion_time', 'scheduled_time'"):
        load_trace(path)


def test_unknown_format_lists_choices(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", CORRAL_HEADER, "a,0,1,60,training,")
    with pytest.raises(TraceError, match="unknown trace format 'slurm'; choose one of auto, corral, philly, alibaba"):
        load_trace(path, format="slurm")


def test_file_problems(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="does not exist"):
        load_trace(str(tmp_path / "nope.csv"))
    with pytest.raises(TraceError, match=r"empty\.csv: cannot tell the trace format"):
        load_trace(write(tmp_path, "empty.csv", ""))
    with pytest.raises(TraceError, match=r"odd\.csv: cannot tell the trace format from the header 'a,b,c'"):
        load_trace(write(tmp_path, "odd.csv", "a,b,c", "1,2,3"))
    with pytest.raises(TraceError, match=r"h\.csv: no jobs"):
        load_trace(write(tmp_path, "h.csv", CORRAL_HEADER))
    with pytest.raises(TraceError, match=r"cpu\.csv: no jobs \(skipped: cpu-only 1\)"):
        load_trace(write(tmp_path, "cpu.csv", ALIBABA_HEADER, "p,1,1,0,0,,BE,Running,0,10,0"))
    assert issubclass(TraceError, SpecError)


def test_explicit_format_mismatch_reports_missing_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, "1,0.0,CLOS,1,1,10.0")
    with pytest.raises(TraceError, match=r"p\.csv: missing column\(s\) 'name', 'num_gpu'"):
        load_trace(path, format="alibaba")


# --------------------------------------------------------------------------------------------------------------------
# Auto-detection and determinism
# --------------------------------------------------------------------------------------------------------------------


def test_auto_detection_matches_explicit_format(tmp_path: Path) -> None:
    files = {
        "corral": write(tmp_path, "c.csv", "# comment", CORRAL_HEADER, "a,0,1,60,training,"),
        "philly": write(tmp_path, "p.csv", PHILLY_HEADER, "1,0.0,CLOS,1,1,10.0"),
        "alibaba": write(tmp_path, "a.csv", ALIBABA_HEADER, "p,1,1,1,1000,,BE,Running,0,10,0"),
    }
    for fmt, path in files.items():
        auto = load_trace(path)
        assert auto.format == fmt
        assert auto.jobs == load_trace(path, format=fmt).jobs


def philly_file(tmp_path: Path, n: int = 300) -> str:
    sizes = [1, 1, 2, 4, 8, 0.5]
    rows = [f"{i},{i * 10}.0,CLOS,1,{sizes[i % 5]},{100 + i}.0" for i in range(n)]
    return write(tmp_path, "p.csv", PHILLY_HEADER, *rows)


def test_models_are_deterministic_per_seed_and_vary_across_seeds(tmp_path: Path) -> None:
    path = philly_file(tmp_path)
    a = [j.model for j in load_trace(path, seed=1).jobs]
    assert a == [j.model for j in load_trace(path, seed=1).jobs]
    b = [j.model for j in load_trace(path, seed=2).jobs]
    assert a != b
    assert len(set(a)) > 5  # a mix, not one model


def test_multi_gpu_jobs_favour_communication_heavy_models(tmp_path: Path) -> None:
    rows = [f"{i},{i}.0,CLOS,1,8,100.0" for i in range(4000)]
    trace = load_trace(write(tmp_path, "p.csv", PHILLY_HEADER, *rows))
    # The pool: training models that fit the smallest GPU (the LLM-scale profiles do not; traces never draw them).
    pool = [m for m in training_models() if catalog()[m].mem_gb <= SMALLEST_GPU_GB]
    assert len(pool) < len(training_models())
    heavy = {m for m in pool if catalog()[m].grad_mb >= HEAVY_GRAD_MB}
    n_heavy, n_all = len(heavy), len(pool)
    expected = 2 * n_heavy / (2 * n_heavy + n_all - n_heavy)
    observed = sum(j.model in heavy for j in trace.jobs) / len(trace.jobs)
    assert abs(observed - expected) < 0.03
    rows1 = [f"{i},{i}.0,CLOS,1,1,100.0" for i in range(4000)]
    single = load_trace(write(tmp_path, "q.csv", PHILLY_HEADER, *rows1))
    assert abs(sum(j.model in heavy for j in single.jobs) / 4000 - n_heavy / n_all) < 0.03


def test_describe_is_json_and_counts(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", CORRAL_HEADER, "a,10,2,3600,training,", "b,20,0.5,7200,inference,",
                 "c,70,2,1800,training,")
    d = load_trace(path).describe()
    json.dumps(d)
    assert d["jobs"] == 3 and d["span_s"] == 60.0
    assert d["gpu_sizes"] == {"2": 2} and d["fractional"] == 1 and d["inference"] == 1
    assert d["gpu_hours"] == pytest.approx(2 + 1 + 1)
    assert d["format"] == "corral" and d["skipped"] == {}


# --------------------------------------------------------------------------------------------------------------------
# Synthetic
# --------------------------------------------------------------------------------------------------------------------


def test_synthetic_statistics() -> None:
    n = 20_000
    trace = synthetic(n, seed=5, mean_interarrival_s=30.0, frac_share=0.2, inference_share=0.1)
    jobs = trace.jobs
    assert len(jobs) == n and jobs[0].submit_s == 0.0
    submit = np.array([j.submit_s for j in jobs])
    assert np.all(np.diff(submit) >= 0)
    assert np.diff(submit).mean() == pytest.approx(30.0, rel=0.05)
    gpus = np.array([j.num_gpus for j in jobs])
    assert (gpus < 1).mean() == pytest.approx(0.2, abs=0.02)
    assert set(gpus[gpus < 1]) <= {0.25, 0.5, 0.75}
    assert set(gpus[gpus >= 1]) <= {1, 2, 4, 8, 16, 32}
    assert (gpus == 1).mean() > 0.5
    inference = np.array([j.kind is JobKind.INFERENCE for j in jobs])
    assert inference.mean() == pytest.approx(0.1, abs=0.015)
    assert np.all(gpus[inference] <= 1)
    assert (gpus[inference] < 1).mean() == pytest.approx(0.5, abs=0.05)  # services on a share or on one GPU
    dur = np.array([j.duration_s for j in jobs])
    assert dur.min() >= 10 and dur.max() <= 7 * 86400
    single = dur[gpus == 1]
    assert 600 <= np.median(single) <= 1200  # ~15 min
    assert np.quantile(single, 0.99) > 86400 / 2  # heavy tail
    profiles = catalog()
    for j in jobs:
        p = profiles[j.model]
        assert p.kind is j.kind
        if j.num_gpus < 1:
            assert p.mem_gb <= j.num_gpus * SMALLEST_GPU_GB
        if j.kind is JobKind.INFERENCE:
            assert j.slo_ms == p.slo_ms


def test_synthetic_determinism_and_prefix() -> None:
    a = synthetic(2000, seed=11)
    assert a.jobs == synthetic(2000, seed=11).jobs
    assert a.jobs != synthetic(2000, seed=12).jobs
    assert synthetic(300, seed=11).jobs == a.jobs[:300]
    assert load_trace("synthetic:2000", limit=300, seed=11).jobs == a.jobs[:300]


def test_synthetic_spec_strings() -> None:
    assert parse_synthetic_spec("synthetic:100") == (100, {})
    n, kw = parse_synthetic_spec("synthetic:50,iat=10,frac=0.3,inference=0")
    assert (n, kw) == (50, {"mean_interarrival_s": 10.0, "frac_share": 0.3, "inference_share": 0.0})
    trace = load_trace("synthetic:3000,iat=10,inference=0", seed=2)
    assert trace.format == "synthetic" and len(trace.jobs) == 3000
    assert trace.jobs[-1].submit_s / 2999 == pytest.approx(10.0, rel=0.1)
    assert all(j.kind is JobKind.TRAINING for j in trace.jobs)
    assert "iat=10" in trace.source


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ("synthetic:abc", "job count 'abc' is not an integer"),
        ("synthetic:0", "job count must be at least 1"),
        ("synthetic:10,speed=3", r"'speed=3' is not key=value with a known key; accepted keys: iat="),
        ("synthetic:10,iat", "accepted keys: iat=.*frac=.*inference="),
        ("synthetic:10,frac=lots", "frac='lots' is not a number"),
        ("synthetic:10,frac=1.5", r"frac .* must be in \[0, 1\], got 1.5"),
        ("synthetic:10,iat=-1", "iat .* must be positive"),
    ],
)
def test_synthetic_spec_errors(spec: str, pattern: str) -> None:
    with pytest.raises(TraceError, match=pattern):
        load_trace(spec)


# --------------------------------------------------------------------------------------------------------------------
# The real traces in ../shared/traces
# --------------------------------------------------------------------------------------------------------------------


def shared(name: str) -> str:
    path = SHARED_TRACES / name
    if not path.is_file():
        pytest.skip(f"real trace {path} is absent (it lives in ../shared/traces beside the repository)")
    return str(path)


def test_real_philly_slice() -> None:
    trace = load_trace(shared("philly_day60.csv"))
    assert trace.format == "philly"
    # The README's 5,000 jobs (4,511 / 76 / 218 / 183 / 12 by size) include two one-GPU jobs of duration 0.
    assert trace.skipped == {"zero duration": 2}
    assert len(trace.jobs) == 4998
    assert trace.describe()["gpu_sizes"] == {"1": 4509, "2": 76, "4": 218, "8": 183, "16": 12}
    assert trace.jobs[0].submit_s == 0.0
    assert trace.jobs[-1].submit_s == pytest.approx(3.1 * 86400, rel=0.02)
    assert all(j.duration_s > 0 for j in trace.jobs)


def test_real_alibaba_slice() -> None:
    path = shared("alibaba_openb_before_day130.csv")
    trace = load_trace(path)
    assert trace.format == "alibaba"
    # 493 CPU-only pods; 267 pods never scheduled, 20 of them CPU-only (counted once, as cpu-only)
    assert trace.skipped == {"cpu-only": 493, "never ran": 247}
    pods = len(Path(path).read_text().splitlines()) - 1
    assert len(trace.jobs) + sum(trace.skipped.values()) == pods == 3121
    assert all(j.duration_s > 0 for j in trace.jobs)
    assert all(j.num_gpus in (1, 2, 4, 8) or 0 < j.num_gpus < 1 for j in trace.jobs)
    d = trace.describe()
    assert d["fractional"] > 0 and d["inference"] > 0
    assert all(j.num_gpus < 1 for j in trace.jobs if j.kind is JobKind.INFERENCE)


def _jobs(rows: list[tuple[float, float, float]]) -> list[JobSpec]:
    return [JobSpec(f"j{i}", submit, gpus, dur, "resnet50") for i, (submit, gpus, dur) in enumerate(rows)]


def test_fit_load_resizes_when_a_node_count_gets_close() -> None:
    # 40 one-GPU jobs, one every 100 s, each 800 s long: offered load 0.91 on 8 GPUs, 0.455 on 16, 0.30 on 24.
    jobs = _jobs([(100.0 * i, 1.0, 800.0) for i in range(40)])
    fit = fit_load(jobs, 8, 0.47)
    assert fit.nodes == 2 and fit.jobs == jobs
    assert fit.how == "cluster resized to 2 nodes"
    assert fit.load == pytest.approx(0.455, abs=0.001)


def test_fit_load_compresses_arrivals_at_the_largest_jobs_floor() -> None:
    # A 16-GPU gang keeps the cluster at 4 nodes of 4 GPUs; the window is light, so only arrivals can raise the load.
    jobs = _jobs([(1000.0 * i, 16.0 if i == 0 else 1.0, 500.0) for i in range(30)])
    before = offered_load(jobs, 16)
    fit = fit_load(jobs, 4, 1.5)
    assert fit.nodes == 4 and before < 0.2
    assert abs(offered_load(fit.jobs, 16) - 1.5) < 0.01
    assert [j.duration_s for j in fit.jobs] == [j.duration_s for j in jobs]  # only arrivals move
    assert "largest job's floor" in fit.how and "compressed" in fit.how
    factor = float(fit.how.split("compressed ")[1].rstrip("x"))
    span = jobs[-1].submit_s / fit.jobs[-1].submit_s
    assert factor == pytest.approx(span, rel=0.01)


def test_fit_load_stretches_a_window_too_heavy_for_its_smallest_cluster() -> None:
    jobs = _jobs([(10.0 * i, 4.0, 5000.0) for i in range(30)])  # ~4 x 30 GPUs busy at the end on one 4-GPU node
    fit = fit_load(jobs, 4, 1.0)
    assert "stretched" in fit.how or fit.nodes > 1
    assert abs(fit.load - 1.0) <= 0.05

"""The catalog's LLM-scale profiles (issue 30): derived as `scheduler.core.workloads.llm_profiles` states from the
steps measured on an H100 (`scheduler/core/data/llm_steps.csv`), ingested from the GPU benchmark's output, and kept
out of the models drawn for traces that name none; the same steps on an H200 state its speed."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

from scheduler.core.calibrate import llm
from scheduler.core.model import GPU_TYPES, JobKind
from scheduler.core.traces import synthetic
from scheduler.core.traces.trace import SMALLEST_GPU_GB
from scheduler.core.workloads import LLM_MODELS, LLM_STEPS_PATH, PROFILE_GPU, _rows, catalog, llm_profiles, llm_speedup

ROOT = Path(__file__).resolve().parents[1]


def _benchmark_configs() -> dict:
    torch = pytest.importorskip("torch")  # noqa: F841 - the benchmark module imports it
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import gpu_llm_profiles

    return {name: gpu_llm_profiles.param_count(c) for name, c in gpu_llm_profiles.CONFIGS["full"].items()}


def test_the_catalog_ends_with_the_measured_llm_profiles() -> None:
    names = list(catalog())
    assert names[-len(LLM_MODELS):] == list(LLM_MODELS.values())
    rows = [r for r in _rows(LLM_STEPS_PATH.read_text()) if r["gpu"] == PROFILE_GPU]
    assert PROFILE_GPU == "NVIDIA H100 80GB HBM3"
    for key, name in LLM_MODELS.items():
        mine = [r for r in rows if r["model"] == key]
        assert len(mine) >= 2, f"{key}: one run cannot show the measurement repeats"
        steps = [float(r["step_ms"]) for r in mine]
        assert max(steps) / min(steps) < 1.02  # the runs agree within 2%
        p = catalog()[name]
        step = statistics.fmean(steps)
        assert p.kind is JobKind.TRAINING
        assert p.compute_ms == pytest.approx(step * GPU_TYPES["H100-80GB"].speed, abs=0.1)
        assert p.grad_mb == pytest.approx(int(mine[0]["params"]) * 4 / 1e6, abs=0.1)
        assert p.overlap == pytest.approx(statistics.fmean(float(r["backward_ms"]) for r in mine) / step, abs=1e-3)
        assert p.mem_gb == pytest.approx(max(float(r["peak_mem_gib"]) for r in mine) + 0.5, abs=0.05)
        assert 0 < p.membw <= 1 and 0 < p.sm <= 1
        # The parts of a step add up to it (the benchmark timed them back to back).
        parts = sum(float(mine[0][c]) for c in ("forward_ms", "backward_ms", "optimizer_ms"))
        assert parts == pytest.approx(float(mine[0]["step_ms"]), rel=0.01)


def test_the_h200s_speed_is_the_h100s_times_the_measured_speedup() -> None:
    rows = _rows(LLM_STEPS_PATH.read_text())
    h200 = [r for r in rows if r["gpu"] == "NVIDIA H200"]
    assert {r["model"] for r in h200} == set(LLM_MODELS) and len(h200) >= 2 * len(LLM_MODELS)  # repeated runs
    up = llm_speedup("NVIDIA H200")
    assert 1.0 < up < 1.2  # the same chip with faster memory: faster, by much less than a generation
    assert GPU_TYPES["H200-141GB"].speed == pytest.approx(GPU_TYPES["H100-80GB"].speed * up, abs=0.005)
    # Each model's ratio, not only their mean, says the H200 is the faster.
    for key in LLM_MODELS:
        h100_ms = statistics.fmean(float(r["step_ms"]) for r in rows if r["model"] == key and r["gpu"] == PROFILE_GPU)
        h200_ms = statistics.fmean(float(r["step_ms"]) for r in h200 if r["model"] == key)
        assert h200_ms < h100_ms


def test_the_measured_models_are_the_benchmarks_models() -> None:
    counts = _benchmark_configs()
    for r in _rows(LLM_STEPS_PATH.read_text()):
        assert int(r["params"]) == counts[r["model"]]


def test_llm_profiles_move_much_more_than_the_v100_era_models() -> None:
    # What they are for: a GPT-2.7B step all-reduces 10.6 GB, 7.5x the heaviest calibrated model (Transformer-XL).
    profiles = catalog()
    assert profiles["GPT-2.7B"].grad_mb > 7 * profiles["Transformer-XL"].grad_mb
    assert profiles["GPT-1.3B"].grad_mb == pytest.approx(profiles["GPT-2.7B"].grad_mb / 2, rel=0.02)


def _full_run(tmp: Path, gpu: str = "NVIDIA H100 80GB HBM3", size: str = "full", step_ms: float = 100.0) -> Path:
    model = {"name": "gpt-1.3b", "params": 1_000_000_000, "batch": 8, "seq": 2048, "step_ms": step_ms,
             "forward_ms": 0.3 * step_ms, "backward_ms": 0.6 * step_ms, "optimizer_ms": 0.1 * step_ms, "model_tflops": 300.0, "peak_mem_gib": 40.0,
             "gpu_busy": 0.99, "mem_busy": 0.4}
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "llm_profiles.json").write_text(json.dumps({
        "environment": {"gpu": gpu, "driver": "580", "cuda": "13.0", "torch": "2.11", "date": "2026-11-26"},
        "size": size, "warmup": 5, "steps": 20, "models": [model]}))
    return tmp


def test_ingest_writes_the_table_the_profiles_are_derived_from(tmp_path: Path) -> None:
    text = llm.ingest([_full_run(tmp_path / "a"), _full_run(tmp_path / "b") / "llm_profiles.json"])
    assert "run 1: NVIDIA H100 80GB HBM3" in text and "run 2:" in text
    table = tmp_path / "steps.csv"
    table.write_text(text)
    p = llm_profiles(table)["GPT-1.3B"]
    assert set(llm_profiles(table)) == {"GPT-1.3B"}  # a model not measured is not invented
    assert p.compute_ms == pytest.approx(350.0) and p.overlap == pytest.approx(0.6)
    assert p.grad_mb == pytest.approx(4000.0) and p.mem_gb == pytest.approx(40.5)
    assert "2 runs" in p.source


def test_ingest_appends_runs_on_another_gpu_without_changing_the_profiles(tmp_path: Path) -> None:
    h100 = llm.ingest([_full_run(tmp_path / "a")])
    both = llm.ingest([_full_run(tmp_path / "b", gpu="NVIDIA H200", step_ms=80.0)], keep=h100)
    assert "run 1: NVIDIA H100 80GB HBM3" in both and "run 2: NVIDIA H200" in both
    assert [(r["run"], r["gpu"]) for r in _rows(both)] == [("1", "NVIDIA H100 80GB HBM3"), ("2", "NVIDIA H200")]
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    one.write_text(h100)
    two.write_text(both)
    assert llm_profiles(two) == llm_profiles(one)  # the profiles are the H100's runs alone
    assert llm_speedup("NVIDIA H200", two) == pytest.approx(100.0 / 80.0)
    with pytest.raises(ValueError, match="no model was measured on both"):
        llm_speedup("NVIDIA H200", one)
    # A table whose runs are not numbered as this command numbers them is not kept.
    with pytest.raises(ValueError, match="not one this command wrote"):
        llm.ingest([_full_run(tmp_path / "c")], keep=both.replace("#   run 2:", "# run two:"))


def test_ingest_refuses_what_is_not_a_real_measurement(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="size 'tiny'"):
        llm.ingest([_full_run(tmp_path / "tiny", size="tiny")])
    with pytest.raises(FileNotFoundError, match="llm_profiles.json"):
        llm.ingest([tmp_path / "nothing"])
    table = tmp_path / "steps.csv"
    table.write_text(llm.ingest([_full_run(tmp_path / "l4", gpu="NVIDIA L4")]))
    with pytest.raises(ValueError, match="NVIDIA L4"):  # no GPU_TYPES speed to state it on a V100
        llm_profiles(table)


def test_traces_that_name_no_model_never_draw_an_llm_profile() -> None:
    jobs = synthetic(20_000, seed=3).jobs
    drawn = {j.model for j in jobs}
    assert not drawn & set(LLM_MODELS.values())
    assert all(catalog()[m].mem_gb <= SMALLEST_GPU_GB for m in drawn)
    assert {"Transformer-XL", "MoE", "FSDP"} <= drawn  # the heavy calibrated models are still drawn

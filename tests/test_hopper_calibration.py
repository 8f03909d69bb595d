"""The contention model against the co-location measured on an H200 (scheduler/core/data/hopper_colocation.csv, made
by benchmarks/gpu_colocation.py on the GPU machine): the table covers what the issue asked for, the fit's replica is
the model, the share cap changes nothing unless asked, and the refitted model predicts pairs it was not fitted on
within the targets (15% mean absolute error, rank correlation 0.8)."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from scheduler.core.calibrate import hopper
from scheduler.core.contention import ContentionModel, ContentionParams
from scheduler.core.model import ClusterSpec, JobKind, JobSpec, NodeGroupSpec, Placement, build_cluster
from scheduler.core.workloads import ModelProfile


@pytest.fixture(scope="module")
def measured() -> hopper.Measured:
    return hopper.load_measured()


@pytest.fixture(scope="module")
def report(measured: hopper.Measured) -> hopper.Report:
    return hopper.evaluate(measured, other_seeds=0)


def test_the_table_has_every_pair_at_every_split(measured: hopper.Measured) -> None:
    kinds = measured.kinds
    assert sum(k == "training" for k in kinds.values()) >= 6 and sum(k == "inference" for k in kinds.values()) >= 2
    assert any("NVIDIA H200" in line and "driver" in line for line in measured.provenance)
    for a, b in itertools.permutations(kinds, 2):
        assert hopper.Config("timeslice", a, 100, b, 100) in measured.rate, (a, b)
        for s in (25, 50, 75):
            assert hopper.Config("mps", a, s, b, 100 - s) in measured.rate, (a, b, s)
    for job in kinds:
        assert all(hopper.Config("mps", job, s) in measured.rate for s in (25, 50, 75))
    # Inference services: latencies recorded, the p99 above the median.
    for c, p99 in measured.p99.items():
        assert p99 > 0 and kinds[c.job] == "inference"


def _profile(name: str, sm: float, bw: float, kind: JobKind = JobKind.TRAINING) -> ModelProfile:
    return ModelProfile(name, kind, 20.0, sm, bw, 2.0, 0.0, 0.0)


def test_the_fits_replica_is_the_contention_model() -> None:
    rng = np.random.default_rng(3)
    names = ["a", "b", "c"]
    sm, bw = rng.uniform(0.1, 1.0, 3), rng.uniform(0.1, 1.0, 3)
    profiles = {n: _profile(n, float(sm[k]), float(bw[k])) for k, n in enumerate(names)}
    params = ContentionParams(mps_interference=1.7, mps_overhead=0.03, mps_share_cap=0.8)
    configs = [hopper.Config("mps", a, s) for a in names for s in (25, 50, 75)]
    configs += [hopper.Config("mps", a, s, b, 100 - s) for a, b in itertools.permutations(names, 2) for s in (25, 50)]
    configs += [hopper.Config("timeslice", a, 100, b, 100) for a, b in itertools.permutations(names, 2)]
    model = hopper.predict(profiles, params, configs)
    pos = {n: k for k, n in enumerate(names)}
    i = np.array([pos[c.job] for c in configs])
    j = np.array([pos[c.partner] if c.partner else -1 for c in configs])
    si = np.array([1.0 if c.phase == "timeslice" else c.share / 100 for c in configs])
    sj = np.array([1.0 if c.phase == "timeslice" else (c.partner_share or 100) / 100 for c in configs])
    replica = hopper._replica(sm, bw, i, j, si, sj, 1.7, 0.03, 0.8)
    np.testing.assert_allclose(replica, model, rtol=1e-9)


def _one_gpu_slowdown(params: ContentionParams, share: float, sm: float) -> float:
    cluster = build_cluster(ClusterSpec(name="g", groups=[NodeGroupSpec(count=1, preset="hgx-h100")]))
    model = ContentionModel(cluster, {"j": _profile("j", sm, 0.3)}, params)
    model.add(0, JobSpec(name="j", submit_s=0, num_gpus=1, duration_s=1, model="j"), Placement((0,), share=share))
    return model.slowdown(0)


def test_the_share_cap_is_off_by_default_and_slows_a_capped_job_when_on() -> None:
    whole = _one_gpu_slowdown(ContentionParams(), 1.0, 0.9)
    assert _one_gpu_slowdown(ContentionParams(), 0.25, 0.9) == whole  # the V100 calibration: bit for bit as before
    capped = ContentionParams(mps_share_cap=1.0)
    assert _one_gpu_slowdown(capped, 0.25, 0.9) == pytest.approx(whole * 0.9 / 0.25)
    assert _one_gpu_slowdown(capped, 0.25, 0.2) == pytest.approx(whole)  # demand under the share: no cap


def test_the_refit_predicts_held_out_pairs_within_the_targets(report: hopper.Report) -> None:
    scores = {s.name: s for s in report.scores}
    held_before = scores["before: MPS pairs held out"]
    held_after = scores["after (fitted on the other half): MPS pairs held out"]
    assert held_after.points >= 40 and held_after.points == held_before.points
    assert held_after.mae <= 0.15 and held_after.spearman >= 0.8
    assert held_after.mae < held_before.mae / 2  # the V100 calibration does not carry over to an H200
    # The thread-percentage cap: a job alone at 25% of the SMs is slower, which the V100 model cannot say.
    assert scores["after: alone under MPS (25/50/75)"].mae < scores["before: alone under MPS (25/50/75)"].mae
    assert report.fitted.params.mps_share_cap > 0.3


def test_the_held_out_pairs_were_not_fitted_on(measured: hopper.Measured) -> None:
    train, held = hopper.held_out(measured, hopper.HOLDOUT_SEED)
    held_pairs = {frozenset((c.job, c.partner)) for c in held}
    assert held and not any(c.partner and frozenset((c.job, c.partner)) in held_pairs for c in train)
    assert all(c.phase == "mps" and measured.kinds[c.job] == "training" for c in train + held)


# The fit ends on a flat optimum, where the machine's linear algebra moves the fourth decimal it rounds to (0.021 on
# one CPU, 0.0209 on another): the committed table is the fit's within that, its words and columns exactly.
FIT_DIGITS = {"rel_tol": 1e-2, "abs_tol": 2e-3}
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


def _alike(committed: str, fitted: str) -> None:
    assert NUMBER.split(committed) == NUMBER.split(fitted)  # the same text between the numbers
    pairs = zip(map(float, NUMBER.findall(committed)), map(float, NUMBER.findall(fitted)), strict=True)
    off = [(a, b) for a, b in pairs if not math.isclose(a, b, **FIT_DIGITS)]
    assert not off, off


def test_the_committed_profiles_are_what_the_fit_writes(report: hopper.Report) -> None:
    _alike(hopper.PROFILES_PATH.read_text(), hopper.profiles_csv(report.fitted))
    profiles, params = hopper.hopper_profiles(), hopper.hopper_params()
    for field in dataclasses.fields(params):
        assert math.isclose(getattr(params, field.name), getattr(report.fitted.params, field.name),
                            **FIT_DIGITS), field.name
    assert set(profiles) == set(report.measured.kinds)
    assert profiles["resnet50"].kind is JobKind.TRAINING and profiles["bert-infer"].slo_ms > 0


def test_ingest_derives_the_table_from_benchmark_output(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text(json.dumps({
        "date_utc": "2026-01-01T00:00:00+00:00", "gpu": "NVIDIA H100 80GB HBM3", "driver": "580.1",
        "memory_mib": 81559, "configs_measured": 2, "configs_skipped_over_budget": 0, "command": "python3 x.py",
        "jobs": {"a": {"kind": "training", "items": 32, "params": 25_000_000, "mem_mb": 2048.0, "torch": "2.11",
                       "cuda": "13.0"}}}))
    fields = ["phase", "config", "mode", "job", "kind", "share", "partner", "partner_share", "items_per_s",
              "steps_per_s", "offered_rps", "p50_ms", "p99_ms", "service_ms", "windows", "util_gpu", "util_mem",
              "error"]
    with (run / "colocation.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerow({"phase": "timeslice", "config": 1, "mode": "isolated", "job": "a", "kind": "training",
                    "share": 100, "steps_per_s": 10.0, "error": ""})
        w.writerow({"phase": "mps", "config": 2, "mode": "isolated", "job": "a", "kind": "training", "share": 25,
                    "error": "the process exited (1)"})  # a failed configuration is left out, not recorded as 0
    text = hopper.ingest([run])
    assert "NVIDIA H100 80GB HBM3 driver 580.1" in text and "workload a: training" in text
    rows = list(csv.DictReader(ln for ln in text.splitlines() if not ln.startswith("#")))
    assert [(r["run"], r["phase"], r["steps_per_s"]) for r in rows] == [("1", "timeslice", "10.0")]
    path = tmp_path / "table.csv"
    path.write_text(text)
    meas = hopper.load_measured(path)
    assert meas.alone == {"a": pytest.approx(10.0)} and meas.peak_gib == {"a": 2.0}

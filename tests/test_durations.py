"""Durations learned from history (`scheduler.core.durations`): online learning per group, the fall-back to broader
groups, uncertainty that narrows with samples, bounded memory, the causal walk and the words people read.
The Alibaba loader's features are checked on a small inline file; one test on the real trace skips where
../shared is absent. The error figures on the real traces are benchmarks/durations.py's, not asserted here."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import shared_file

from scheduler.core.durations import (
    MAX_TRAIT_CHARS,
    DurationEstimate,
    DurationPredictor,
    ended_before,
    estimate_text,
    name_pattern,
    traits,
)
from scheduler.core.model import JobSpec
from scheduler.core.traces import ALIBABA_FEATURES, HOLDOUT_FROM, load_trace

ALICE = {"user": "alice", "pattern": "train-#", "model": "ResNet-50", "gpus": "4"}


def test_learns_a_groups_duration_online_and_follows_it_when_it_drifts() -> None:
    p = DurationPredictor()
    assert p.predict(ALICE) is None  # nothing ended yet: the caller keeps its default
    for _ in range(5):
        p.observe(ALICE, 600.0)
        p.observe({"user": "bob", "gpus": "1"}, 20.0)  # another group, which must not leak into alice's
    e = p.predict(ALICE)
    assert e is not None
    assert e.median_s == pytest.approx(600.0)
    assert e.basis == ("user", "pattern", "model", "gpus") and e.n == 5
    for _ in range(8):  # her runs now take 50 min: the estimate follows the recent ones
        p.observe(ALICE, 3000.0)
    e = p.predict(ALICE)
    assert e is not None and e.median_s == pytest.approx(3000.0) and e.n == 13


def test_a_thin_group_falls_back_to_a_broader_one() -> None:
    p = DurationPredictor(min_samples=3)
    for _ in range(3):
        p.observe(ALICE, 100.0)
    p.observe({**ALICE, "pattern": "eval-#"}, 5000.0)  # one run of another pattern: too thin to answer alone
    e = p.predict({**ALICE, "pattern": "eval-#"})
    assert e is not None and e.basis == ("user", "model", "gpus") and e.median_s == pytest.approx(100.0)
    # A stranger shares only the size with alice's jobs; with another size, only "every job so far".
    e = p.predict({"user": "carol", "pattern": "x", "gpus": "4"})
    assert e is not None and e.basis == ("gpus",) and e.n == 4
    e = p.predict({"user": "carol", "pattern": "x", "gpus": "8"})
    assert e is not None and e.basis == () and e.n == 4
    # A trace's own columns: the Alibaba template level answers before qos alone.
    pod = {"qos": "LS", "cpu_milli": "4000", "memory_mib": "8192", "gpus": "0.5"}
    for d in (10.0, 20.0, 40.0):
        p.observe(pod, d)
        p.observe({**pod, "cpu_milli": "8000"}, 9000.0)
    e = p.predict(pod)
    assert e is not None and e.basis == ("qos", "cpu_milli", "memory_mib", "gpus")
    assert e.median_s == pytest.approx(20.0)


def test_the_median_interval_narrows_with_samples() -> None:
    p = DurationPredictor()
    widths = []
    for k in range(60):
        p.observe(ALICE, 100.0 * 16 ** ((k * 0.618034) % 1.0))  # spread evenly over 100 s .. 1600 s
        if k + 1 in (5, 15, 60):
            e = p.predict(ALICE)
            assert e is not None
            assert e.median_low_s <= e.median_s <= e.median_high_s
            widths.append(e.median_high_s / e.median_low_s)
    assert widths[0] > widths[1] > widths[2]
    # The jobs' own spread (10-90%) is the group's, whatever n: not a figure that narrows.
    e = p.predict(ALICE)
    assert e is not None and e.quantiles_s[0] < 200.0 and e.quantiles_s[-1] > 800.0
    assert e.median_high_s / e.median_low_s < e.quantiles_s[-1] / e.quantiles_s[0]


def test_memory_stays_bounded_under_many_distinct_keys() -> None:
    p = DurationPredictor(max_groups=50, window=8)
    for _ in range(5):
        p.observe({"user": "keep", "gpus": "1"}, 60.0)
    for i in range(5000):
        p.observe({"user": f"u{i}", "pattern": f"p{i}", "gpus": "1"}, 60.0 + i)
        p.predict({"user": "keep", "gpus": "1"})  # read often: the least recently used go first, not it
        assert len(p) <= 50
    assert p.observed == 5005
    kept = p._groups
    assert all(len(g.logs) <= 8 for g in kept.values())
    assert any(key[1] == ("keep",) for key in kept)
    # A value longer than the cap is cut: a user cannot grow a key without bound either.
    p.observe({"user": "x" * 10_000, "gpus": "1"}, 60.0)
    assert max(len(v) for key in p._groups for v in key[1]) <= MAX_TRAIT_CHARS


def test_bad_input_is_refused_naming_the_field_and_changes_nothing() -> None:
    p = DurationPredictor()
    for bad in (0.0, -5.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="duration_s"):
            p.observe(ALICE, bad)
    assert p.observed == 0 and len(p) == 0 and p.predict(ALICE) is None
    with pytest.raises(ValueError, match="min_samples"):
        DurationPredictor(min_samples=0)
    with pytest.raises(ValueError, match="max_groups"):
        DurationPredictor(max_groups=0)
    with pytest.raises(ValueError, match="window"):
        DurationPredictor(min_samples=10, window=5)


def test_deterministic() -> None:
    def run() -> list[DurationEstimate | None]:
        p = DurationPredictor(max_groups=20)
        out = []
        for i in range(500):
            t = {"user": f"u{i % 37}", "gpus": str(1 + i % 3)}
            out.append(p.predict(t))
            p.observe(t, 10.0 + (i * 7919) % 5000)
        return out

    assert run() == run()


def test_text() -> None:
    e = DurationEstimate(quantiles_s=(720.0, 1200.0, 2460.0, 3000.0, 7560.0), median_low_s=2000.0,
                         median_high_s=2900.0, n=23, basis=("user", "pattern"))
    assert estimate_text(e) == e.text() == (
        "similar jobs (same user, name pattern) ran 41 min median (n = 23), 80% between 12 min and 2.1 h")
    alone = DurationEstimate((30.0, 40.0, 50.0, 60.0, 90.0), 40.0, 60.0, 7, ())
    assert alone.text() == "jobs so far ran 50 s median (n = 7), 80% between 30 s and 90 s"


def test_traits_and_name_patterns() -> None:
    assert name_pattern("sweep-lr3-seed17") == name_pattern("sweep-lr5-seed2") == "sweep-lr#-seed#"
    assert name_pattern("train[12]") == "train[#]"
    spec = JobSpec(name="bert-7", submit_s=0.0, num_gpus=0.5, duration_s=60.0, model="BERT", user="dan")
    assert traits(spec) == {"user": "dan", "pattern": "bert-#", "model": "BERT", "gpus": "0.5"}
    # A drawn model is noise; an empty feature is no trait (a level naming it does not apply).
    assert traits(spec, {"qos": "LS", "gpu_spec": ""}, model_given=False) == {
        "user": "dan", "pattern": "bert-#", "gpus": "0.5", "qos": "LS"}


def test_ended_before_reads_only_jobs_that_finished_before_each_submission() -> None:
    def job(name: str, submit: float, dur: float) -> JobSpec:
        return JobSpec(name=name, submit_s=submit, num_gpus=1, duration_s=dur, model="ResNet-50")

    jobs = [job("a", 0, 100), job("b", 50, 10), job("c", 100, 5), job("d", 200, 1)]
    assert list(ended_before(jobs)) == [(0, []), (1, []), (2, [1, 0]), (3, [2])]
    with pytest.raises(ValueError, match="submit_s"):
        list(ended_before([jobs[1], jobs[0]]))


ALIBABA_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
                  "scheduled_time")


def test_the_alibaba_loader_keeps_each_pods_request_beside_its_job(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("\n".join([
        ALIBABA_HEADER,
        "p2,8000,30517,1,460,,LS,Running,50,500,51",
        "cpu,4000,100,0,0,,BE,Running,5,60,6",  # skipped: no feature row may be left behind for it
        "p1,12000,16384,2,1000,V100M32,BE,Failed,10,100,10",
    ]) + "\n")
    trace = load_trace(str(path))
    assert [j.name for j in trace.jobs] == ["p1", "p2"]
    assert trace.features == (
        {"qos": "BE", "cpu_milli": "12000", "memory_mib": "16384", "num_gpu": "2", "gpu_milli": "1000",
         "gpu_spec": "V100M32"},
        {"qos": "LS", "cpu_milli": "8000", "memory_mib": "30517", "num_gpu": "1", "gpu_milli": "460", "gpu_spec": ""},
    )
    assert set(trace.features[0]) == set(ALIBABA_FEATURES)  # pod_phase, the pod's fate, is not a feature
    assert len(load_trace(str(path), limit=1).features) == 1


def test_on_the_real_alibaba_trace_the_groups_beat_the_global_median() -> None:
    trace = load_trace(str(shared_file("traces", "alibaba_openb_before_day130.csv")))
    jobs = trace.jobs
    assert len(trace.features) == len(jobs) and trace.features[0]["qos"]
    job_traits = [traits(j, f, model_given=False) for j, f in zip(jobs, trace.features, strict=True)]
    split = int(len(jobs) * HOLDOUT_FROM)
    p, finished = DurationPredictor(), []
    mine, base = [], []
    for i, ended in ended_before(jobs):
        for k in ended:
            p.observe(job_traits[k], jobs[k].duration_s)
            finished.append(math.log(jobs[k].duration_s))
        e = p.predict(job_traits[i])
        if i >= split and e is not None:
            actual = math.log(jobs[i].duration_s)
            mine.append(abs(math.log(e.median_s) - actual))
            base.append(abs(sorted(finished)[len(finished) // 2] - actual))
    assert len(mine) == len(jobs) - split
    assert sorted(mine)[len(mine) // 2] < sorted(base)[len(base) // 2]

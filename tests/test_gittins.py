"""The Gittins index policy and its size distribution, Tiresias' threshold options, and the threshold tuner."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import job, small_cluster

from policies import available, make_policy
from policies.gittins import (
    CLASSES,
    DEFAULT_PATH,
    POOLED,
    QUANTILES,
    Gittins,
    SizeDistribution,
    default_sizes,
    size_class,
)
from policies.registry import UnknownPolicyError
from policies.tiresias import DEFAULT_THRESHOLDS, Tiresias
from scheduler.core.contention import ContentionModel
from scheduler.core.decisions import Place, Preempt, Wait, WakeAt
from scheduler.core.model import Job, JobPhase, JobSpec, Placement, SpecError
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.workloads import catalog


def pooled_only(quantiles: list[float], samples: int = 100) -> SizeDistribution:
    """A distribution whose every class falls back to one pooled quantile table."""
    return SizeDistribution.from_dict({
        "format": "corral-size-distribution/1",
        "classes": {POOLED: {"samples": samples, "quantiles": quantiles}},
    })


ONE = job("one", 0, 1, 10)  # a spec per class, for lookups
FRAC = job("frac", 0, 0.5, 10)
FOUR = job("four", 0, 4, 10)


# ---- the index ---------------------------------------------------------------------------------------------------


def test_index_matches_a_hand_computed_two_mode_distribution() -> None:
    # Quantiles 10, 10, 1000 at probabilities 0, 1/2, 1: half the jobs need exactly 10 GPU-s (a point mass), the
    # other half are spread uniformly over (10, 1000].
    d = pooled_only([10, 10, 1000])
    # a = 0: giving Δ = 10 finishes half the jobs for 10 GPU-s each: 0.5 / 10. Giving Δ = 1000 finishes all, at an
    # expected cost of E[S] = 0.5 * 10 + 0.5 * 505 = 257.5: 1 / 257.5. The index is the better ratio.
    assert d.index(0.0, ONE) == pytest.approx(0.05)
    assert d.exact_index(0.0, ONE) == pytest.approx(0.05)
    assert d.expected_remaining(0.0, ONE) == pytest.approx(257.5)
    # a = 10: what is left is uniform on (10, 1000]: it takes Δ = 990 to be sure, at expected cost 495.
    assert d.index(10.0, ONE) == pytest.approx(1 / 495)
    assert d.expected_remaining(10.0, ONE) == pytest.approx(495.0)
    # a = 500 (inside the bucket [10, 1000)): the exact index is that of a uniform on (500, 1000], 1 / 250; the
    # policy's index is the bucket's, read at its lower edge.
    assert d.exact_index(500.0, ONE) == pytest.approx(1 / 250)
    assert d.index(500.0, ONE) == pytest.approx(1 / 495)
    assert d.expected_remaining(500.0, ONE) == pytest.approx(250.0)
    # Beyond the largest sample: as much again as it has had.
    assert d.expected_remaining(4000.0, ONE) == pytest.approx(4000.0)
    assert d.exact_index(4000.0, ONE) == pytest.approx(1 / 4000)
    assert d.index(4000.0, ONE) == pytest.approx(1 / 4000)
    # Attained service below the smallest sample counts from zero (the index rises towards it).
    assert d.exact_index(5.0, ONE) == pytest.approx(0.5 / 5)
    assert d.index(5.0, ONE) == pytest.approx(0.05)


def test_index_falls_with_attained_service_on_a_heavy_tail_and_rises_on_a_light_one() -> None:
    n = 20000
    u = (np.arange(n) + 0.5) / n
    pareto = 60.0 * (1 - u) ** (-1 / 1.1)  # Pareto, shape 1.1: decreasing hazard rate
    heavy = SizeDistribution.from_samples({"1": pareto})
    smallest = float(heavy.table("1").t[0])  # the smallest size the table knows (~60)
    grid = np.geomspace(smallest, float(np.quantile(pareto, 0.99)), 80)
    idx = np.array([heavy.index(a, ONE) for a in grid])
    assert np.all(np.diff(idx) <= 1e-9 * idx[:-1]), "a heavy tail must favour jobs that have had less service"
    assert idx[0] > 20 * idx[-1]
    # Below the smallest size (~60) no job can finish yet: the index rises until then.
    assert heavy.index(0.0, ONE) < heavy.index(smallest, ONE)
    # Expected remaining service grows with attained service on a heavy tail (the longer it ran, the longer it runs).
    rem = [heavy.expected_remaining(a, ONE) for a in (100.0, 1000.0, 10000.0)]
    assert rem[0] < rem[1] < rem[2]
    # On a uniform distribution (increasing hazard) the job closest to done is the best bet.
    light = SizeDistribution.from_samples({"1": np.linspace(1000.0, 2000.0, 500)})
    assert light.index(1800.0, ONE) > light.index(1200.0, ONE) > light.index(0.0, ONE)


def test_small_classes_fall_back_to_the_pooled_distribution() -> None:
    rng = np.random.default_rng(0)
    samples = {"1": rng.lognormal(5, 1, 200), "2-4": rng.lognormal(10, 1, 10)}  # 10 < MIN_SAMPLES
    d = SizeDistribution.from_samples(samples)
    assert d.classes["2-4"].fallback and d.classes["2-4"].samples == 10
    assert not d.classes["1"].fallback
    assert d.table_key(FOUR) == POOLED and d.table_key(ONE) == "1" and d.table_key(FRAC) == POOLED
    pooled = np.concatenate(list(samples.values()))
    assert d.table(POOLED).samples == 210
    # The 4-GPU job is read from the pooled table, which the long 4-GPU samples pull upwards from the 1-GPU table (a
    # quantile table smooths the sparse top samples, hence the loose match with the sample mean).
    assert d.expected_remaining(0.0, FOUR) == pytest.approx(float(pooled.mean()), rel=0.2)
    assert d.index(0.0, FOUR) == d.table(POOLED).exact_index(0.0) == d.index(0.0, job("x", 0, 16, 1))
    assert d.expected_remaining(0.0, ONE) == pytest.approx(float(samples["1"].mean()), rel=0.05)
    assert d.expected_remaining(0.0, FOUR) > 2 * d.expected_remaining(0.0, ONE)


def test_size_classes() -> None:
    assert [size_class(job("x", 0, g, 1)) for g in (0.25, 1, 2, 4, 5, 8, 16)] == \
        ["frac", "1", "2-4", "2-4", "5-8", "5-8", "9+"]


def test_json_round_trip_keeps_quantile_tables_not_samples(tmp_path) -> None:
    rng = np.random.default_rng(1)
    d = SizeDistribution.from_jobs(
        [job(f"j{i}", 0, g, float(rng.lognormal(6, 2))) for i, g in enumerate([1] * 3000 + [0.5] * 40 + [8] * 5)],
        sources=["test"])
    data = json.loads(json.dumps(d.to_dict()))
    assert len(data["classes"]["1"]["quantiles"]) == QUANTILES + 1  # 3,000 samples kept as 201 numbers
    assert data["classes"]["5-8"] == {"samples": 5, "fallback": POOLED}
    assert data["sources"] == ["test"]
    back = SizeDistribution.from_dict(data)
    for spec in (ONE, FRAC, FOUR, job("e", 0, 8, 1)):
        for a in (0.0, 37.0, 500.0, 1e5, 1e9):
            assert back.index(a, spec) == pytest.approx(d.index(a, spec))
            assert back.expected_remaining(a, spec) == pytest.approx(d.expected_remaining(a, spec))
    path = tmp_path / "sizes.json"
    d.save(path)
    assert SizeDistribution.load(path).index(100.0, ONE) == pytest.approx(d.index(100.0, ONE))
    path.write_text('{"format": "something else"}')
    with pytest.raises(SpecError, match="not a size distribution"):
        SizeDistribution.load(path)
    with pytest.raises(ValueError, match="nondecreasing"):
        pooled_only([10, 5, 100])


def test_the_shipped_table_is_small_cites_its_sources_and_covers_every_class() -> None:
    assert DEFAULT_PATH.stat().st_size < 100_000
    data = json.loads(DEFAULT_PATH.read_text())
    cited = json.dumps(data["sources"])
    assert "philly_day60.csv" in cited and "alibaba_openb_before_day130.csv" in cited and "synthetic" in cited
    assert all("before the hold-out" in s["part"] for s in data["sources"] if "trace" in s)
    d = default_sizes()
    assert set(data["classes"]) == {POOLED, *CLASSES}
    # What the traces say: a fresh 8-GPU job is expected to need far more service than a fresh GPU share.
    assert d.expected_remaining(0.0, job("x", 0, 8, 1)) > 10 * d.expected_remaining(0.0, FRAC)


# ---- the policy ----------------------------------------------------------------------------------------------------


def view_of(cluster, running: list[tuple[JobSpec, Placement, float]], now: float) -> tuple[ClusterView, list[Job]]:
    """A view with these jobs running since t=0 with the given attained service now; ids 100, 101, ..."""
    state = ClusterState(cluster, catalog())
    model = ContentionModel(cluster)
    jobs: dict[int, Job] = {}
    for i, (spec, placement, attained) in enumerate(running):
        j = Job(100 + i, spec, spec.duration_s)
        state.allocate(j.id, spec, placement)
        model.add(j.id, spec, placement)
        j.state, j.placement, j.start_s = JobPhase.RUNNING, placement, now
        j.attained_gpu_s = attained  # as if it had run that long before `now`
        jobs[j.id] = j
    view = ClusterView(state, model, jobs)
    view.now = now
    return view, list(jobs.values())


def pending(job_id: int, spec: JobSpec) -> Job:
    return Job(job_id, spec, spec.duration_s)


def short_small_long_big() -> SizeDistribution:
    """1-GPU jobs need ~100 GPU-s, 4-GPU jobs ~100,000."""
    return SizeDistribution.from_samples({"1": np.linspace(50, 150, 100), "2-4": np.linspace(5e4, 1.5e5, 100)})


def test_gittins_serves_a_job_of_a_short_class_before_an_earlier_job_of_a_long_class() -> None:
    cluster = small_cluster(nodes=1, gpus=4)
    view, _ = view_of(cluster, [(job("r", 0, 1, 1e6), Placement((0,)), 10.0)], now=0.0)  # 3 GPUs free
    big, small = pending(0, job("big", 0, 3, 1000)), pending(1, job("small", 1, 1, 1000))
    sizes = short_small_long_big()
    assert sizes.index(0.0, small.spec) > 100 * sizes.index(0.0, big.spec)
    out = Gittins(sizes=sizes).schedule(view, [big, small], 0.0)
    placed = [d.job_id for d in out if isinstance(d, Place)]
    assert placed == [1], "the short-class job goes first and the big one no longer fits"
    assert any(isinstance(d, Wait) and d.job_id == 0 for d in out)
    # Tiresias (arrival order inside its first queue) serves the big job first instead.
    out = Tiresias().schedule(view_of(cluster, [(job("r", 0, 1, 1e6), Placement((0,)), 10.0)], 0.0)[0],
                              [big, small], 0.0)
    assert [d.job_id for d in out if isinstance(d, Place)] == [0]


def test_gittins_preempts_only_from_strictly_lower_queues_and_wakes_when_a_job_drops() -> None:
    sizes = SizeDistribution.from_samples({"1": 60.0 * (1 - (np.arange(5000) + 0.5) / 5000) ** (-1 / 1.1)})
    policy = Gittins(sizes=sizes, thresholds=(300.0, 3000.0))
    # Attained service that puts a 1-GPU job in each queue.
    by_level: dict[int, float] = {}
    for a in np.geomspace(1.0, 1e6, 400):
        by_level.setdefault(policy.rank_level(ONE, float(a))[1], float(a))
    assert set(by_level) >= {0, 1, 2}
    cluster = small_cluster(nodes=1, gpus=2)
    running = [(job("q1", 0, 1, 1e7), Placement((0,)), by_level[1]),
               (job("q2", 0, 1, 1e7), Placement((1,)), by_level[2])]
    # A fresh job (queue 0) preempts the lowest-priority one, in queue 2.
    view, (q1, q2) = view_of(cluster, running, now=0.0)
    out = policy.schedule(view, [pending(0, job("new", 0, 1, 100))], 0.0)
    assert [d.job_id for d in out if isinstance(d, Preempt)] == [q2.id]
    assert any(isinstance(d, Place) and d.job_id == 0 for d in out)
    # A waiting job of queue 2 may not preempt the queue-2 job (same queue) nor the queue-1 one (higher priority).
    policy = Gittins(sizes=sizes, thresholds=(300.0, 3000.0))
    view, (q1, q2) = view_of(cluster, running, now=0.0)
    waiting = pending(1, job("old", 0, 1, 1e6))
    waiting.attained_gpu_s = by_level[2]
    out = policy.schedule(view, [waiting], 0.0)
    assert not any(isinstance(d, (Preempt, Place)) for d in out)
    assert any(isinstance(d, Wait) for d in out)
    # It asks to be woken when the queue-1 job next changes queue (then it may be preempted), no later.
    wake = [d.time for d in out if isinstance(d, WakeAt)]
    level, cross = policy.level_and_next(q1.spec, by_level[1])
    assert level == 1 and cross is not None
    assert wake == [pytest.approx(cross - by_level[1] + 1e-6)]
    assert policy.rank_level(q1.spec, cross)[1] != 1


@pytest.mark.parametrize("policy", ["gittins", "gittins:thresholds=60,600,6000,starvation=2"])
def test_gittins_keeps_the_invariants_and_finishes_every_job(policy: str) -> None:
    from test_policies import CheckedSimulator, mixed_cluster

    for cluster in (small_cluster(nodes=2, gpus=4, interconnect="pcie", switches=2), mixed_cluster()):
        trace = synthetic_trace()
        sim = CheckedSimulator(cluster, trace, make_policy(policy, seed=1))
        result = sim.run()
        accepted = [j for j in result.jobs if j.state is not JobPhase.REJECTED]
        assert all(j.state is JobPhase.DONE for j in accepted)
        assert sim.starts >= len(accepted)


def synthetic_trace() -> list[JobSpec]:
    from scheduler.core.traces import synthetic

    return synthetic(150, seed=11, mean_interarrival_s=120, frac_share=0.3, inference_share=0.1).jobs


def test_gittins_is_registered_and_takes_options() -> None:
    assert "gittins" in available() and "gittins:NAME" in available()
    p = make_policy("gittins:thresholds=100,1000")
    assert isinstance(p, Gittins) and p.thresholds == [100.0, 1000.0] and p.name == "gittins:thresholds=100,1000"
    assert make_policy("gittins:starvation=3").starve_factor == 3.0
    with pytest.raises(UnknownPolicyError, match="'gittins:size=3': unknown option 'size'"):
        make_policy("gittins:size=3")


# ---- tiresias:thresholds= ------------------------------------------------------------------------------------------


def test_tiresias_thresholds_option_parses_and_plain_tiresias_keeps_its_defaults() -> None:
    plain = make_policy("tiresias")
    assert plain.name == "tiresias" and plain.thresholds == list(DEFAULT_THRESHOLDS)
    p = make_policy("tiresias:thresholds=60,600,3600")
    assert isinstance(p, Tiresias) and p.thresholds == [60.0, 600.0, 3600.0] and p.starvation_factor is None
    assert p.name == "tiresias:thresholds=60,600,3600"
    p = make_policy("tiresias:thresholds=60, 600,starvation=8")
    assert p.thresholds == [60.0, 600.0] and p.starvation_factor == 8.0
    assert p.name == "tiresias:thresholds=60,600,starvation=8"
    p = make_policy("tiresias:starvation=2.5")
    assert p.thresholds == list(DEFAULT_THRESHOLDS) and p.starvation_factor == 2.5


@pytest.mark.parametrize(("name", "message"), [
    ("tiresias:", "no options given"),
    ("tiresias:levels=3", "unknown option 'levels'; choose from thresholds=N,N,..., starvation=N"),
    ("tiresias:thresholds=60,ten", "option 'thresholds': 'ten' is not a number"),
    ("tiresias:thresholds=600,60", "60 after 600 is not increasing"),
    ("tiresias:thresholds=60,60", "60 after 60 is not increasing"),
    ("tiresias:thresholds=0,60", "0 is not positive"),
    ("tiresias:thresholds=-5", "-5 is not positive"),
    ("tiresias:thresholds=nan", "'nan' is not a finite number"),
    ("tiresias:thresholds=", "option 'thresholds' has an empty value"),
    ("tiresias:60,600", "expected KEY=VALUE, got '60'"),
    ("tiresias:starvation=2,3", "option 'starvation' takes one number"),
    ("tiresias:starvation=0", "option 'starvation': 0 is not positive"),
    ("tiresias:thresholds=60,thresholds=600", "option 'thresholds' given twice"),
])
def test_tiresias_options_refuse_bad_values_naming_the_problem(name: str, message: str) -> None:
    with pytest.raises(UnknownPolicyError) as err:
        make_policy(name)
    assert message in str(err.value)
    assert f"'{name}'" in str(err.value)
    assert isinstance(err.value, SpecError)


def test_tiresias_with_low_thresholds_preempts_where_the_default_does_not() -> None:
    # One GPU. A long job starts at 0; a short one arrives at 100. By then the long job has attained 100 GPU-s: under
    # the default thresholds (3600, ...) both are in queue 0 and the short one waits; with 60,600 the long job is in
    # queue 1 and the short one preempts it.
    cluster = small_cluster(nodes=1, gpus=1)
    trace = [job("long", 0, 1, 1000), job("short", 100, 1, 50)]
    default = {j.spec.name: j for j in Simulator(cluster, trace, make_policy("tiresias")).run().jobs}
    tuned = {j.spec.name: j for j in Simulator(cluster, trace, make_policy("tiresias:thresholds=60,600")).run().jobs}
    assert default["short"].end_s > default["long"].end_s and default["long"].preemptions == 0
    assert tuned["short"].end_s < tuned["long"].end_s and tuned["long"].preemptions == 1
    assert tuned["short"].end_s == pytest.approx(150.0)


def test_tiresias_thresholds_change_a_simulated_workload() -> None:
    cluster = small_cluster(nodes=2, gpus=4)
    trace = synthetic_trace()
    base = Simulator(cluster, trace, make_policy("tiresias")).run().metrics
    low = Simulator(cluster, trace, make_policy("tiresias:thresholds=60,600")).run().metrics
    assert low["preemptions"] > base["preemptions"]
    assert low["avg_jct_s"] != pytest.approx(base["avg_jct_s"])


def test_a_gang_that_needs_the_last_gpu_of_a_float_sum_can_preempt() -> None:
    # Free capacity is a float sum of shares: 0.3 + 0.7 freed by two shares leaves 0.99999...; a gang spanning both
    # nodes must still find its last GPU among the victims.
    from policies.placement import Planner
    from policies.victim_choice import pick_victims

    cluster = small_cluster(nodes=2, gpus=2)  # a: 0.1 of a 32 GB GPU is 3.2 GB under MPS, a model that fits it
    view, running = view_of(cluster, [(job("a", 0, 0.1, 1e6, model="ResNet-18-bs64"), Placement((0,), 0.1), 0.0),
                                      (job("b", 0, 0.2, 1e6), Placement((0,), 0.2), 0.0),
                                      (job("c", 0, 1, 1e6), Placement((1,)), 0.0)], now=0.0)
    planner = Planner(view)
    # 0.7 + 2 GPUs free; a 4-GPU gang needs 1.3 more: b (0.2), a (0.1), c (1.0) together give exactly that.
    chosen = pick_victims(view, planner, job("gang", 0, 4, 10), [running[1], running[0], running[2]])
    assert [v.spec.name for v in chosen] == ["b", "a", "c"]


# ---- agents/tune.py ------------------------------------------------------------------------------------------------


def test_tune_picks_the_best_candidate_on_training_windows_only(tmp_path) -> None:
    from agents.tune import BASELINE, policy_name, training_scenarios, tune
    from scheduler.core.traces import HOLDOUT_FROM

    # Training windows of a trace never reach its hold-out quarter.
    rows = ["job_id,submit_s,num_gpus,duration_s,kind,model"]
    rows += [f"j{i},{i * 40},{1 if i % 5 else 2},{60 + (i * 37) % 900},training,ResNet-50-bs64" for i in range(200)]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    scenarios = training_scenarios([str(path)], 6, seed=1, window=30)
    assert all(sc.start + sc.window <= int(200 * HOLDOUT_FROM) for sc in scenarios)
    assert all(0.8 <= sc.load <= 2.2 for sc in scenarios)

    grid = [(60.0, 600.0), (10.0, 100.0, 1000.0)]
    ticks: list[int] = []
    result = tune(training_scenarios(["synthetic", str(path)], 2, seed=0, window=40), grid=grid,
                  progress=lambda: ticks.append(1))
    names = {r["name"] for r in result.candidates}
    assert names == {BASELINE, policy_name(grid[0]), policy_name(grid[1])}
    assert len(ticks) == 2 * 3
    base = next(r for r in result.candidates if r["name"] == BASELINE)
    assert base["estimate"] == pytest.approx(1.0)
    best = min(result.candidates, key=lambda r: r["estimate"])
    assert result.chosen == best["name"] or (best["estimate"] == pytest.approx(1.0) and result.chosen == BASELINE)
    assert make_policy(result.chosen).name == result.chosen
    assert policy_name((60.0, 600.0, 6000.0)) == "tiresias:thresholds=60,600,6000"
    assert policy_name(DEFAULT_THRESHOLDS) == "tiresias"


def test_corral_tune_prints_each_candidate_and_the_choice(tmp_path) -> None:
    from click.testing import CliRunner

    from scheduler.cli.commands import main

    out = tmp_path / "tune.json"
    result = CliRunner().invoke(main, ["tune", "--workload", "synthetic", "--scenarios", "2", "--window", "30",
                                       "--seed", "3", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert len(data["candidates"]) == 10 and len(data["scenarios"]) == 2
    assert f"chosen: {data['chosen']}" in result.output
    for row in data["candidates"]:
        assert row["name"] in result.output and f"{row['estimate']:.3f}x" in result.output
    bad = CliRunner().invoke(main, ["tune", "--workload", str(tmp_path / "missing.csv")])
    assert bad.exit_code == 2 and "neither 'synthetic' nor an existing trace file" in bad.output

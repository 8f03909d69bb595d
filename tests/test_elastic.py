"""Elastic jobs in the model (issue 49, part 1): the spec's sizes, the speed at each size from the contention model,
the pause of a resize, elastic jobs in traces and synthetic workloads, and a run at another size in the shared loop."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from pathlib import Path

import pytest

from scheduler.core.book import Book
from scheduler.core.contention import ContentionModel
from scheduler.core.decisions import Decision, Place
from scheduler.core.elastic import (
    make_elastic,
    measured_pauses,
    pause_fit,
    resize_pause_s,
    sized,
    sizes_within,
    speedup,
)
from scheduler.core.model import Job, JobKind, JobSpec, Placement, parse_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterState, ClusterView, PlacementError
from scheduler.core.traces import TraceError, load_trace, synthetic
from scheduler.core.workloads import catalog


def job(num_gpus: float = 4, model: str = "ResNet-50-bs64", **elastic: object) -> JobSpec:
    return JobSpec(name="j", submit_s=0.0, num_gpus=num_gpus, duration_s=100.0, model=model,
                   **elastic)  # type: ignore[arg-type]


# ---- the spec ----------------------------------------------------------------------------------------------------


def test_an_elastic_spec_says_its_sizes() -> None:
    assert tuple(job(min_gpus=2, max_gpus=8).size_choices()) == (2, 3, 4, 5, 6, 7, 8)
    assert tuple(job(min_gpus=2, max_gpus=8, sizes=(2, 4, 8)).size_choices()) == (2, 4, 8)
    assert job(min_gpus=2, max_gpus=8).elastic
    assert not job().elastic and tuple(job().size_choices()) == (4,)
    assert not job(min_gpus=4, max_gpus=4).elastic  # one size: rigid, whatever it says


@pytest.mark.parametrize(("fields", "named"), [
    ({"min_gpus": 2}, "min_gpus and max_gpus go together"),
    ({"min_gpus": 8, "max_gpus": 16}, "min_gpus <= num_gpus <= max_gpus"),
    ({"min_gpus": 0, "max_gpus": 8}, "min_gpus >= 1"),
    ({"min_gpus": 2, "max_gpus": 8, "sizes": (2, 8)}, "include num_gpus"),
    ({"min_gpus": 2, "max_gpus": 8, "sizes": (8, 4, 2)}, "distinct and increasing"),
    ({"min_gpus": 2, "max_gpus": 8, "resize_pause_s": -1.0}, "resize_pause_s"),
])
def test_a_bad_elastic_spec_is_refused_naming_what_is_wrong(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        job(**fields)


def test_a_gpu_share_cannot_be_elastic() -> None:
    with pytest.raises(ValueError, match="whole GPUs"):
        job(num_gpus=0.5, min_gpus=1, max_gpus=2)


def test_sized_runs_the_job_at_a_size_it_accepts_only() -> None:
    spec = job(min_gpus=2, max_gpus=8, sizes=(2, 4, 8))
    assert sized(spec, 8).workers == 8 and sized(spec, 8).min_gpus == 2
    assert sized(spec, 4) is spec
    with pytest.raises(ValueError, match="not 3"):
        sized(spec, 3)
    huge = job(min_gpus=2, max_gpus=10**12)  # bounds a trace may give: asked without listing them
    assert sized(huge, 10**11).workers == 10**11
    with pytest.raises(ValueError, match="runs at 2 to 1000000000000 GPUs, not 1"):
        sized(huge, 1)


# ---- speed at each size ------------------------------------------------------------------------------------------


def test_speed_at_a_size_is_never_superlinear_and_one_at_the_reference() -> None:
    model = ContentionModel(parse_cluster("dgx-a100:4"))
    for name in ("ResNet-50-bs64", "Transformer-XL", "MoE"):
        spec = job(model=name, min_gpus=1, max_gpus=32)
        assert speedup(model, spec, 4) == 1.0
        for k in spec.size_choices():
            assert 0 < speedup(model, spec, k) <= k / 4 + 1e-12, (name, k)


def test_a_model_whose_gradients_are_large_scales_worse_across_servers() -> None:
    # dgx-a100: 8 GPUs a server on NVLink, servers joined by NICs. Inside a server the all-reduce hides under compute;
    # across servers MoE's 1.8 GB of gradients a step do not, ResNet-50's 27 MB do.
    model = ContentionModel(parse_cluster("dgx-a100:4"))
    light, heavy = job(min_gpus=1, max_gpus=32), job(model="MoE", min_gpus=1, max_gpus=32)
    assert speedup(model, light, 32) == pytest.approx(8.0)
    assert speedup(model, heavy, 8) == pytest.approx(2.0)
    assert speedup(model, heavy, 32) < 0.5 * speedup(model, light, 32)
    assert speedup(model, heavy, 16) < speedup(model, heavy, 8)  # the first hop across servers costs more than it adds


def test_a_sized_run_is_priced_by_the_contention_model_on_its_placement() -> None:
    # The same 8 workers of MoE, packed on one server and spread over four: the spread run is slower, as a rigid
    # 8-GPU job would be (one rule for both).
    cluster = parse_cluster("dgx-a100:4")
    model = ContentionModel(cluster)
    spec = sized(job(model="MoE", min_gpus=2, max_gpus=16), 8)
    packed = model.predict(spec, Placement(tuple(range(8)))).slowdown
    spread = model.predict(spec, Placement((0, 1, 8, 9, 16, 17, 24, 25))).slowdown
    assert packed == pytest.approx(1.0) and spread > 1.5


# ---- the pause of a resize ---------------------------------------------------------------------------------------


def test_a_resize_pauses_a_job_for_its_own_figure_or_the_measured_default() -> None:
    profiles = catalog()
    spec = job(min_gpus=2, max_gpus=8)
    fit = pause_fit()
    assert resize_pause_s(spec, profiles) == fit.restart_s + fit.checkpoint_s_per_gb * profiles[spec.model].mem_gb
    big = job(model="GPT-2.7B", min_gpus=2, max_gpus=8)
    assert resize_pause_s(big, profiles) > resize_pause_s(spec, profiles)  # more memory to write and read back
    assert resize_pause_s(job(min_gpus=2, max_gpus=8, resize_pause_s=5.0), profiles) == 5.0


def test_the_default_pause_is_fitted_from_every_measured_resize_and_predicts_each_workload() -> None:
    rows = measured_pauses()
    fit = pause_fit()
    assert fit.resizes == len(rows) >= 3 and not any(str(r["change"]).startswith("start->") for r in rows)
    # The part no checkpoint sets lies among the measured ones (a median, not a constant someone typed).
    fixed = sorted(float(r["pause_s"]) - float(r["save_s"]) - float(r["load_s"]) for r in rows)
    assert fixed[0] <= fit.restart_s <= fixed[-1]
    # Each workload's pause as the model gives it is within a third of its measured median: the fit describes
    # the measurements it was made from, the small checkpoint's (ResNet-50) and the large ones' (BERT, GPT-2).
    by_workload: dict[str, list[dict[str, float | str]]] = {}
    for r in rows:
        by_workload.setdefault(str(r["workload"]), []).append(r)
    assert len(by_workload) >= 2
    for name, rs in by_workload.items():
        measured = sorted(float(r["pause_s"]) for r in rs)[len(rs) // 2]
        assert fit.pause_s(float(rs[0]["footprint_gb"])) == pytest.approx(measured, rel=1 / 3), name


# ---- in workloads ------------------------------------------------------------------------------------------------


def test_make_elastic_stretches_whole_gpu_training_jobs_from_half_to_twice() -> None:
    jobs = [job(num_gpus=8), job(num_gpus=1), job(num_gpus=0.5),
            JobSpec(name="s", submit_s=0.0, num_gpus=1, duration_s=10.0, model="ResNet-50-bs64",
                    kind=JobKind.INFERENCE)]
    out = make_elastic(jobs, 0.5, [0.1, 0.2, 0.1, 0.1])
    assert (out[0].min_gpus, out[0].max_gpus, out[0].num_gpus) == (4, 16, 8)
    assert (out[1].min_gpus, out[1].max_gpus) == (1, 2)
    assert out[2] is jobs[2] and out[3] is jobs[3]  # a GPU share, an inference service: one size
    assert make_elastic(jobs, 0.5, [0.9, 0.9, 0.9, 0.9]) == jobs  # draws over the share


def test_synthetic_elastic_share_changes_nothing_else() -> None:
    plain = synthetic(3000, seed=4).jobs
    mixed = synthetic(3000, seed=4, elastic_share=0.5).jobs
    assert [(j.submit_s, j.num_gpus, j.duration_s, j.model) for j in plain] == \
        [(j.submit_s, j.num_gpus, j.duration_s, j.model) for j in mixed]
    candidates = [j for j in mixed if j.kind is JobKind.TRAINING and j.num_gpus >= 1]
    share = sum(j.elastic for j in candidates) / len(candidates)
    assert 0.45 < share < 0.55
    assert all(not j.elastic for j in mixed if j.num_gpus < 1 or j.kind is JobKind.INFERENCE)
    assert all(j.min_gpus == max(1, j.workers // 2) and j.max_gpus == 2 * j.workers for j in mixed if j.elastic)


def test_the_synthetic_spec_takes_elastic_and_checks_it() -> None:
    assert sum(j.elastic for j in load_trace("synthetic:400,elastic=1").jobs) > 100
    with pytest.raises(TraceError, match="elastic"):
        load_trace("synthetic:10,elastic=1.5")


def test_the_corral_csv_takes_min_and_max_gpus(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_s,num_gpus,duration_s,kind,model,min_gpus,max_gpus\n"
                    "a,0,4,600,training,ResNet-50-bs64,2,8\nb,5,2,600,training,ResNet-50-bs64,,\n")
    a, b = load_trace(str(path)).jobs
    assert (a.min_gpus, a.max_gpus, a.elastic) == (2, 8, True)
    assert not b.elastic


@pytest.mark.parametrize(("cells", "named"), [
    ("2,", "line 2: column 'max_gpus'"),
    ("8,16", "line 2: min_gpus <= num_gpus <= max_gpus"),
    ("two,8", "min_gpus"),
])
def test_a_bad_elastic_row_is_refused_naming_line_and_column(tmp_path: Path, cells: str, named: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"job_id,submit_s,num_gpus,duration_s,kind,model,min_gpus,max_gpus\n"
                    f"a,0,4,600,training,ResNet-50-bs64,{cells}\n")
    with pytest.raises(TraceError, match=named):
        load_trace(str(path))


# ---- a run at another size, in the shared loop ---------------------------------------------------------------------


class AtSize:
    """Places each queued job on the first `size` GPUs (the node's), whatever its own size: a policy that sizes."""

    name = "at-size"
    oracle = False

    def __init__(self, size: int) -> None:
        self.size = size

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        return [Place(j.id, Placement(tuple(range(self.size)))) for j in list(queue)[:1] if not view.running]


@pytest.mark.parametrize(("size", "jct"), [(4, 1000.0), (8, 500.0), (2, 2000.0)])
def test_an_elastic_job_placed_at_another_size_runs_at_that_size_speed(size: int, jct: float) -> None:
    # ResNet-50 scales linearly inside an NVLink server (its all-reduce hides under compute): its 1,000 s of work at
    # 4 GPUs take 500 s at 8 and 2,000 s at 2; it attains the same GPU-seconds at every size.
    cluster = parse_cluster("dgx-a100:1")
    spec = JobSpec(name="e", submit_s=0.0, num_gpus=4, duration_s=1000.0, model="ResNet-50-bs64", min_gpus=2,
                   max_gpus=8)
    sim = Simulator(cluster, [spec], AtSize(size))
    result = sim.run()
    done = sim.jobs[0]
    assert result.jct()[0] == pytest.approx(jct)
    assert done.attained_gpu_s == pytest.approx(4000.0)
    assert done.spec is spec and done.submitted is None and done.speedup == 1.0  # the submitted spec, put back


def test_a_rigid_job_or_a_size_an_elastic_job_refuses_is_not_placed() -> None:
    cluster = parse_cluster("dgx-a100:1")
    rigid = JobSpec(name="r", submit_s=0.0, num_gpus=4, duration_s=100.0, model="ResNet-50-bs64")
    with pytest.raises(PlacementError, match="gang of 4 needs 4 GPUs"):
        Simulator(cluster, [rigid], AtSize(8)).run()
    picky = JobSpec(name="p", submit_s=0.0, num_gpus=4, duration_s=100.0, model="ResNet-50-bs64", min_gpus=2,
                    max_gpus=8, sizes=(2, 4, 8))
    with pytest.raises(PlacementError, match=r"runs at \[2, 4, 8\] GPUs, not 3"):
        Simulator(cluster, [picky], AtSize(3)).run()


def test_a_refused_start_leaves_an_elastic_job_as_it_was() -> None:
    cluster = parse_cluster("dgx-a100:1")
    profiles = catalog()
    book = Book(ClusterState(cluster, profiles), ContentionModel(cluster, profiles))
    holder = Job(0, JobSpec(name="h", submit_s=0.0, num_gpus=1, duration_s=10.0, model="ResNet-50-bs64"), 10.0)
    book.start(holder, Placement((0,)), 0.0)
    elastic = Job(1, job(min_gpus=2, max_gpus=8), 100.0)
    before = elastic.spec
    with pytest.raises(PlacementError):
        book.start(elastic, Placement(tuple(range(8))), 0.0)  # GPU 0 is taken
    assert elastic.spec is before and elastic.submitted is None and elastic.speedup == 1.0


def test_a_new_priority_keeps_a_running_elastic_job_at_its_size() -> None:
    cluster = parse_cluster("dgx-a100:1")
    profiles = catalog()
    book = Book(ClusterState(cluster, profiles), ContentionModel(cluster, profiles))
    running = Job(0, job(min_gpus=2, max_gpus=8), 100.0)
    book.start(running, Placement(tuple(range(8))), 0.0)
    book.respec(running, dataclasses.replace(running.submitted, priority=5))  # type: ignore[arg-type]
    assert running.spec.workers == 8 and running.spec.priority == 5
    assert running.submitted is not None and running.submitted.num_gpus == 4 and running.submitted.priority == 5
    book.stop(running, 10.0)
    assert running.spec.num_gpus == 4 and running.spec.priority == 5 and running.submitted is None


def test_sizes_within_reads_only_the_sizes_asked_for() -> None:
    wide = job(min_gpus=1, max_gpus=8192)
    assert tuple(sizes_within(wide, 3, 6)) == (3, 4, 5, 6) and isinstance(sizes_within(wide, 3, 6), range)
    assert tuple(sizes_within(wide, 8190, 9000)) == (8190, 8191, 8192) and not sizes_within(wide, 7, 6)
    picky = job(min_gpus=2, max_gpus=8, sizes=(2, 4, 8))
    assert tuple(sizes_within(picky, 3, 8)) == (4, 8) and tuple(sizes_within(picky, 1, 2)) == (2,)
    assert not sizes_within(picky, 5, 7) and tuple(sizes_within(job(), 4, 4)) == (4,)


def test_the_calibration_prints_the_fit_and_each_workloads_measured_and_modelled_pause(
        capsys: pytest.CaptureFixture[str]) -> None:
    from scheduler.core.calibrate import resize as calibrate_resize

    assert calibrate_resize.main([]) == 0
    out = capsys.readouterr().out
    fit = pause_fit()
    assert f"pause = {fit.restart_s:.2f} s + {fit.checkpoint_s_per_gb:.3f} s per GB" in out
    for name, n, median, shortest, model in calibrate_resize.report():
        assert shortest <= median and n >= 1
        assert f"{name:12} {n:7d} {median:9.2f} {shortest:10.2f} {model:8.2f}" in out

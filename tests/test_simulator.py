"""The simulator: hand-computed schedules, preemption, rejection, contention effects, determinism, broken policies."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import pytest
from conftest import job, small_cluster

from policies import make_policy
from scheduler.core.decisions import Place, Wait
from scheduler.core.model import Job, JobKind, JobPhase, Placement
from scheduler.core.simulator import SimulationError, Simulator
from scheduler.core.state import ClusterView, PlacementError
from scheduler.core.workloads import catalog


def jct_by_name(result) -> dict[str, float]:
    return {j.spec.name: j.end_s - j.spec.submit_s for j in result.jobs if j.state is JobPhase.DONE}


def test_fifo_matches_hand_computed_schedule(tiny_cluster) -> None:
    # 4 GPUs. a holds 2 GPUs for 100 s; b needs all 4 and waits until a ends (100..110); c (1 GPU) arrived after b:
    # strict FIFO keeps it behind b until b ends at 110, so c runs 110..115.
    trace = [job("a", 0, 2, 100), job("b", 1, 4, 10), job("c", 2, 1, 5)]
    result = Simulator(tiny_cluster, trace, make_policy("fifo"), contention=False).run()
    assert jct_by_name(result) == {"a": 100.0, "b": 109.0, "c": 113.0}
    m = result.metrics
    assert m["jobs_completed"] == 3 and m["jobs_rejected"] == 0
    assert m["avg_jct_s"] == pytest.approx((100 + 109 + 113) / 3)
    assert m["avg_queue_s"] == pytest.approx((0 + 99 + 108) / 3)
    assert m["makespan_s"] == pytest.approx(115.0)
    # GPU-seconds used: 2*100 + 4*10 + 1*5 = 245 over 4 GPUs x 115 s.
    assert m["gpu_util"] == pytest.approx(245 / (4 * 115))
    assert m["avg_contention_slowdown"] == pytest.approx(1.0)


def test_backfill_lets_small_jobs_pass_a_blocked_head(tiny_cluster) -> None:
    trace = [job("a", 0, 2, 100), job("b", 1, 4, 10), job("c", 2, 1, 5)]
    result = Simulator(tiny_cluster, trace, make_policy("fifo-backfill"), contention=False).run()
    assert jct_by_name(result) == {"a": 100.0, "b": 109.0, "c": 5.0}


def test_fifo_spreads_over_nodes_when_no_single_node_fits() -> None:
    cluster = small_cluster(nodes=2, gpus=4)
    trace = [job("a", 0, 2, 100), job("b", 0, 2, 100), job("c", 1, 4, 10)]
    result = Simulator(cluster, trace, make_policy("fifo"), contention=False).run()
    c = next(j for j in result.jobs if j.spec.name == "c")
    # a and b are packed on node 0 and node 0 is full, so c gets node 1 whole at t=1.
    assert c.first_start_s == 1.0
    trace = [job("a", 0, 3, 100), job("b", 0, 3, 100), job("c", 1, 2, 10)]
    result = Simulator(cluster, trace, make_policy("fifo"), contention=False).run()
    c = next(j for j in result.jobs if j.spec.name == "c")
    assert c.first_start_s == 1.0  # one free GPU on each node: enough GPUs anywhere, so FIFO spreads


def test_job_larger_than_cluster_is_rejected_with_reason(tiny_cluster) -> None:
    trace = [job("big", 0, 8, 100), job("ok", 1, 1, 10)]
    result = Simulator(tiny_cluster, trace, make_policy("fifo"), contention=False).run()
    big = next(j for j in result.jobs if j.spec.name == "big")
    assert big.state is JobPhase.REJECTED and "needs 8 GPUs, the cluster has 4" in big.reject_reason
    assert result.metrics["jobs_rejected"] == 1 and result.metrics["jobs_completed"] == 1


def test_tiresias_preempts_a_long_job_for_a_new_one_and_resumes_it(tiny_cluster) -> None:
    # long: 4 GPUs from t=0; after 900 s it has 3600 GPU-s and drops to queue 1. short arrives at 2000 s (queue 0).
    trace = [job("long", 0, 4, 10_000), job("short", 2000, 4, 100)]
    sim = Simulator(tiny_cluster, trace, make_policy("tiresias"), contention=False, preempt_overhead_s=30.0)
    result = sim.run()
    long, short = result.jobs
    assert long.preemptions == 1 and short.preemptions == 0
    assert jct_by_name(result)["short"] == pytest.approx(100.0)
    # long ran 2000 s, waited 100 s, then ran its remaining 8000 s plus the 30 s restart cost.
    assert long.end_s == pytest.approx(10_000 + 100 + 30)


def test_fifo_never_preempts(tiny_cluster) -> None:
    trace = [job("long", 0, 4, 10_000), job("short", 2000, 4, 100)]
    result = Simulator(tiny_cluster, trace, make_policy("fifo"), contention=False).run()
    assert [j.preemptions for j in result.jobs] == [0, 0]
    assert jct_by_name(result)["short"] == pytest.approx(8100.0)


def test_network_contention_slows_jobs_sharing_links() -> None:
    # Two communication-heavy 6-GPU jobs on three 4-GPU nodes: a takes node 0 and half of node 1, b node 2 and the
    # other half of node 1, so both cross node 1's NIC. Alone, each would still span two nodes (its reference).
    cluster = small_cluster(nodes=3, gpus=4)
    trace = [job("a", 0, 6, 3600, model="Transformer-XL"), job("b", 0, 6, 3600, model="Transformer-XL")]
    off = Simulator(cluster, trace, make_policy("fifo"), contention=False).run()
    on = Simulator(cluster, trace, make_policy("fifo"), contention=True).run()
    assert off.metrics["avg_jct_s"] == pytest.approx(3600.0)
    assert on.metrics["avg_jct_s"] > 3600.0 * 1.01
    assert on.metrics["avg_contention_slowdown"] > 1.01
    a, b = on.jobs
    assert {a.spec.name for a in on.jobs} == {"a", "b"} and a.end_s == pytest.approx(b.end_s)


def test_mps_co_location_slows_tenants_and_inference_misses_its_slo(tiny_cluster) -> None:
    heavy = dataclasses.replace(catalog()["ResNet-50-bs64"], name="heavy", sm=1.0, membw=1.0, mem_gb=4)
    serve = dataclasses.replace(catalog()["ResNet-50-bs64"], name="serve", kind=JobKind.INFERENCE, sm=0.5,
                                membw=0.9, mem_gb=2, latency_ms=10.0, slo_ms=12.0)
    profiles = {"heavy": heavy, "serve": serve}
    one_gpu = small_cluster(nodes=1, gpus=1)
    trace = [job("h", 0, 0.5, 1000, model="heavy"), job("s", 0, 0.5, 500, model="serve", kind=JobKind.INFERENCE)]
    result = Simulator(one_gpu, trace, make_policy("gandiva"), profiles=profiles).run()
    h, s = result.jobs
    assert h.placement is None and h.end_s > 1000.0  # slowed while sharing the GPU
    assert s.end_s == pytest.approx(500.0)  # a service stays up for its wall time
    assert s.slo_violation_s == pytest.approx(500.0)  # 10 ms x slowdown > 12 ms the whole time
    assert result.metrics["slo_violation_frac"] > 0.5


def test_simulation_is_deterministic_for_a_seed() -> None:
    from scheduler.core.traces import synthetic

    cluster = small_cluster(nodes=4, gpus=8)
    trace = synthetic(300, seed=3, mean_interarrival_s=200).jobs
    a = Simulator(cluster, trace, make_policy("random", seed=5)).run().metrics
    b = Simulator(cluster, trace, make_policy("random", seed=5)).run().metrics
    c = Simulator(cluster, trace, make_policy("random", seed=6)).run().metrics
    assert a == b
    assert a != c


class _Squatter:
    """Places every job on GPU 0: a broken policy."""

    name = "squatter"
    oracle = False

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float):
        return [Place(j.id, Placement((0,) * j.spec.workers, j.spec.share)) for j in queue]


class _Idler:
    name = "idler"
    oracle = False

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float):
        return [Wait(j.id, "never") for j in queue]


def test_invalid_decisions_are_refused(tiny_cluster) -> None:
    with pytest.raises(PlacementError, match="GPU 0 has 0.000 free"):
        Simulator(tiny_cluster, [job("a", 0, 1, 10), job("b", 0, 1, 10)], _Squatter(), contention=False).run()
    with pytest.raises(PlacementError, match="a GPU appears twice"):
        Simulator(tiny_cluster, [job("a", 0, 2, 10)], _Squatter(), contention=False).run()


def test_a_policy_that_never_places_is_reported(tiny_cluster) -> None:
    with pytest.raises(SimulationError, match="left 1 job.*never"):
        Simulator(tiny_cluster, [job("a", 0, 1, 10)], _Idler(), contention=False).run()

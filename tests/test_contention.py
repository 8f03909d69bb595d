"""Contention model: hand-computed unit cases on tiny inline clusters, incremental consistency, and validation against
the published measurements in ../shared/calibration (skipped with a message when that directory is absent)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from scheduler.core.collectives import collective_traffic
from scheduler.core.contention import ContentionModel, ContentionParams, _water_fill
from scheduler.core.model import (
    Cluster,
    ClusterSpec,
    JobKind,
    JobSpec,
    NodeGroupSpec,
    NodeTypeSpec,
    Placement,
    build_cluster,
)
from scheduler.core.workloads import ModelProfile, catalog, llm_profiles

CALIBRATION = Path(__file__).resolve().parents[1].parent / "shared" / "calibration"


def cluster(nodes: int = 2, gpus: int = 4, interconnect: str = "nvlink", switches: int = 1, nic_gbps: float = 10.0,
            gpu: str = "V100-16GB", nodes_per_rack: int = 16, oversubscription: float = 1.0) -> Cluster:
    node = NodeTypeSpec(gpu=gpu, gpus_per_node=gpus, interconnect=interconnect,  # type: ignore[arg-type]
                        pcie_switches=switches, pcie_switch_gbs=12.0, socket_gbs=9.0, nvlink_gbs=300.0,
                        nic_gbps=nic_gbps)
    return build_cluster(ClusterSpec(name="t", nodes_per_rack=nodes_per_rack, oversubscription=oversubscription,
                                     groups=[NodeGroupSpec(count=nodes, node=node)]))


def profile(name: str, compute_ms: float = 100.0, sm: float = 0.5, membw: float = 0.5, grad_mb: float = 0.0,
            overlap: float = 0.0, mem_gb: float = 1.0) -> ModelProfile:
    return ModelProfile(name=name, kind=JobKind.TRAINING, compute_ms=compute_ms, sm=sm, membw=membw, mem_gb=mem_gb,
                        grad_mb=grad_mb, overlap=overlap)


def spec(model: str, gpus: float, compression: float = 1.0) -> JobSpec:
    return JobSpec(name=model, submit_s=0.0, num_gpus=gpus, duration_s=10.0, model=model, compression=compression)


# ---- max-min water filling ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("demands", "expected"), [
    ([0.3, 0.3], [0.3, 0.3]),  # fits: everyone gets its demand
    ([0.9, 0.9], [0.5, 0.5]),  # equal split
    ([0.2, 0.5, 0.6], [0.2, 0.4, 0.4]),  # the small one is satisfied, the rest split what remains
    ([0.1, 0.95], [0.1, 0.9]),
    ([], []),
])
def test_water_fill_is_max_min_fair(demands: list[float], expected: list[float]) -> None:
    assert _water_fill(demands) == pytest.approx(expected)


# ---- two tenants on one GPU --------------------------------------------------------------------------------------


def test_two_tenants_on_one_gpu_hand_computed() -> None:
    c = cluster(nodes=1, gpus=1)
    profs = {"A": profile("A", sm=0.6, membw=0.2), "B": profile("B", sm=0.6, membw=0.5)}
    m = ContentionModel(c, profs, ContentionParams(mps_overhead=0.1, mps_interference=1.0, ring_straggler=0.0))
    m.add(1, spec("A", 1), Placement((0,)))
    assert m.slowdown(1) == pytest.approx(1.0)
    assert m.add(2, spec("B", 1), Placement((0,))) == {1, 2}
    # SM: demands 0.6 + 0.6 > 1, max-min gives 0.5 each -> 1.2; bandwidth 0.2 + 0.5 fits -> 1.0.
    # Interference: A 1 + 1.0 * 0.2 * 0.6 = 1.12, B 1 + 1.0 * 0.5 * 0.6 = 1.30. Overhead 1 + 0.1 * 1.
    assert m.slowdown(1) == pytest.approx(1.2 * 1.12 * 1.1)
    assert m.slowdown(2) == pytest.approx(1.2 * 1.30 * 1.1)
    assert m.tenants(0) == [1, 2]
    assert m.remove(2) == {1}
    assert m.slowdown(1) == pytest.approx(1.0)


def test_mps_thread_percentage_caps_a_tenants_pressure() -> None:
    c = cluster(nodes=1, gpus=1)
    profs = {"A": profile("A", sm=0.6, membw=0.2), "B": profile("B", sm=0.6, membw=0.5)}
    params = ContentionParams(mps_overhead=0.0, mps_interference=1.0, ring_straggler=0.0)
    m = ContentionModel(c, profs, params)
    m.add(1, spec("A", 0.3), Placement((0,), share=0.3))
    m.add(2, spec("B", 0.6), Placement((0,), share=0.6))
    # A's SM demand is capped at 0.3: 0.3 + 0.6 fits, so no capacity slowdown; interference from capped demands.
    assert m.slowdown(1) == pytest.approx(1 + 0.2 * 0.6)
    assert m.slowdown(2) == pytest.approx(1 + 0.5 * 0.3)


# ---- collective traffic ------------------------------------------------------------------------------------------


def test_traffic_on_nvlink_node() -> None:
    c = cluster(nodes=1, gpus=4, interconnect="nvlink")
    t = collective_traffic(c, [0, 1, 2, 3], 1.0)
    assert set(t) == {int(c.gpu_local_link[g]) for g in range(4)}  # one NVLink port per GPU, nothing else
    assert all(v == pytest.approx(2 * 3 / 4) for v in t.values())  # ring: 2(n-1)/n of the gradient per GPU


def test_traffic_on_pcie_within_and_across_sockets() -> None:
    c = cluster(nodes=1, gpus=4, interconnect="pcie", switches=2)
    sw0, sw1 = int(c.gpu_local_link[0]), int(c.gpu_local_link[2])
    socket = int(c.node_socket[0])
    same = collective_traffic(c, [0, 1], 1.0)
    assert same == pytest.approx({sw0: 1.0})  # 2 GPUs under one switch: 2(2-1)/2 = 1 through that switch only
    cross = collective_traffic(c, [0, 2], 1.0)
    assert cross == pytest.approx({sw0: 1.0, sw1: 1.0, socket: 1.0})  # crossing sockets loads the socket link


def test_traffic_across_nodes_and_racks() -> None:
    c = cluster(nodes=4, gpus=2, interconnect="nvlink", nodes_per_rack=2)
    nic = {int(c.node_nic[n]) for n in range(4)}
    uplinks = {int(u) for u in c.rack_uplink}
    one_rack = collective_traffic(c, [0, 2], 1.0)  # nodes 0 and 1, rack 0
    assert one_rack == pytest.approx({int(c.node_nic[0]): 1.0, int(c.node_nic[1]): 1.0})
    two_racks = collective_traffic(c, [0, 4], 1.0)  # nodes 0 and 2: racks 0 and 1
    assert {k for k in two_racks if k in uplinks} == uplinks
    assert all(two_racks[u] == pytest.approx(1.0) for u in uplinks)
    four = collective_traffic(c, [0, 2, 4, 6], 1.0)
    assert all(four[n] == pytest.approx(2 * 3 / 4) for n in nic)
    # PCIe nodes: NIC traffic also crosses the GPU's PCIe switch (GPUDirect RDMA).
    p = cluster(nodes=2, gpus=2, interconnect="pcie")
    tp = collective_traffic(p, [0, 2], 1.0)
    assert tp[int(p.gpu_local_link[0])] == pytest.approx(1.0)
    assert tp[int(p.node_nic[0])] == pytest.approx(1.0)


def test_compression_reduces_traffic_and_slowdown() -> None:
    c = cluster(nodes=2, gpus=2)
    profs = {"J": profile("J", compute_ms=100, grad_mb=1280, overlap=0.0)}
    full = collective_traffic(c, [0, 2], 1.25)
    quarter = collective_traffic(c, [0, 2], 1.25 * 0.25)
    assert full.keys() == quarter.keys()
    assert all(quarter[k] == pytest.approx(0.25 * full[k]) for k in full)
    m = ContentionModel(c, profs)
    assert m.footprint(spec("J", 2, 0.25), Placement((0, 2))).link_time.max() == pytest.approx(0.25)
    compressed, plain = ContentionModel(c, profs), ContentionModel(c, profs)
    compressed.add(1, spec("J", 2, compression=0.25), Placement((0, 2)))  # spread: its gradient crosses the NICs
    plain.add(1, spec("J", 2), Placement((0, 2)))
    assert 1.0 < compressed.slowdown(1) < plain.slowdown(1)


# ---- network sharing, spread penalty -----------------------------------------------------------------------------


def test_two_jobs_sharing_nics_hand_computed() -> None:
    c = cluster(nodes=2, gpus=2, interconnect="nvlink", nic_gbps=10.0)  # NIC 1.25 GB/s
    profs = {"J": profile("J", compute_ms=100, grad_mb=1280, overlap=0.0)}  # 1.25 GB of gradient
    m = ContentionModel(c, profs, ContentionParams(ring_straggler=0.0))
    ref = 0.1 + 1.25 / 300.0  # packed on one node: 2(2-1)/2 x 1.25 GB on each 300 GB/s NVLink port
    assert m.reference_iteration(spec("J", 2)) == pytest.approx(ref)
    m.add(1, spec("J", 2), Placement((0, 2)))
    alone = 0.1 + 1.0  # 1.25 GB through each 1.25 GB/s NIC, no overlap
    assert m.slowdown(1) == pytest.approx(alone / ref)
    m.add(2, spec("J", 2), Placement((1, 3)))
    duty = 1.0 / alone
    shared = 0.1 + 1.0 * (1 + duty)  # the other job keeps the NICs busy `duty` of the time
    assert m.slowdown(1) == pytest.approx(shared / ref)
    assert m.slowdown(2) == pytest.approx(shared / ref)
    assert m.link_load[int(c.node_nic[0])] == pytest.approx(2 * duty)


def test_ring_straggler_stretches_inter_server_time() -> None:
    c = cluster(nodes=4, gpus=1, nic_gbps=10.0)
    profs = {"J": profile("J", compute_ms=100, grad_mb=1280, overlap=0.0)}
    everywhere = Placement((0, 1, 2, 3))
    fp2 = ContentionModel(c, profs, ContentionParams(ring_straggler=0.1)).footprint(spec("J", 4), everywhere)
    fp0 = ContentionModel(c, profs, ContentionParams(ring_straggler=0.0)).footprint(spec("J", 4), everywhere)
    assert fp0.link_time.max() == pytest.approx(2 * 3 / 4 * 1.0)
    assert fp2.link_time.max() == pytest.approx(fp0.link_time.max() * (1 + 0.1 * 2))  # 4 servers: 2 beyond two


def test_spread_job_slower_than_packed() -> None:
    c = cluster(nodes=2, gpus=4)
    profs = {"J": profile("J", compute_ms=50, grad_mb=200, overlap=0.3)}
    m = ContentionModel(c, profs)
    m.add(1, spec("J", 4), Placement((0, 1, 2, 3)))
    m.add(2, spec("J", 4), Placement((4, 5, 6, 7)))  # packed on node 1
    assert m.slowdown(1) == pytest.approx(1.0)
    assert m.slowdown(2) == pytest.approx(1.0)
    spread = ContentionModel(c, profs)
    spread.add(1, spec("J", 4), Placement((0, 1, 4, 5)))
    # 2 servers: 2(2-1)/2 x 200 MB = 0.195 GB through each 1.25 GB/s NIC = 0.156 s, 0.3 x 50 ms of it hidden;
    # packed, the NVLink transfer (~0.5 ms) hides entirely under compute.
    assert spread.slowdown(1) == pytest.approx((0.05 + 0.15625 - 0.015) / 0.05)


def test_faster_gpu_gets_larger_spread_penalty() -> None:
    profs = {"J": profile("J", compute_ms=100, grad_mb=100, overlap=0.2)}
    penalties = {}
    for gpu in ("V100-16GB", "A100-80GB"):
        c = cluster(nodes=2, gpus=2, gpu=gpu, nic_gbps=25.0)
        m = ContentionModel(c, profs)
        m.add(1, spec("J", 2), Placement((0, 2)))
        penalties[gpu] = m.slowdown(1)  # packed reference is 1.0 on both clusters
    assert penalties["A100-80GB"] > penalties["V100-16GB"] > 1.0


# ---- incremental updates and what-if -----------------------------------------------------------------------------


def _mixed_cluster() -> Cluster:
    nv = NodeTypeSpec(gpu="A100-80GB", gpus_per_node=4, interconnect="nvlink", nic_gbps=100.0)
    pc = NodeTypeSpec(gpu="V100-32GB", gpus_per_node=4, interconnect="pcie", pcie_switches=2, nic_gbps=25.0)
    return build_cluster(ClusterSpec(name="mixed", nodes_per_rack=2, oversubscription=2.0,
                                     groups=[NodeGroupSpec(count=3, node=nv), NodeGroupSpec(count=3, node=pc)]))


def _random_jobs(c: Cluster, rng: random.Random, n: int) -> list[tuple[JobSpec, Placement]]:
    names = [p for p, prof in catalog().items() if prof.kind is JobKind.TRAINING]
    out = []
    for _ in range(n):
        model = rng.choice(names)
        if rng.random() < 0.3:
            share = rng.choice([0.25, 0.5])
            out.append((spec(model, share), Placement((rng.randrange(c.num_gpus),), share=share)))
        else:
            k = rng.choice([1, 2, 4, 8])
            out.append((spec(model, k, compression=rng.choice([1.0, 1.0, 0.3])),
                        Placement(tuple(rng.sample(range(c.num_gpus), k)))))
    return out


def test_incremental_matches_rebuild_on_random_sequence() -> None:
    c = _mixed_cluster()
    rng = random.Random(7)
    jobs = _random_jobs(c, rng, 40)
    m = ContentionModel(c)
    live: list[int] = []
    for step in range(120):
        if live and (rng.random() < 0.4 or len(live) == len(jobs)):
            j = live.pop(rng.randrange(len(live)))
            affected = m.remove(j)
            assert j not in affected
        else:
            j = rng.choice([k for k in range(len(jobs)) if k not in live])
            live.append(j)
            assert j in m.add(j, *jobs[j])
        # A what-if between changes (a probe joins and leaves GPUs' tenants and links) changes no later figure: the
        # model keeps per-job and per-GPU terms between changes, and the probe must leave none of its own behind.
        probe = jobs[rng.randrange(len(jobs))]
        before = m.slowdowns()
        m.predict(*probe)
        assert m.slowdowns() == before
        fresh = ContentionModel(c)
        for k in live:
            fresh.add(k, *jobs[k])
        got, want = m.slowdowns(), fresh.slowdowns()
        assert got.keys() == want.keys(), step
        for k in want:
            assert got[k] == pytest.approx(want[k], rel=1e-9), (step, k)
        assert np.allclose(m.link_load, fresh.link_load, atol=1e-9)
    for j in live:
        m.remove(j)
    assert not m.slowdowns() and not m.link_load.any()


class Counted(ContentionModel):
    computed = 0

    def _compute(self, job_id: int) -> float:
        self.computed += 1
        return super()._compute(job_id)


class EveryJobAgain(Counted):
    """The model as it was before it passed over jobs: every job sharing a link or a GPU with a change recomputed."""

    def _moved(self, affected: set[int], job_id: int, raised: dict[int, list[int]],
               loads: dict[int, float]) -> list[int]:
        return [j for j in affected if j != job_id]

    def _stale(self, affected: set[int], lowered: set[int]) -> list[int]:
        return list(affected)


def _racks_cluster() -> Cluster:
    node = NodeTypeSpec(gpu="A100-80GB", gpus_per_node=8, interconnect="nvlink", nic_gbps=200.0)
    return build_cluster(ClusterSpec(name="racks", nodes_per_rack=4, oversubscription=3.0,
                                     groups=[NodeGroupSpec(count=16, node=node)]))


@pytest.mark.parametrize("make", [_mixed_cluster, _racks_cluster])
def test_passing_over_unchanged_jobs_is_exact(make: Callable[[], Cluster]) -> None:
    # The jobs a start or an end leaves as they were are passed over without recomputing them: every slowdown must
    # still be, bit for bit, what recomputing every touched job gives (the same operations on the same loads), and
    # each change must report exactly the jobs whose slowdown moved.
    c = make()
    rng = random.Random(11)
    jobs = _random_jobs(c, rng, 60)
    m, full = Counted(c), EveryJobAgain(c)
    live: list[int] = []
    for step in range(300):
        before = full.slowdowns()
        if live and (rng.random() < 0.45 or len(live) == len(jobs)):
            j = live.pop(rng.randrange(len(live)))
            got = m.remove(j)
            assert got == full.remove(j)
        else:
            j = rng.choice([k for k in range(len(jobs)) if k not in live])
            live.append(j)
            got = m.add(j, *jobs[j])
            assert got == full.add(j, *jobs[j])
        after = full.slowdowns()
        assert got == {k for k in after if k not in before or after[k] != before[k]}, step
        probe, counts = jobs[rng.randrange(len(jobs))], (m.computed, full.computed)
        assert m.predict(*probe) == full.predict(*probe)  # and it leaves what the model keeps as it was
        m.computed, full.computed = counts  # (the counts are of the changes' recomputations)
        assert m.slowdowns() == after, step
        assert np.array_equal(m.link_load, full.link_load)
    if make is _racks_cluster:  # jobs across racks, each with its own bottleneck: about half are passed over
        assert m.computed < 0.7 * full.computed


def test_predict_leaves_state_unchanged_bit_for_bit() -> None:
    c = _mixed_cluster()
    rng = random.Random(3)
    jobs = _random_jobs(c, rng, 25)
    m = ContentionModel(c)
    for k, (s, p) in enumerate(jobs[:15]):
        m.add(k, s, p)
    before, load = m.slowdowns(), np.array(m.link_load)
    tenants = {g: m.tenants(g) for g in range(c.num_gpus)}
    for s, p in jobs[15:]:
        pred = m.predict(s, p)
        assert set(pred.others_after) == set(pred.others_before)
        assert pred.others_added >= -1e-12
        assert m.slowdowns() == before  # exact equality, not approx
        assert np.array_equal(m.link_load, load)
        assert {g: m.tenants(g) for g in range(c.num_gpus)} == tenants
    # and a prediction equals what adding would do
    s, p = jobs[20]
    pred = m.predict(s, p)
    m.add(99, s, p)
    assert m.slowdown(99) == pytest.approx(pred.slowdown)
    for k, v in pred.others_after.items():
        assert m.slowdown(k) == pytest.approx(v)


def test_predictions_on_a_shared_gpu_each_see_their_own_tenant() -> None:
    # Each what-if's probe takes the same id: one probe's terms on a GPU must never serve the next one's.
    c = cluster(nodes=1, gpus=1)
    profs = {"A": profile("A", sm=0.6, membw=0.5), "B": profile("B", sm=0.9, membw=0.9),
             "C": profile("C", sm=0.2, membw=0.1)}
    m = ContentionModel(c, profs)
    m.add(1, spec("A", 0.5), Placement((0,), share=0.5))
    seen = set()
    for name in ("B", "C", "B"):
        pred = m.predict(spec(name, 0.5), Placement((0,), share=0.5))
        fresh = ContentionModel(c, profs)
        fresh.add(1, spec("A", 0.5), Placement((0,), share=0.5))
        fresh.add(2, spec(name, 0.5), Placement((0,), share=0.5))
        assert pred.slowdown == fresh.slowdown(2) and pred.others_after[1] == fresh.slowdown(1)
        seen.add(pred.slowdown)
    assert len(seen) == 2  # B and C differ: the check above could tell them apart
    alone = ContentionModel(c, profs)
    alone.add(1, spec("A", 0.5), Placement((0,), share=0.5))
    assert m.slowdown(1) == alone.slowdown(1)  # and the tenant that stays is as it was


def test_expected_footprints_are_kept_read_only_and_keyed_by_all_they_depend_on() -> None:
    c = _mixed_cluster()
    m = ContentionModel(c)
    where = Placement((0, 1, 4, 5))  # two servers: traffic on NICs and the rack's links
    first = m.footprint(spec("ResNet-50-bs32", 4), where)
    assert m.footprint(spec("ResNet-50-bs32", 4), where) is first  # the same expected footprint, traced once
    with pytest.raises(ValueError):  # shared, so nobody may write into it
        first.duty[0] = 0.0
    fresh = ContentionModel(c).footprint(spec("ResNet-50-bs32", 4), where)
    assert np.array_equal(first.links, fresh.links) and np.array_equal(first.duty, fresh.duty)
    # Another compression, model or set of GPUs is another footprint.
    compressed = m.footprint(spec("ResNet-50-bs32", 4, compression=0.3), where)
    assert compressed.link_time.sum() < first.link_time.sum()
    assert m.footprint(spec("Transformer-XL", 4), where).link_time.sum() != first.link_time.sum()
    assert m.footprint(spec("ResNet-50-bs32", 4), Placement((0, 1, 2, 3))).gpus == (0, 1, 2, 3)
    assert m.footprint(spec("ResNet-50-bs32", 4), where, flow_key=7) is not first  # a hashed world is never kept


def test_contention_disabled_gives_one() -> None:
    c = cluster(nodes=2, gpus=2)
    m = ContentionModel(c, enabled=False)
    assert m.add(1, spec("Transformer-XL", 4), Placement((0, 1, 2, 3))) == {1}
    assert m.add(2, spec("MoE", 2), Placement((0, 2))) == {2}
    assert m.slowdowns() == {1: 1.0, 2: 1.0}
    pred = m.predict(spec("FSDP", 2), Placement((1, 3)))
    assert pred.slowdown == 1.0 and pred.others_after == {} and pred.others_added == 0.0


# ---- the catalog ---------------------------------------------------------------------------------------------------


REQUIRED = ("MobileNetV3", "GraphSage", "FSDP", "Transformer-XL", "DLRM", "MoE", "ResNet-18-bs64", "ResNet-50-bs64",
            "Transformer-bs64", "LM-bs20", "Recommendation-bs2048", "CycleGAN", "A3C")


def test_catalog_has_required_models() -> None:
    cat = catalog()
    missing = [n for n in REQUIRED if n not in cat]
    assert not missing
    gavel = [n for n in cat if n.startswith(("ResNet-", "Transformer-bs", "LM-", "Recommendation-"))
             or n in ("A3C", "CycleGAN")]
    assert len([n for n in gavel if not n.endswith("-serve")]) >= 12
    inference = [p for p in cat.values() if p.kind is JobKind.INFERENCE]
    assert len(inference) >= 2
    assert all(p.latency_ms > 0 and p.slo_ms > p.latency_ms for p in inference)


def test_every_profile_is_sane() -> None:
    for p in catalog().values():
        assert p.compute_ms > 0, p
        assert 0 < p.sm <= 1 and 0 < p.membw <= 1, p
        assert 0 < p.mem_gb <= 80, p
        assert p.grad_mb >= 0 and 0 <= p.overlap <= 1, p
        assert p.source, p
        if p.kind is JobKind.TRAINING:
            assert p.latency_ms == 0 and p.slo_ms == 0, p


def test_default_params_are_sane() -> None:
    p = ContentionParams()
    assert p.mps_overhead >= 0 and p.mps_interference >= 0 and 0 <= p.ring_straggler < 1


# ---- validation against the published measurements -----------------------------------------------------------------


@pytest.fixture(scope="module")
def shared() -> Path:
    if not (CALIBRATION / "deepshare_shared_thp_ratio.csv").is_file():
        pytest.skip(f"{CALIBRATION} is absent: the validation tests need the raw DeepShare and Gavel measurements "
                    "checked out beside the repository (../shared/calibration)")
    return CALIBRATION


# Bounds. The catalog and ContentionParams defaults are what is validated (what the simulator runs with).
# * DeepShare pairs: MAE <= 0.10. The noise floor is high: replacing every cell by the mean of its 6 x 6 model block
#   (36 free numbers) already leaves 0.074, and same-model pairs on the same placements differ by up to 0.3.
# * DeepShare spread: MAE <= 0.20. 9 of the 18 points (MobileNetV3, GraphSage, FSDP) run as fast or *faster* spread
#   over more servers (up to 1.19x), which no bandwidth-sharing model produces (spreading never removes traffic): the
#   other 9 are the ones a scheduler must avoid, and the ranking (Spearman) is what we hold to.
# * Gavel pairs: MAE <= 0.10; the memory rule must reproduce >= 95% of fit / did-not-fit outcomes.
# * Gavel spread: MAE <= 0.10.
# Spearman >= 0.6 everywhere (>= 0.8 where the data are less noisy).


def test_deepshare_pairs(shared: Path) -> None:
    from scheduler.core.calibrate import validate_deepshare_pairs

    v = validate_deepshare_pairs(shared)
    assert v.points == 36 * 36
    assert v.mae <= 0.10
    assert v.spearman >= 0.6


def test_deepshare_spread(shared: Path) -> None:
    from scheduler.core.calibrate import validate_deepshare_spread

    v = validate_deepshare_spread(shared)
    assert v.points == 18
    assert v.mae <= 0.20
    assert v.spearman >= 0.6
    assert np.all(v.predicted <= 1.0 + 1e-9)  # spreading never helps in the model


def test_gavel_pairs_and_memory_rule(shared: Path) -> None:
    from scheduler.core.calibrate import validate_gavel_pairs

    v = validate_gavel_pairs(shared)
    assert v.points >= 600
    assert v.mae <= 0.10
    assert v.spearman >= 0.8
    assert v.extra["nofit_points"] >= 30
    assert v.extra["memory_accuracy"] >= 0.95
    assert v.extra["nofit_recall"] >= 0.9


def test_gavel_spread(shared: Path) -> None:
    from scheduler.core.calibrate import validate_gavel_spread

    v = validate_gavel_spread(shared)
    assert v.points >= 50
    assert v.mae <= 0.10
    assert v.spearman >= 0.85


@pytest.mark.slow  # the fit on its held-out half of the measurements: seconds
def test_holdout(shared: Path) -> None:
    """Refit on part of each dataset, score the rest: the model must generalise, not memorise."""
    from scheduler.core.calibrate import holdout

    got = {v.name: v for v in holdout(shared)}
    bounds = {  # (MAE, Spearman)
        "DeepShare pairs, held-out half": (0.11, 0.6),
        "DeepShare spread, from 2-server runs + pairs": (0.22, 0.6),
        "Gavel co-location pairs, held-out half": (0.13, 0.7),
        "Gavel spread, held-out batch sizes": (0.10, 0.85),
    }
    assert got.keys() == bounds.keys()
    for name, (mae, rho) in bounds.items():
        assert got[name].mae <= mae, (name, got[name].mae)
        assert got[name].spearman >= rho, (name, got[name].spearman)


def test_fast_replica_matches_contention_model(shared: Path) -> None:
    """The fit's vectorised replica computes exactly what ContentionModel computes on the same placements."""
    from scheduler.core import calibrate as cal
    from scheduler.core.calibrate.fit import _NetworkCases, _pair_arrays, _two_tenant_ratio

    ds, gv = cal.load_deepshare(shared), cal.load_gavel(shared)
    cases = _NetworkCases(ds, gv, list(cal.DEEPSHARE_MODELS) + list(cal.GAVEL_FAMILIES))
    prof, params = catalog(), ContentionParams()
    rep = {f: next(n for n in prof if n.startswith(f + "-bs")) for f in cal.GAVEL_FAMILIES}
    models = [rep.get(m, m) for m in cases.models]
    compute = np.array([prof[m].compute_ms / 1000 for m in models])
    grad = np.array([prof[m].grad_mb / 1024 for m in models])
    overlap = np.array([prof[m].overlap for m in models])
    fast = cases.pair_ratios(compute, grad, overlap, params.ring_straggler)
    real, _measured = cal.deepshare_pair_predictions(shared)
    assert np.max(np.abs(fast - real)) < 1e-9
    _types, i, j, _y, _fits = _pair_arrays(gv)
    names = gv.types
    sm = np.array([prof[n].sm for n in names])
    bw = np.array([prof[n].membw for n in names])
    fast_pairs = _two_tenant_ratio(sm, bw, i, j, params.mps_interference, params.mps_overhead)
    real_pairs, *_ = cal.gavel_pair_predictions(shared)
    assert np.max(np.abs(fast_pairs - real_pairs)) < 1e-9


@pytest.mark.slow  # refits the model on the published measurements: seconds
def test_defaults_and_catalog_are_the_fit(shared: Path) -> None:
    """ContentionParams defaults and the committed catalog are what `python -m scheduler.core.calibrate` fits today.

    Precision. least_squares stops when the cost moves by less than ftol=1e-8 (relative), so the *predictions* of a
    fit are pinned down tightly, but parameters the data barely identify are not: the overlap of communication-bound
    models, the gradient size of GraphSage (0.55 MB, hidden under compute) and ring_straggler sit in flat valleys of
    the cost and land a few percent apart with another numpy/scipy/BLAS build (ring_straggler 0.0322 vs 0.0324,
    GraphSage grad_mb 0.553 vs 0.542 with numpy 2.4 / scipy 1.17; the lock file pins the build the tests run on).
    So the test asks what the fit determines: every calibration case predicted within 0.01 of the refit's prediction
    (the model's own error against the measurements is about 0.1), the parameters the data identify within 2%, and
    the flat-valley ones within 15%.
    """
    from scheduler.core import calibrate as cb

    cal = cb.calibrate(shared)
    cat = {name: p for name, p in catalog().items() if name not in llm_profiles()}  # measured on an H100, not fitted
    assert list(cal.profiles) == list(cat)
    for refit_pred, shipped_pred in (
        (cb.deepshare_pair_predictions(shared, cal.profiles, cal.params)[0], cb.deepshare_pair_predictions(shared)[0]),
        (cb.deepshare_spread_predictions(shared, cal.profiles, cal.params)[1],
         cb.deepshare_spread_predictions(shared)[1]),
        (cb.gavel_pair_predictions(shared, cal.profiles, cal.params)[0], cb.gavel_pair_predictions(shared)[0]),
        (cb.gavel_spread_predictions(shared, cal.profiles, cal.params)[1], cb.gavel_spread_predictions(shared)[1]),
    ):
        assert len(refit_pred) == len(shipped_pred) > 0
        assert float(np.max(np.abs(np.asarray(refit_pred) - np.asarray(shipped_pred)))) < 0.01

    shipped_params = ContentionParams()
    for f, rel in (("mps_overhead", 2e-2), ("mps_interference", 2e-2), ("ring_straggler", 0.15)):
        a, b = getattr(cal.params, f), getattr(shipped_params, f)
        assert math.isclose(a, b, rel_tol=rel, abs_tol=1e-4), (f, a, b)
    for name, fitted in cal.profiles.items():
        shipped = cat[name]
        for f, rel, tiny in (("compute_ms", 2e-2, 0.0), ("sm", 2e-2, 2e-3), ("membw", 2e-2, 2e-3),
                             ("mem_gb", 2e-2, 0.0), ("latency_ms", 2e-2, 0.0), ("slo_ms", 2e-2, 0.0),
                             ("grad_mb", 0.15, 0.0), ("overlap", 0.15, 0.01)):
            a, b = getattr(fitted, f), getattr(shipped, f)
            assert math.isclose(a, b, rel_tol=rel, abs_tol=tiny), (name, f, a, b)


def test_a_prediction_asked_again_before_a_change_is_the_one_a_fresh_asking_gives() -> None:
    """Predictions asked again with no job added or removed since are reused (`predict_later`); beside a model that
    computes every one afresh, through adds, removes and repeated, interleaved predictions, every prediction is the
    same bit for bit (values and the order of the jobs touched), and so are the slowdowns and the link sets' order
    after (which order later sums)."""
    c = _mixed_cluster()
    rng = random.Random(11)
    jobs = _random_jobs(c, rng, 30)
    kept, fresh = ContentionModel(c), ContentionModel(c)
    live: list[int] = []
    reused = 0
    for step in range(80):
        if live and (rng.random() < 0.35 or len(live) == len(jobs)):
            j = live.pop(rng.randrange(len(live)))
            kept.remove(j), fresh.remove(j)
        else:
            j = rng.choice([k for k in range(len(jobs)) if k not in live])
            live.append(j)
            kept.add(j, *jobs[j]), fresh.add(j, *jobs[j])
        asked = [jobs[rng.randrange(len(jobs))] for _ in range(4)]
        first = {}
        for s, p in asked + asked[::-1] + asked:
            got = kept.predict(s, p)
            fresh._predicted.clear()  # (the afresh model forgets each one)
            want = fresh.predict(s, p)
            assert list(got.others_before.items()) == list(want.others_before.items()), step
            assert list(got.others_after.items()) == list(want.others_after.items()), step
            assert (got.slowdown, got.fabric_load, got.others_added) == (want.slowdown, want.fabric_load,
                                                                        want.others_added)
            key = (s.model, s.compression, s.workers, p.gpus, p.share)
            reused += key in first and first[key] is got  # the very object: served from what was kept
            first.setdefault(key, got)
        assert kept.slowdowns() == fresh.slowdowns()
        assert {k: list(v) for k, v in kept._link_jobs.items()} == {k: list(v) for k, v in fresh._link_jobs.items()}
    assert reused > 100  # repeats were served from what was kept, and matched the fresh ones


@pytest.mark.parametrize("make", [_mixed_cluster, _racks_cluster])
def test_predictions_asked_change_nothing_after(make: Callable[[], Cluster]) -> None:
    # Two models go through the same starts and ends; one is asked many predictions between them, the other only
    # the ones both are asked. Everything after must be the same bit for bit: what each change reports, in the
    # order it is read, every slowdown, and the predictions both are asked (the jobs they touch in the same order,
    # so `others_added` is the same sum). A prediction grows and leaves dummies in the per-link sets of jobs; an
    # order read from those sets' layout would differ (the `rl:` frame once had to replay every prediction's set
    # operations, as `probe`, to keep what came after the same).
    c = make()
    rng = random.Random(5)
    jobs = _random_jobs(c, rng, 60)
    asked, quiet = ContentionModel(c), ContentionModel(c)
    live: list[int] = []
    for step in range(300):
        if live and (rng.random() < 0.45 or len(live) == len(jobs)):
            j = live.pop(rng.randrange(len(live)))
            got, want = asked.remove(j), quiet.remove(j)
        else:
            j = rng.choice([k for k in range(len(jobs)) if k not in live])
            live.append(j)
            got, want = asked.add(j, *jobs[j]), quiet.add(j, *jobs[j])
        assert sorted(got) == sorted(want) and asked.slowdowns() == quiet.slowdowns(), step
        for _ in range(rng.randrange(6)):
            asked.predict(*jobs[rng.randrange(len(jobs))])
        both = jobs[rng.randrange(len(jobs))]
        a, q = asked.predict(*both), quiet.predict(*both)
        assert list(a.others_before) == list(q.others_before) == sorted(q.others_before), step
        assert list(a.others_after) == list(q.others_after) and a.others_added == q.others_added, step

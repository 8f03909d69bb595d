"""Datacentre fabrics (scheduler.core.fabric): tiers, oversubscribed uplinks, ECMP collisions and rails, on small
inline clusters whose figures can be worked out by hand."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import numpy as np
import pytest

from scheduler.core.collectives import collective_flows
from scheduler.core.contention import ContentionModel, ContentionParams
from scheduler.core.fabric import FABRICS, FabricSpec, collision_factor, flow_links
from scheduler.core.model import (
    Cluster,
    ClusterSpec,
    JobKind,
    JobSpec,
    LinkKind,
    NodeGroupSpec,
    NodeTypeSpec,
    Placement,
    SpecError,
    build_cluster,
    parse_cluster,
)
from scheduler.core.workloads import ModelProfile

NO_STRAGGLER = ContentionParams(ring_straggler=0.0)
# Communication only, none of it hidden: a job's slowdown is its bottleneck link's stretch.
PROFILES = {"net": ModelProfile(name="net", kind=JobKind.TRAINING, compute_ms=1e-6, sm=0.5, membw=0.5, mem_gb=1.0,
                                grad_mb=1000.0, overlap=0.0)}


def fabric_cluster(nodes: int = 4, gpus: int = 2, nics: int = 1, nodes_per_rack: int = 2, **fabric: object) -> Cluster:
    node = NodeTypeSpec(gpu="V100-32GB", gpus_per_node=gpus, interconnect="nvlink", nic_gbps=100.0, nics=nics)
    return build_cluster(ClusterSpec(name="f", nodes_per_rack=nodes_per_rack, fabric=FabricSpec(**fabric),
                                     groups=[NodeGroupSpec(count=nodes, node=node)]))


def job(gpus: int) -> JobSpec:
    return JobSpec(name="j", submit_s=0.0, num_gpus=gpus, duration_s=10.0, model="net")


def kinds(c: Cluster, links: object) -> list[LinkKind]:
    return sorted(c.link_kind[int(link)] for link in links)  # type: ignore[attr-defined]


# ---- the built fabric --------------------------------------------------------------------------------------------


def test_leaf_uplinks_are_server_ports_over_the_oversubscription() -> None:
    c = fabric_cluster(nodes=8, nics=2, nodes_per_rack=4, oversubscription=2.0)
    assert c.fabric is not None and c.fabric.tiers == ("rack",) and c.num_racks == 2
    for up, down in c.fabric.links[0]:  # 4 servers x 2 NICs = 8 ports per rack; 2:1 gives 4 up and 4 down
        assert len(up) == len(down) == 4
        assert all(c.link_capacity[link] == pytest.approx(100.0 / 8) for link in up)  # one 100 Gb/s port, in GB/s
    assert len(c.rack_uplink) == 0  # no aggregate uplink: the fabric's links replace it


def test_rail_optimised_has_a_leaf_per_rail_per_rack_and_pods_above() -> None:
    c = fabric_cluster(nodes=8, gpus=4, nics=4, nodes_per_rack=2, kind="rail-optimised", racks_per_pod=2,
                       pod_oversubscription=2.0)
    f = c.fabric
    assert f is not None and f.tiers == ("rail", "pod")
    assert len(f.links[0]) == 4 * 4  # 4 racks x 4 rails
    assert all(len(up) == 2 for up, _down in f.links[0])  # a rail leaf takes one NIC of each of 2 servers
    assert len(f.links[1]) == 2  # 2 pods; each takes 2 racks x 4 rails x 2 uplinks = 16 ports, 2:1 -> 8 up
    assert all(len(up) == 8 for up, _down in f.links[1])
    # GPU k's NIC is rail k: GPU 1 of node 0 and GPU 1 of node 1 share a leaf; GPU 1 and GPU 2 do not.
    a, b, other = (int(c.gpu_nic[g]) for g in (1, 4 + 1, 4 + 2))
    assert f.crossed(a, b) == 0 and f.crossed(a, other) == 1
    assert f.crossed(a, int(c.gpu_nic[4 * 4 + 1])) == 2  # node 4: another pod, through the core


def test_cluster_yaml_describes_a_fabric(tmp_path: Path) -> None:
    path = tmp_path / "dc.yaml"
    path.write_text(textwrap.dedent("""\
        nodes_per_rack: 4
        fabric: {kind: fat-tree, oversubscription: 3, port_gbps: 400}
        groups:
          - {count: 8, preset: hgx-h100}
        """))
    c = parse_cluster(str(path))
    assert c.name == "dc" and c.fabric is not None and c.num_racks == 2
    assert c.describe()["fabric"] == {"kind": "fat-tree", "tiers": ["rack"], "oversubscription": ["3:1"],
                                      "uplinks": [22]}  # 32 ports / 3, rounded, per rack


@pytest.mark.parametrize(("yaml_text", "needle"), [
    ("oversubscription: 2\nfabric: {}\ngroups:\n  - {count: 1, preset: dgx-a100}", "fabric.oversubscription"),
    ("fabric: {kind: torus}\ngroups:\n  - {count: 1, preset: dgx-a100}", "fabric.kind"),
    ("fabric: {oversubscription: 0.5}\ngroups:\n  - {count: 1, preset: dgx-a100}", "fabric.oversubscription"),
    ("fabric: {ecmp: maybe}\ngroups:\n  - {count: 1, preset: dgx-a100}", "fabric.ecmp"),
])
def test_bad_fabric_yaml_names_the_field(tmp_path: Path, yaml_text: str, needle: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(SpecError, match=needle.replace(".", r"\.")):
        parse_cluster(str(path))


def test_fabric_presets_size_leaf_groups_by_the_switch_radix() -> None:
    fat = parse_cluster("hgx-h100:128@fat-tree-3:1")
    assert fat.fabric is not None and fat.spec.nodes_per_rack == 6  # 64 ports at 3:1: 48 down, 8 NICs a server
    rail = parse_cluster("hgx-h100:128@rail-optimised")
    assert rail.spec.nodes_per_rack == 32 and rail.num_racks == 4  # NVIDIA's scalable unit: 32 servers
    assert rail.fabric is not None and len(rail.fabric.links[0]) == 4 * 8
    with pytest.raises(SpecError, match="unknown fabric 'torus'.*fat-tree"):
        parse_cluster("hgx-h100:4@torus")
    assert set(FABRICS) >= {"fat-tree", "fat-tree-3:1", "rail-optimised"}


def test_a_cluster_without_a_fabric_keeps_one_uplink_per_rack() -> None:
    c = parse_cluster("dgx-a100:32")
    assert c.fabric is None and len(c.rack_uplink) == c.num_racks == 2
    assert c.link_capacity[c.rack_uplink[0]] == pytest.approx(16 * 200 / 8 / 2)


# ---- ECMP: the expected collision cost -----------------------------------------------------------------------------


@pytest.mark.parametrize(("flows", "links", "expected"), [
    (1, 8, 8.0),  # one flow uses one of 8 links: 8x the time of an even spread
    (5, 1, 1.0),  # one link: nothing to collide on but the spread itself
    (2, 2, 1.5),  # E[max] = 1/2 * 2 + 1/2 * 1
    (3, 3, (6 * 1 + 18 * 2 + 3 * 3) / 27),  # E[max] = 51/27, times 3 links over 3 flows
])
def test_collision_factor_is_the_expected_busiest_link(flows: int, links: int, expected: float) -> None:
    assert collision_factor(flows, links) == pytest.approx(expected)


def test_collision_factor_matches_random_hashing() -> None:
    rng = np.random.default_rng(0)
    picks = rng.integers(0, 16, size=(20_000, 8))
    busiest = np.array([np.bincount(row, minlength=16).max() for row in picks])
    assert collision_factor(8, 16) == pytest.approx(busiest.mean() * 16 / 8, rel=0.02)


def test_hashed_flows_average_to_the_expected_spread() -> None:
    c = fabric_cluster(nodes=4, nodes_per_rack=2, oversubscription=1.0)  # 2 ports per rack: 2 uplinks
    f = c.fabric
    assert f is not None
    flows = [(int(c.gpu_nic[0]), int(c.gpu_nic[2 * 2]))]  # node 0 (rack 0) to node 2 (rack 1)
    expected, stretch = flow_links(f, flows, 1.0, None)
    assert sorted(expected.values()) == pytest.approx([0.5] * 4)  # half on each of 2 ups and 2 downs
    assert set(stretch.values()) == {2.0}  # but one flow is on one link: twice the even spread's time
    total: dict[int, float] = {}
    for key in range(4000):
        hashed, none = flow_links(f, flows, 1.0, key)
        assert none == {} and sorted(hashed.values()) == [1.0, 1.0]  # one uplink, one downlink, the whole flow
        for link, gb in hashed.items():
            total[link] = total.get(link, 0.0) + gb / 4000
    assert total == pytest.approx(expected, abs=0.03)


# ---- contention on the fabric --------------------------------------------------------------------------------------


def cross_rack_jobs(c: Cluster, model: ContentionModel, first: int, second: int) -> tuple[float, float]:
    """Two 2-GPU jobs, each with one GPU in rack 0 and one in rack 1, placed with job ids `first` and `second`."""
    model.add(first, job(2), Placement((0, 4)))  # node 0 (rack 0), node 2 (rack 1)
    model.add(second, job(2), Placement((2, 6)))  # node 1 (rack 0), node 3 (rack 1)
    return model.slowdown(first), model.slowdown(second)


def fabric_links(c: Cluster, gpus: tuple[int, ...], key: int) -> set[int]:
    traffic, _ = collective_flows(c, gpus, 1.0, key)
    return {link for link in traffic if c.link_kind[link] in (LinkKind.UPLINK, LinkKind.DOWNLINK)}


def spread_alone(c: Cluster) -> float:
    """The slowdown of a 2-GPU job spread over racks 0 and 1, alone: its NICs and uplink ports, one server port each,
    against NVLink when packed (the spread penalty every slowdown is measured from)."""
    model = ContentionModel(c, PROFILES, NO_STRAGGLER, hashed_flows=True)
    model.add(1, job(2), Placement((0, 4)))
    return model.slowdown(1)


def test_an_oversubscribed_uplink_is_shared_by_the_jobs_crossing_it() -> None:
    # Two servers per rack, 2:1: one uplink and one downlink per rack, one server port wide.
    c = fabric_cluster(nodes=4, nodes_per_rack=2, oversubscription=2.0)
    model = ContentionModel(c, PROFILES, NO_STRAGGLER, hashed_flows=True)
    alone = spread_alone(c)
    both = cross_rack_jobs(c, model, 1, 2)
    # Each hop's link carries both jobs' flows: each job's transfer takes twice as long, and it is all it does.
    assert both == pytest.approx((2.0 * alone, 2.0 * alone), rel=1e-6)
    model.remove(2)
    assert model.slowdown(1) == pytest.approx(alone)


def test_ecmp_collision_slows_only_the_jobs_that_hash_onto_one_link() -> None:
    # 1:1: two uplinks per rack, so the two jobs need not meet; whether they do depends on their flows' hashes.
    c = fabric_cluster(nodes=4, nodes_per_rack=2, oversubscription=1.0)
    keys = list(itertools.combinations(range(40), 2))
    meet = next((a, b) for a, b in keys if fabric_links(c, (0, 4), a) & fabric_links(c, (2, 6), b))
    apart = next((a, b) for a, b in keys if not fabric_links(c, (0, 4), a) & fabric_links(c, (2, 6), b))
    collided = cross_rack_jobs(c, ContentionModel(c, PROFILES, NO_STRAGGLER, hashed_flows=True), *meet)
    clear = cross_rack_jobs(c, ContentionModel(c, PROFILES, NO_STRAGGLER, hashed_flows=True), *apart)
    alone = spread_alone(c)
    assert clear == pytest.approx((alone, alone))
    assert min(collided) == pytest.approx(2.0 * alone, rel=1e-6)  # a synchronous ring runs at its slowest hop
    # The controller's model and every prediction cannot see hashes: they expect the collisions instead.
    expected = cross_rack_jobs(c, ContentionModel(c, PROFILES, NO_STRAGGLER), 1, 2)
    assert alone < expected[0] < 2.0 * alone


def test_a_prediction_is_the_expected_cost_and_the_simulated_world_is_hashed() -> None:
    c = fabric_cluster(nodes=4, nodes_per_rack=2, oversubscription=1.0)
    world = ContentionModel(c, PROFILES, NO_STRAGGLER, hashed_flows=True)
    fp = world.footprint(job(2), Placement((0, 4)))
    up = [i for i, link in enumerate(fp.links.tolist()) if c.link_kind[link] is LinkKind.UPLINK]
    # Expected: one flow per hop over two links per group: half its bytes on each, at twice the time (the one
    # link it will take, whole), so its own time is right and other jobs see half of it on each.
    assert len(up) == 4 and collision_factor(1, 2) == 2.0
    assert fp.link_time[up] == pytest.approx(2 * fp.duty[up] * (fp.link_time.max() / fp.duty.max()))
    predicted = world.predict(job(2), Placement((0, 4)))
    world.add(7, job(2), Placement((0, 4)))
    assert world.slowdown(7) == pytest.approx(predicted.slowdown)  # alone, the hash does not matter
    assert len([link for link in world.footprint(job(2), Placement((0, 4)), 7).links.tolist()
                if c.link_kind[link] is LinkKind.UPLINK]) == 2  # hashed: one uplink per hop


def test_rails_keep_aligned_rings_on_their_leaf() -> None:
    c = fabric_cluster(nodes=2, gpus=4, nics=4, nodes_per_rack=2, kind="rail-optimised")
    aligned = fabric_links(c, (0, 1, 4, 5), key=3)  # GPUs 0 and 1 of each node: rails 0 and 1 on both
    assert aligned == set()
    crossed = fabric_links(c, (0, 1, 4 + 2, 4 + 3), key=3)  # GPUs 0, 1 of node 0 and 2, 3 of node 1: rails differ
    assert crossed and {c.link_kind[link] for link in crossed} == {LinkKind.UPLINK, LinkKind.DOWNLINK}
    model = ContentionModel(c, PROFILES, NO_STRAGGLER)
    assert model.predict(job(4), Placement((0, 1, 4 + 2, 4 + 3))).slowdown > model.predict(
        job(4), Placement((0, 1, 4, 5))).slowdown


def test_each_ring_channel_leaves_by_its_gpus_nic() -> None:
    c = fabric_cluster(nodes=2, gpus=4, nics=4, nodes_per_rack=2)
    traffic, _ = collective_flows(c, (0, 1, 4, 5), 1.0)
    nics = {link: gb for link, gb in traffic.items() if c.link_kind[link] is LinkKind.NIC}
    # 2 nodes: each sends a full gradient (2 (k - 1) / k = 1 GB), split over its two GPUs' NICs.
    assert sorted(nics.values()) == pytest.approx([0.5] * 4)
    assert set(nics) == {int(c.nic_link[c.gpu_nic[g]]) for g in (0, 1, 4, 5)}


# ---- racks by name ------------------------------------------------------------------------------------------------


def test_groups_may_name_their_racks(tmp_path: Path) -> None:
    path = tmp_path / "named.yaml"
    path.write_text(textwrap.dedent("""\
        nodes_per_rack: 2
        fabric: {oversubscription: 2}
        groups:
          - {count: 1, preset: dgx-a100, rack: r1}
          - {count: 3, preset: dgx-a100}
          - {count: 1, preset: dgx-a100, rack: r1}
        """))
    c = parse_cluster(str(path))
    # r1 holds nodes 0 and 4; the three unnamed nodes fill racks of two in order.
    assert c.node_rack.tolist() == [0, 1, 1, 2, 0]
    # A ring over nodes 0 and 4 stays in rack r1: no fabric link.
    assert fabric_links(c, (0, 4 * 8), key=1) == set()
    assert fabric_links(c, (0, 8), key=1)  # node 1 is in another rack
    bad = tmp_path / "bad.yaml"
    bad.write_text("groups:\n  - {count: 1, preset: dgx-a100, rack: 'a/b'}")
    with pytest.raises(SpecError, match=r"groups\.0\.rack"):
        parse_cluster(str(bad))


def test_a_quota_cluster_keeps_the_fabric_and_splits_nics() -> None:
    from scheduler.core.tenancy.quota import quota_cluster

    part = quota_cluster(parse_cluster("hgx-h100:16@fat-tree-3:1"), 20)
    assert part.fabric is not None and part.num_gpus == 20
    assert len(part.nic_link) == 8 + 8 + 4  # two whole servers and one of 4 GPUs with 4 of its NICs

"""The `topology` heuristic and `Planner.topology_fit`: a gang on as few racks, pods and nodes as it fits, its GPUs on
the same indices of each node (rails), on small inline fabrics."""

from __future__ import annotations

import pytest

from policies import make_policy
from policies.placement import Planner
from scheduler.core.contention import ContentionModel, collective_flows
from scheduler.core.decisions import Place
from scheduler.core.fabric import FabricSpec
from scheduler.core.model import (
    Cluster,
    ClusterSpec,
    Job,
    JobSpec,
    LinkKind,
    NodeGroupSpec,
    NodeTypeSpec,
    Placement,
    build_cluster,
    parse_cluster,
)
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.traces import synthetic
from scheduler.core.workloads import catalog


def fabric(nodes: int, per_rack: int, gpus: int = 4, **spec: object) -> Cluster:
    node = NodeTypeSpec(gpu="A100-80GB", gpus_per_node=gpus, interconnect="nvlink", nic_gbps=200.0, nics=gpus)
    return build_cluster(ClusterSpec(name="t", nodes_per_rack=per_rack, fabric=FabricSpec(**spec),
                                     groups=[NodeGroupSpec(count=nodes, node=node)]))


def gang(n: int) -> JobSpec:
    return JobSpec(name=f"g{n}", submit_s=0.0, num_gpus=n, duration_s=100.0, model="MoE")  # communication-heavy


def planner(cluster: Cluster, busy: tuple[int, ...] = ()) -> Planner:
    state = ClusterState(cluster, catalog())
    model = ContentionModel(cluster)
    for i, g in enumerate(busy):
        spec = JobSpec(name=f"b{i}", submit_s=0.0, num_gpus=1, duration_s=10.0, model="ResNet-50-bs64")
        state.allocate(1000 + i, spec, Placement((g,)))
        model.add(1000 + i, spec, Placement((g,)))
    return Planner(ClusterView(state, model, {}))


def racks_of(cluster: Cluster, p: Placement) -> set[int]:
    return {int(cluster.node_rack[cluster.gpu_node[g]]) for g in p.gpus}


def test_a_gang_goes_to_the_one_rack_that_holds_it() -> None:
    c = fabric(nodes=6, per_rack=2)  # 3 racks of 2 nodes x 4 GPUs
    # Rack 0: 5 free, rack 1: 7 free, rack 2: 8 free. A 6-GPU gang fits racks 1 and 2: the tighter, rack 1.
    p = planner(c, busy=(0, 1, 2, 8)).topology_fit(gang(6))
    assert p is not None and racks_of(c, p) == {1}
    p = planner(c, busy=(0, 1, 2, 8)).topology_fit(gang(8))
    assert p is not None and racks_of(c, p) == {2}


def test_a_gang_no_rack_holds_takes_whole_servers_on_the_fewest_racks_they_allow() -> None:
    c = fabric(nodes=8, per_rack=2)  # 4 racks of 2 servers x 4 GPUs
    # Free: rack 0: 0 + 4, rack 1: 2 + 4, rack 2: 3 + 4, rack 3: 4 + 4. A 14-GPU gang: 3 whole servers (racks 3 and 0,
    # its first in order of most whole servers), the 2 left on the server that fits them tightest (server 2: 2 free).
    busy = (0, 1, 2, 3, 8, 9, 16)
    p = planner(c, busy=busy).topology_fit(gang(14))
    assert p is not None
    per_server = {int(c.gpu_node[g]): 0 for g in p.gpus}
    for g in p.gpus:
        per_server[int(c.gpu_node[g])] += 1
    assert per_server == {1: 4, 2: 2, 6: 4, 7: 4}
    # Too few wholly free servers: the fewest racks, fullest-free servers first (racks 3 and 2).
    p = planner(c, busy=(*busy, 4, 12, 20)).topology_fit(gang(14))
    assert p is not None and racks_of(c, p) == {2, 3}


def test_a_gang_prefers_the_pod_that_holds_it() -> None:
    c = fabric(nodes=8, per_rack=1, racks_per_pod=4)  # 8 racks of one node, 2 pods of 4
    # Pod 0 (racks 0-3): 4 + 4 + 1 + 1 free = 10; pod 1: 3 free a rack = 12. A 9-GPU gang: pod 0, the tighter.
    busy = (8, 9, 10, 12, 13, 14, 16, 20, 24, 28)
    p = planner(c, busy=busy).topology_fit(gang(9))
    assert p is not None and racks_of(c, p) <= {0, 1, 2, 3}
    assert racks_of(c, p) == {0, 1, 2}  # the racks with most free GPUs first


def test_partial_nodes_take_the_same_gpu_indices_for_rail_aligned_rings() -> None:
    c = fabric(nodes=2, per_rack=2, kind="rail-optimised")
    # Node 0: GPU 0 busy (1, 2, 3 free); node 1: GPU 3 busy (0, 1, 2 free). A 4-GPU gang takes 3 + 1; the ring's one
    # channel joins the first GPU of each node, so node 1's GPU must be on node 0's first GPU's rail: GPU 1.
    p = planner(c, busy=(0, 7)).topology_fit(gang(4))
    assert p is not None and p.gpus == (1, 2, 3, 4 + 1)
    lowest_free = (1, 2, 3, 4 + 0)  # what taking each node's lowest free GPUs gives: rails 1 and 0, via the spine
    assert spine_links(c, p.gpus) == set() and spine_links(c, lowest_free)


def spine_links(c: Cluster, gpus: tuple[int, ...]) -> set[int]:
    traffic, _ = collective_flows(c, gpus, 1.0)
    return {link for link in traffic if c.link_kind[link] in (LinkKind.UPLINK, LinkKind.DOWNLINK)}


def test_the_topology_policy_runs_whole_workloads_on_a_fabric() -> None:
    cluster = parse_cluster("hgx-h100:24@fat-tree-3:1")
    jobs = list(synthetic(150, seed=5, mean_interarrival_s=120.0, large_gang_share=0.05).jobs)
    result = Simulator(cluster, jobs, make_policy("topology")).run()
    assert all(j.end_s is not None or j.reject_reason for j in result.jobs)
    gangs = [j for j in result.jobs if j.spec.workers >= 64 and j.end_s is not None]
    assert gangs, "the workload should hold gangs that ran"


@pytest.mark.parametrize("name", ["topology", "contention-greedy"])
def test_policies_place_a_gang_within_one_rack_on_a_fabric(name: str) -> None:
    cluster = parse_cluster("hgx-h100:12@fat-tree-3:1")  # 2 racks of 6 servers (48 GPUs)
    view = planner(cluster, busy=tuple(range(0, 48, 8))).view  # rack 0: 42 free, too few
    decisions = make_policy(name).schedule(view, [Job(1, gang(44), 100.0)], 0.0)
    placed = [d for d in decisions if isinstance(d, Place)]
    assert len(placed) == 1 and racks_of(cluster, placed[0].placement) == {1}


def test_explanations_name_the_tier_a_gang_crosses() -> None:
    cluster = parse_cluster("hgx-h100:12@fat-tree-3:1")  # racks of 6 servers
    view = planner(cluster).view
    one_rack = Placement(tuple(range(48)))
    two_racks = Placement(tuple(range(24)) + tuple(range(48, 72)))
    assert view.fabric_words(gang(48), one_rack) == ""
    words = view.fabric_words(gang(48), two_racks)
    assert words.startswith("spans 2 racks: ") and words.endswith("x from the spine at 3:1")
    assert float(words.split(": ")[1].split("x")[0]) >= 1.0
    assert parse_cluster("hgx-h100:12").fabric is None
    assert planner(parse_cluster("hgx-h100:12")).view.fabric_words(gang(48), two_racks) == ""
    decisions = make_policy("topology").schedule(view, [Job(1, gang(64), 100.0)], 0.0)
    assert isinstance(decisions[0], Place) and decisions[0].reason.startswith("spans 2 racks: ")

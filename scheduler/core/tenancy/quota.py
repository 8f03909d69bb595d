"""The cluster a team's quota is: the isolated run of finish-time fairness replays a team's jobs on it."""

from __future__ import annotations

from scheduler.core.model import (
    Cluster,
    ClusterSpec,
    NodeGroupSpec,
    NodeTypeSpec,
    build_cluster,
    nics_for,
)


def quota_cluster(cluster: Cluster, gpus: int) -> Cluster:
    """A cluster of `gpus` GPUs shaped like the start of `cluster`: its nodes in order, whole while they fit, then
    the first GPUs of the next one as a partial node (of the same type, over as many of its PCIe switches as they
    cover when they split evenly over them, else the nearest even split), in racks of the same size."""
    if not 1 <= gpus <= cluster.num_gpus:
        raise ValueError(f"a quota cluster needs between 1 and {cluster.num_gpus} GPUs, got {gpus}")
    nodes: list[NodeTypeSpec] = []
    left = gpus
    for n in range(cluster.num_nodes):
        if left <= 0:
            break
        nt = cluster.node_types[int(cluster.node_type_index[n])]
        take = min(left, nt.gpus_per_node)
        nodes.append(nt if take == nt.gpus_per_node else _partial_node(nt, take))
        left -= take
    groups: list[NodeGroupSpec] = []
    for nt in nodes:  # runs of one node type, as a cluster file lists them
        if groups and groups[-1].node == nt:
            groups[-1].count += 1
        else:
            groups.append(NodeGroupSpec(count=1, node=nt))
    fabric = cluster.spec.fabric
    network = {"fabric": fabric} if fabric is not None else {"oversubscription": cluster.spec.oversubscription}
    spec = ClusterSpec(name=f"{cluster.name}[:{gpus} GPUs]", nodes_per_rack=cluster.spec.nodes_per_rack,
                       groups=groups, **network)
    return build_cluster(spec)


def _partial_node(nt: NodeTypeSpec, gpus: int) -> NodeTypeSpec:
    switches = 1
    if nt.interconnect == "pcie" and nt.pcie_switches > 1:
        per = nt.gpus_per_node // nt.pcie_switches
        spans = -(-gpus // per)  # the switches the node's first `gpus` GPUs sit under
        switches = min((d for d in range(1, nt.pcie_switches + 1) if gpus % d == 0),
                       key=lambda d: (abs(d - spans), -d))
    return NodeTypeSpec(**(nt.model_dump() | {"gpus_per_node": gpus, "pcie_switches": switches,
                                              "nics": nics_for(nt.nics, gpus)}))

"""The traffic a data-parallel job's gradient all-reduce puts on each link of its placement: a ring inside each
node (over NVLink ports, or through the PCIe switches and the CPU-socket link), a ring across its nodes through their
NICs, and across racks through the rack uplinks or, on a datacentre fabric, as ECMP-hashed flows over its tiers.
`scheduler.core.contention` turns these bytes into link times and shares each link among the jobs crossing it."""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.core.fabric import Fabric, flow_links
from scheduler.core.model import Cluster


def collective_traffic(cluster: Cluster, gpus: Iterable[int], grad_gb: float) -> dict[int, float]:
    """GB per iteration that a data-parallel job on `gpus` moves over each link (hierarchical ring all-reduce); with a
    fabric, its flows spread evenly over each group's ECMP links (the expected load)."""
    return collective_flows(cluster, gpus, grad_gb)[0]


def collective_flows(cluster: Cluster, gpus: Iterable[int], grad_gb: float,
                     flow_key: int | None = None) -> tuple[dict[int, float], dict[int, float]]:
    """The traffic of `collective_traffic`, with the fabric's flows hashed by `flow_key` when given (ECMP), and the
    factor each fabric link's time is stretched by for the expected hash collisions when not
    (`scheduler.core.fabric.flow_links`)."""
    by_node: dict[int, list[int]] = {}
    for g in gpus:
        by_node.setdefault(int(cluster.gpu_node[g]), []).append(int(g))
    traffic: dict[int, float] = {}
    if sum(len(v) for v in by_node.values()) < 2 or grad_gb <= 0:
        return traffic, {}

    def put(link: int, gb: float) -> None:
        traffic[link] = traffic.get(link, 0.0) + gb

    k = len(by_node)
    inter = 2.0 * (k - 1) / k * grad_gb  # per node, across nodes: each node holds a full gradient after step one
    # NCCL runs one ring (channel) per GPU index present on every node; each leaves by its GPU's NIC.
    channels = min(len(gs) for gs in by_node.values())
    for node, gs in by_node.items():
        m = len(gs)
        local_links = {int(cluster.gpu_local_link[g]) for g in gs}
        if m > 1:
            intra = 2.0 * (m - 1) / m * grad_gb
            if cluster.node_nvlink[node]:
                for g in gs:  # each GPU's NVLink port carries its ring traffic (NVSwitch: non-blocking)
                    put(int(cluster.gpu_local_link[g]), intra)
            else:
                for link in local_links:  # the ring passes through every PCIe switch it uses
                    put(link, intra)
                if len(local_links) > 1 and cluster.node_socket[node] >= 0:
                    put(int(cluster.node_socket[node]), intra)
        if k > 1:
            if cluster.one_nic:
                put(int(cluster.node_nic[node]), inter)
                if not cluster.node_nvlink[node]:  # GPUDirect RDMA: NIC traffic also crosses the GPUs' PCIe switch
                    put(min(local_links), inter)
            else:
                for g in sorted(gs)[:channels]:
                    put(int(cluster.nic_link[cluster.gpu_nic[g]]), inter / channels)
                    if not cluster.node_nvlink[node]:
                        put(int(cluster.gpu_local_link[g]), inter / channels)
    if k > 1 and cluster.fabric is not None:
        return _fabric_flows(cluster, cluster.fabric, by_node, inter / channels, channels, traffic, flow_key)
    racks = {int(cluster.node_rack[n]) for n in by_node}
    if len(racks) > 1:
        r = len(racks)
        for rack in racks:
            put(int(cluster.rack_uplink[rack]), 2.0 * (r - 1) / r * grad_gb)
    return traffic, {}


def _fabric_flows(cluster: Cluster, fabric: Fabric, by_node: dict[int, list[int]], channel_gb: float, channels: int,
                  traffic: dict[int, float], flow_key: int | None) -> tuple[dict[int, float], dict[int, float]]:
    """The ring's hops between servers as flows on the fabric: node i sends to node i + 1 (in rack order, so a rack's
    nodes are neighbours and the ring leaves each rack once), channel c from the c-th GPU's NIC to the c-th GPU's NIC
    of the next node (rail-aligned when both are GPU c of their node), each split into `flows_per_nic` flows."""
    nodes = sorted(by_node, key=lambda n: (int(cluster.node_rack[n]), n))
    ranks = {n: sorted(by_node[n])[:channels] for n in nodes}
    split = fabric.spec.flows_per_nic
    flows = []
    for i, node in enumerate(nodes):
        nxt = nodes[(i + 1) % len(nodes)]
        for a, b in zip(ranks[node], ranks[nxt], strict=False):
            flows.extend([(int(cluster.gpu_nic[a]), int(cluster.gpu_nic[b]))] * split)
    fabric_traffic, stretch = flow_links(fabric, flows, channel_gb / split, flow_key)
    for link, gb in fabric_traffic.items():
        traffic[link] = traffic.get(link, 0.0) + gb
    return traffic, stretch

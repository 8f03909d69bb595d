"""The store's record of the cluster's nodes and GPUs, which the API's cluster map reads."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.core.model import Cluster
from scheduler.live.runs import NodeInfo
from scheduler.live.store.models import Gpu, Node


def register_nodes(s: Session, reported: Iterable[NodeInfo], cluster: Cluster, node_names: Sequence[str],
                   preset: str, now: float) -> set[int]:
    """Write the cluster model's nodes and GPUs with what the backend reports of each; returns the indices of the
    nodes that are not alive. Nodes in the store that the model no longer has (a smaller cluster than last time) are
    marked gone. A node's `updated_at` is when its `alive` last changed (or it was first seen): the dashboard's
    "since"."""
    by_name = {n.name: n for n in reported}
    down: set[int] = set()
    existing = {n.name: n for n in s.scalars(select(Node))}
    for i, name in enumerate(node_names):
        info = by_name.get(name)
        node = existing.pop(name, None)
        if node is None:
            node = Node(name=name, index=i, preset=preset, updated_at=now)
            s.add(node)
        node.index, node.preset = i, preset
        alive = bool(info and info.alive)
        if node.alive != alive:
            node.updated_at = now
        node.alive = alive
        node.ray_node_id = info.ray_node_id if info else None
        node.address = info.address if info else None
        if not node.alive:
            down.add(i)
        s.flush()
        have = {g.index for g in node.gpus}
        for g in cluster.node_gpus(i):
            if g not in have:
                s.add(Gpu(node_id=node.id, index=g, local_index=g - int(cluster.node_first_gpu[i]),
                          gpu_type=cluster.gpu_types[int(cluster.gpu_type[g])].name, mem_gb=float(cluster.gpu_mem[g])))
    for stale in existing.values():
        if stale.alive:
            stale.alive, stale.updated_at = False, now
    return down

"""The store's record of the cluster's nodes and GPUs, which the API's cluster map reads, and the GPU health their
agents report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.core.model import Cluster
from scheduler.live.runs import NodeInfo
from scheduler.live.store.models import Gpu, Node


def register_nodes(s: Session, reported: Iterable[NodeInfo], cluster: Cluster, node_names: Sequence[str],
                   presets: Sequence[str], now: float) -> set[int]:
    """Write the cluster model's nodes (each with the preset it is modelled with, `presets[i]`) and GPUs with what
    the backend reports of each; returns the indices of the nodes that are not alive. Nodes in the store that the
    model no longer has (a smaller cluster than last time) are marked gone. A node's `updated_at` is when its `alive`
    last changed (or it was first seen): the dashboard's "since"."""
    if len(presets) != len(node_names):
        raise ValueError(f"{len(presets)} presets for {len(node_names)} nodes")
    by_name = {n.name: n for n in reported}
    down: set[int] = set()
    existing = {n.name: n for n in s.scalars(select(Node))}
    for i, name in enumerate(node_names):
        info = by_name.get(name)
        node = existing.pop(name, None)
        if node is None:
            node = Node(name=name, index=i, preset=presets[i], updated_at=now)
            s.add(node)
        node.index, node.preset = i, presets[i]
        alive = bool(info and info.alive)
        if node.alive != alive:
            node.updated_at = now
        node.alive = alive
        node.ray_node_id = info.ray_node_id if info else None
        node.address = info.address if info else None
        if not node.alive:
            down.add(i)
        s.flush()
        have = {gpu.index: gpu for gpu in node.gpus}
        for g in cluster.node_gpus(i):
            gpu_type, mem_gb = cluster.gpu_types[int(cluster.gpu_type[g])].name, float(cluster.gpu_mem[g])
            row = have.get(g)
            if row is None:
                s.add(Gpu(node_id=node.id, index=g, local_index=g - int(cluster.node_first_gpu[i]), gpu_type=gpu_type,
                          mem_gb=mem_gb))
            elif (row.gpu_type, row.mem_gb) != (gpu_type, mem_gb):  # modelled as another preset than last time
                row.gpu_type, row.mem_gb = gpu_type, mem_gb
    for stale in existing.values():
        if stale.alive:
            stale.alive, stale.updated_at = False, now
    return down


# A report older than this many of its agent's reporting intervals is stale: the agent (or its way to the API) is down,
# and what it last said may no longer be true. Three, so one lost or slow push is not an alarm.
STALE_INTERVALS = 3
GOOD_GPU_STATUSES = ("ok", "virtual")  # a GPU in any other status (degraded, unreachable) makes its node degraded


def node_status(gpus: Iterable[Mapping[str, Any]]) -> str:
    """A node's overall health from its GPUs': `degraded` if any GPU is not ok (virtual GPUs are)."""
    return "ok" if all(g.get("status") in GOOD_GPU_STATUSES for g in gpus) else "degraded"


def health_view(report: Mapping[str, Any] | None, reported_at: float | None, now: float) -> dict[str, Any] | None:
    """A node's last health report as the API shows it, with `stale` and `age_s` as of `now` (None: no report)."""
    if report is None or reported_at is None:
        return None
    age = max(0.0, now - reported_at)
    return {**report, "age_s": round(age, 3), "stale": age > STALE_INTERVALS * float(report["interval_s"])}


def gpu_faults(node: Node, now: float) -> dict[int, str]:
    """The GPUs of `node` (by index on the node) that its agent's last report, while not stale, says are not ok, with
    their status: a stale report is not believed (the agent may be down, not the GPUs)."""
    health = health_view(node.health, node.health_at, now)
    if health is None or health["stale"]:
        return {}
    return {int(g["index"]): str(g.get("status")) for g in health.get("gpus", ())
            if g.get("status") not in GOOD_GPU_STATUSES}


def gpu_usability(nodes: Iterable[Node], now: float) -> dict[int, str | None]:
    """Every GPU of `nodes` by its cluster-wide index: None if a job may be placed on it, else why not ("node3 is
    down", "node3 is drained", "faulted: degraded"). The one rule of which GPUs count, for the start estimates and the
    views: a node that is not alive or is drained (`drained_at` set: read with getattr, so this runs on a store
    without the column) takes all its GPUs out; a GPU its agent reports not ok (`gpu_faults`) is out alone."""
    out: dict[int, str | None] = {}
    for node in nodes:
        whole = (None if node.alive else f"{node.name} is down") or (
            f"{node.name} is drained" if getattr(node, "drained_at", None) is not None else None)
        faults = {} if whole else gpu_faults(node, now)
        for gpu in node.gpus:
            status = faults.get(gpu.local_index)
            out[gpu.index] = whole or (f"faulted: {status}" if status is not None else None)
    return out


def usable_gpus(nodes: Iterable[Node], now: float) -> set[int]:
    """The cluster-wide indices of the GPUs a job may be placed on now (see `gpu_usability`)."""
    return {g for g, why in gpu_usability(nodes, now).items() if why is None}

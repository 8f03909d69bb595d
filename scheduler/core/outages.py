"""Which GPUs may take new jobs, and which runs must leave theirs: the one rule for down nodes, drained nodes and
faulted GPUs, shared by the live controller (which learns of them from Ray, the admins and the node agents) and the
simulator (which replays them as `Outage`s), so what-if and the RL environment see a drain as the controller does.

Three conditions close a GPU to new placements:
- its node is **down** (Ray lost it): its runs are lost, and a lost run spends one of the job's restarts;
- its node is **drained** by an admin (`corral node drain`): like Slurm's DRAIN, nothing new starts there and the
  runs on it finish; with `evict` (`--now`) they are also checkpointed and requeued at once, spending no restart;
- the GPU is **faulted** (its node agent reports an XID error, uncorrected ECC errors, an unreachable device or an
  over-temperature reading): nothing new starts on it, and its runs are checkpointed and requeued when the operator
  chose `requeue` (the default), or keep running with `keep`.
A GPU closed for several reasons shows the first of: down, fault, drain.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from scheduler.core.model import Cluster, Placement
from scheduler.core.reasons import Code, Reason


class OnFault(str, Enum):
    """What happens to the runs on a GPU its agent reports faulty (`corral serve --on-gpu-fault`)."""

    REQUEUE = "requeue"  # checkpoint them and start them elsewhere: a faulty GPU may corrupt or stall their work
    KEEP = "keep"  # leave them be (the operator watches them): only new placements avoid the GPU


@dataclass(frozen=True, slots=True)
class Drain:
    """An admin's drain of one node: why, and whether the runs on it leave now (`evict`) or may finish."""

    reason: str
    evict: bool = False


@dataclass(frozen=True, slots=True)
class NodeSpan:
    """A node as the rule needs it: its name and its GPUs, cluster-wide ids `first_gpu` to `first_gpu + gpus - 1`
    (from the cluster model: `spans`; from the store's rows in the API)."""

    name: str
    first_gpu: int
    gpus: int

    def local(self, gpu: int) -> int:
        return gpu - self.first_gpu


def spans(cluster: Cluster, node_names: Sequence[str] | None = None) -> list[NodeSpan]:
    """The cluster model's nodes (named `node_names`, default node0, node1...)."""
    return [NodeSpan(node_names[i] if node_names is not None else f"node{i}", int(cluster.node_first_gpu[i]),
                     int(cluster.node_num_gpus[i])) for i in range(cluster.num_nodes)]


def _node_of(nodes: Sequence[NodeSpan]) -> dict[int, int]:
    return {n.first_gpu + k: i for i, n in enumerate(nodes) for k in range(n.gpus)}


def closed_gpus(nodes: Sequence[NodeSpan], *, down: Iterable[int] = (), drained: Mapping[int, Drain] | None = None,
                faults: Mapping[int, str] | None = None, held: Mapping[int, str] | None = None) -> dict[int, str]:
    """Every GPU no new job may use, with why. `down`, `drained` and `held` are node indices (positions in `nodes`;
    `held`: nodes the live controller holds out for a while, with why), `faults` cluster-wide GPU ids with the
    agent's reason."""
    closed: dict[int, str] = {}
    for i, why in sorted((held or {}).items()):
        closed.update(dict.fromkeys(range(nodes[i].first_gpu, nodes[i].first_gpu + nodes[i].gpus),
                                    f"node {nodes[i].name} is held out: {why}"))
    for i, drain in sorted((drained or {}).items()):
        why = f"node {nodes[i].name} is drained" + (f": {drain.reason}" if drain.reason else "")
        closed.update(dict.fromkeys(range(nodes[i].first_gpu, nodes[i].first_gpu + nodes[i].gpus), why))
    node_of = _node_of(nodes) if faults else {}
    for g, why in (faults or {}).items():
        node = nodes[node_of[g]]
        closed[g] = f"GPU {node.local(g)} of {node.name} is faulty: {why}"
    for i in down:
        closed.update(dict.fromkeys(range(nodes[i].first_gpu, nodes[i].first_gpu + nodes[i].gpus),
                                    f"node {nodes[i].name} is down"))
    return closed


def evictions(nodes: Sequence[NodeSpan], placements: Mapping[int, Placement], *,
              drained: Mapping[int, Drain] | None = None, faults: Mapping[int, str] | None = None,
              on_fault: OnFault = OnFault.REQUEUE) -> dict[int, str]:
    """`eviction_reasons`, in words (the simulator's pending reasons)."""
    return {job_id: why.text for job_id, why in eviction_reasons(nodes, placements, drained=drained, faults=faults,
                                                                  on_fault=on_fault).items()}


def eviction_reasons(nodes: Sequence[NodeSpan], placements: Mapping[int, Placement], *,
                     drained: Mapping[int, Drain] | None = None, faults: Mapping[int, str] | None = None,
                     on_fault: OnFault = OnFault.REQUEUE, requeued: bool = False) -> dict[int, Reason]:
    """The running jobs (id -> why) that must be checkpointed and requeued, spending no restart: those on a node
    drained with `evict`, and, with `on_fault` requeue, those on a faulted GPU. (Runs on a down node are lost
    instead: the caller knows, and spends a restart.) `requeued`: the reasons say the run was checkpointed and
    requeued (the live controller's, which does so as it reads them)."""
    evicting = {i: d for i, d in (drained or {}).items() if d.evict}
    faulty = dict(faults or {}) if on_fault is OnFault.REQUEUE else {}
    out: dict[int, Reason] = {}
    if not evicting and not faulty:
        return out
    node_of = _node_of(nodes)
    for job_id, placement in placements.items():
        bad = next((g for g in placement.gpus if g in faulty), None)
        if bad is not None:
            node = nodes[node_of[bad]]
            out[job_id] = Reason(Code.EVICTED, {"node": node.name, "gpu": int(node.local(bad)), "detail": faulty[bad],
                                                "requeued": requeued})
            continue
        i = next((node_of[g] for g in placement.gpus if node_of[g] in evicting), None)
        if i is not None:
            out[job_id] = Reason(Code.EVICTED, {"node": nodes[i].name, "gpu": None, "detail": evicting[i].reason,
                                                "requeued": requeued})
    return out


@dataclass(frozen=True, slots=True)
class Outage:
    """A drain of one node or a fault of one GPU, replayed by the simulator from `start_s` until `end_s` (infinite:
    the rest of the run): exactly one of `node` (a drain; `evict` as `corral node drain --now`) and `gpu` (a fault,
    its runs handled by the simulator's `on_fault`)."""

    start_s: float
    end_s: float = math.inf
    node: int | None = None
    gpu: int | None = None
    reason: str = ""
    evict: bool = False

    def check(self, cluster: Cluster) -> None:
        """ValueError naming the field when this outage cannot happen on `cluster`."""
        if (self.node is None) == (self.gpu is None):
            raise ValueError("an outage names exactly one of node (a drain) and gpu (a fault)")
        if self.node is not None and not 0 <= self.node < cluster.num_nodes:
            raise ValueError(f"outage node: {self.node} is not a node of {cluster.name} (0 to {cluster.num_nodes - 1})")
        if self.gpu is not None and not 0 <= self.gpu < cluster.num_gpus:
            raise ValueError(f"outage gpu: {self.gpu} is not a GPU of {cluster.name} (0 to {cluster.num_gpus - 1})")
        if not (math.isfinite(self.start_s) and self.start_s < self.end_s):
            raise ValueError(f"outage start_s: {self.start_s} must be finite and before end_s {self.end_s}")


def conditions(outages: Iterable[Outage]) -> tuple[dict[int, Drain], dict[int, str]]:
    """The drains (node -> Drain) and faults (GPU -> why) that a set of outages in effect amounts to."""
    drained: dict[int, Drain] = {}
    faults: dict[int, str] = {}
    for o in outages:
        if o.node is not None:
            before = drained.get(o.node)
            drained[o.node] = Drain(o.reason, o.evict or (before is not None and before.evict))
        elif o.gpu is not None:
            faults[o.gpu] = o.reason or "fault"
    return drained, faults

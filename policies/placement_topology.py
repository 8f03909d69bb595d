"""The topology searches of `policies.placement.Planner`: a gang on as few racks, pods and nodes as it fits, on the same
GPU indices of each node where it can (`Planner.topology_fit`, `Planner.whole_servers_fit`). They read the plan's free
GPUs per node and per rack (`Planner.rack_free`, kept as the plan changes where the gang may use every node)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from policies.free_index import FreeIndex
from scheduler.core.model import Cluster, JobSpec, Placement
from scheduler.core.state import EPS

_NO_RACK = np.iinfo(np.int64).max  # `_tightest_node`'s key of a rack with no node that holds the gang


class Plan(Protocol):
    """What these searches read of a plan: `policies.placement.Planner`'s (which calls them, so they do not import it)."""

    cluster: Cluster
    free_share: np.ndarray
    node_free: np.ndarray
    free_whole: int

    @property
    def index(self) -> FreeIndex | None: ...

    def rack_free(self, free: np.ndarray) -> np.ndarray: ...

    def gpus_in_node(self, node: int, count: int) -> list[int]: ...

    def _usable_free(self, spec: JobSpec) -> np.ndarray: ...

    def _record_misfit(self, spec: JobSpec) -> None: ...


def topology_fit(planner: Plan, spec: JobSpec) -> Placement | None:
    """A gang in as few racks as it fits, then as few pods, then as few nodes, on the same GPU indices of each
    node where it can (rail-aligned rings stay on their rail's leaf): Slurm's `topology/block` and Kueue's
    Topology Aware Scheduling. One node: best fit; one rack: the fullest that holds it (best fit, as consolidate);
    else the pod that holds it with least to spare, and in it (or in the cluster) the racks with most free GPUs
    first, so the fewest are spanned."""
    w = spec.workers
    if planner.free_whole < w:
        return None
    c = planner.cluster
    free = planner._usable_free(spec)
    rack_free = planner.rack_free(free)
    index = planner.index if free is planner.node_free else None
    if index is not None and index.rack_starts is not None:  # racks numbered in order: per rack first
        per = int(c.max_gpus_per_node)
        node = _tightest_node(free, rack_free, index.rack_starts, w, per) if w <= per else -1
        if node >= 0:
            return Placement(tuple(planner.gpus_in_node(node, w)))
        single = np.empty(0, dtype=np.intp)
    else:
        single = np.flatnonzero(free >= w)
    if single.size:  # best fit at both levels: the fullest rack with a node that holds it, its tightest node
        # (rack's free GPUs, node's, node) in order, as one integer: each part is below the next's factor
        key = (rack_free[c.node_rack[single]] * (int(c.max_gpus_per_node) + 1) + free[single]) * c.num_nodes + single
        return Placement(tuple(planner.gpus_in_node(int(single[np.argmin(key)]), w)))
    if int(free.sum()) < w:
        planner._record_misfit(spec)
        return None
    # No rack holds it: whole servers, on the fewest racks they allow. A server the gang shares gives it only
    # some of its NICs, which its other tenants' traffic also crosses, and fewer GPUs there give its ring fewer
    # channels (each of its NICs carries more): a rack saved is worth less (benchmarks/decision_quality.py).
    counts = None if (rack_free >= w).any() else _whole_servers(planner, free, w)
    if counts is None:  # one rack holds it, or too few servers are wholly free: fewest racks, fullest first
        racks = _fewest_racks(planner, rack_free, w)
        if index is not None:  # (the order below is the nodes' own: which way they come does not matter)
            nodes = np.concatenate([index.rack_nodes(r) for r in racks.tolist()])
            nodes = nodes[free[nodes] > 0]
        else:
            nodes = np.flatnonzero(np.isin(c.node_rack, racks) & (free > 0))
        nodes = nodes[np.lexsort((nodes, -free[nodes]))]
        counts, taken = {}, 0
        for node, has in zip(nodes.tolist(), free[nodes].tolist(), strict=True):
            counts[node] = min(has, w - taken)
            taken += counts[node]
            if taken == w:
                break
    return Placement(tuple(sorted(_aligned(planner, counts))))


def _tightest_node(free: np.ndarray, rack_free: np.ndarray, starts: np.ndarray, w: int, per: int) -> int:
    """`topology_fit`'s node for a gang one node holds, where each rack's nodes are numbered together from
    `starts[rack]`: of the nodes with at least `w` whole free GPUs, the one first by (its rack's free GPUs, its own,
    its number); -1: none. No node has more than `per`. Per rack first, its tightest node that holds the gang (one
    pass over the nodes); then the rack first by (its free GPUs, that node's), the lowest-numbered of those alike,
    and its lowest-numbered node that tight (racks in order: no other rack's node comes before it)."""
    none = per + 1  # more than any node has
    tightest = np.minimum.reduceat(np.where(free >= w, free, none), starts)  # per rack
    key = np.where(tightest < none, rack_free * (none + 1) + tightest, _NO_RACK)
    rack = int(np.argmin(key))
    k = int(tightest[rack])
    if k == none:
        return -1
    first, end = int(starts[rack]), (int(starts[rack + 1]) if rack + 1 < len(starts) else len(free))
    return first + int(np.argmax(free[first:end] == k))


def whole_servers_fit(planner: Plan, spec: JobSpec) -> Placement | None:
    """A gang on the fewest servers: wholly free ones on the fewest racks they allow, the remainder on one more
    (`_whole_servers`), rail-aligned; None if too few servers are wholly free."""
    w = spec.workers
    if planner.free_whole < w:
        return None
    counts = _whole_servers(planner, planner._usable_free(spec), w)
    return Placement(tuple(sorted(_aligned(planner, counts)))) if counts is not None else None


def _whole_servers(planner: Plan, free: np.ndarray, w: int) -> dict[int, int] | None:
    """A gang as wholly free servers on the fewest racks they allow, plus the remainder on one more server (best
    fit, in those racks if one there holds it): GPUs per server for each. None if too few servers are wholly
    free."""
    c = planner.cluster
    per = int(c.max_gpus_per_node)
    whole = (free == c.node_num_gpus) & (c.node_num_gpus == per)
    q, rest = divmod(w, per)
    if int(whole.sum()) < q or q == 0:
        return None
    racks = _fewest_racks(planner, planner.rack_free(whole * per), q * per)
    counts: dict[int, int] = {}
    for rack in racks.tolist():
        for node in np.flatnonzero(whole & (c.node_rack == rack)).tolist()[: q - len(counts)]:
            counts[node] = per
    if rest:
        others = np.flatnonzero(free >= rest)
        others = others[~np.isin(others, list(counts))]
        if not others.size:
            return None
        outside = ~np.isin(c.node_rack[others], racks)
        counts[int(others[np.lexsort((others, free[others], outside))[0]])] = rest
    return counts


def _fewest_racks(planner: Plan, rack_free: np.ndarray, w: int) -> np.ndarray:
    """The racks a gang of `w` GPUs takes, given each rack's free GPUs: one (best fit) if one holds it; else within
    the best-fitting pod if one holds it; else the racks with most free GPUs first."""
    c = planner.cluster
    fitting = np.flatnonzero(rack_free >= w)
    if fitting.size:
        return fitting[[np.argmin(rack_free[fitting])]]
    pool = np.arange(c.num_racks)
    per_pod = c.fabric.spec.racks_per_pod if c.fabric is not None else None
    if per_pod:
        pod_free = np.bincount(pool // per_pod, weights=rack_free)
        pods = np.flatnonzero(pod_free >= w)
        if pods.size:
            pool = pool[pool // per_pod == pods[np.argmin(pod_free[pods])]]
    pool = pool[np.lexsort((pool, -rack_free[pool]))]
    taken = np.cumsum(rack_free[pool])
    return pool[: int(np.searchsorted(taken, w)) + 1]


def _aligned(planner: Plan, counts: dict[int, int]) -> list[int]:
    """`counts[node]` free GPUs of each node, preferring the GPU indices free on most of the nodes: channel k
    of the ring then joins GPU k of every node, one rail. (Which GPUs, in no particular order: its callers sort them.)"""
    c = planner.cluster
    votes: dict[int, int] | None = None  # counted once a node gives only some of its free GPUs: only then they choose
    free_local: dict[int, list[int]] = {}
    for node in counts:
        first = int(c.node_first_gpu[node])
        shares = planner.free_share[first:first + int(c.node_num_gpus[node])].tolist()
        free_local[node] = [k for k, s in enumerate(shares) if s >= 1.0 - EPS]
    gpus: list[int] = []
    for node, m in counts.items():
        if c.node_nvlink[node]:
            first, best = int(c.node_first_gpu[node]), free_local[node]
            if m < len(best):
                if votes is None:
                    votes = {}
                    for local in free_local.values():
                        for k in local:
                            votes[k] = votes.get(k, 0) + 1
                ranked = votes
                best = sorted(best, key=lambda k: (-ranked[k], k))[:m]
            gpus.extend(first + k for k in best)
        else:  # PCIe: keep the switch packing of gpus_in_node; rails matter on NVLink servers with NICs per GPU
            gpus.extend(planner.gpus_in_node(node, m))
    return gpus

"""Which victims step 2 of the victim rule (`scheduler.core.victims._cheapest`) would weigh in vain, for Tiresias'
room model (`policies.tiresias._room_model`): a floor under what any cover of a bucket frees.

Step 2 keeps, per bucket, a frontier of the sets it has built, and takes a set as the new best only when it covers
its bucket's need and frees fewer GPUs than the best so far (`top_cost < bound - EPS`, with `bound` only falling).
If every cover of bucket b frees at least `floor[b]` and `floor[b] >= bound - EPS`, no set of bucket b is ever taken
(nor shown to `fits`) for the rest of the search: b's frontier no longer matters. The buckets are independent (an
offer widens each bucket's frontier alone, and what one bucket holds is read by no other), so an offer whose every
gain falls in such buckets changes nothing that decides the result, and passing over it unread returns the same set
(`_cheapest`'s own test that an offer "changed nothing" only guards a shortcut that is exact either way). The result
is the same set, found at the same offer; only the frontiers of buckets that could not win are left as they were.

The floors (`v` a victim, `p` its placement, `freed` what it frees; `used[g] = 1 - free_share[g]` on the plan the
search reads, which it leaves unchanged):

* A node bucket n (the job fits on one node; it lacks `need[n]` whole GPUs there): `v` gains n, per GPU `g` of it on
  n, `fraction(p, g)` = 1 where `used[g] <= p.share + 1e-9`, else `p.share / used[g]`. In both cases `p.share >=
  (used[g] - 1e-6) * fraction(p, g)`. Where `freed >= p.share * len(p.gpus)` (checked: a victim is passed over only
  then) and `used[g] >= r[n]`, the least `used` of n's occupied GPUs (`v`'s own GPUs are occupied: `p.share > 1e-6`,
  checked), `freed >= (r[n] - 1e-6) * gain_n(v)`. A cover gains at least `need[n] - 1e-6`, so it frees at least
  `(r[n] - 1e-6) * (need[n] - 1e-6)` (where `r[n] > 1e-6`; else no floor). With one GPU lacking (the common search: a 1-GPU job on a full node) that is the
  least-used GPU of the node: a node whose GPUs are all whole-GPU jobs or full shares cannot beat a bound of 1.
* A GPU bucket g (a GPU share): `v` gains `p.share` on each of its GPUs and frees at least their sum, so a cover
  frees at least `need[g] - 1e-6`.
* The cluster bucket (a gang larger than any node): no floor (every victim is read).

Every floor is lowered by `SLACK` (1e-9 GPUs) against the float sums (a set's cost is a sum of a few victims'
demands; rounding moves it by ~1e-15), and a GPU in no bucket has floor +inf (it gains nothing).
"""

from __future__ import annotations

import math

import numpy as np

from policies.placement import Planner
from scheduler.core.model import Cluster, JobSpec, Placement
from scheduler.core.state import ClusterView
from scheduler.core.victims import EPS

SLACK = 1e-9
OCCUPIED = 1e-9  # a GPU whose used share is above this holds a tenant (a victim's share is above 1e-6: checked)
_INF = math.inf

# Per cluster (by identity): each GPU's node as a list, and whether node GPUs are contiguous ranges (reduceat works).
_NODE_OF: dict[int, tuple[Cluster, list[int], bool]] = {}


def _node_of(cluster: Cluster) -> tuple[list[int], bool]:
    key = id(cluster)
    hit = _NODE_OF.get(key)
    if hit is None or hit[0] is not cluster:
        first, count = cluster.node_first_gpu, cluster.node_num_gpus
        contiguous = bool(len(first) > 0 and (count >= 1).all() and first[0] == 0
                          and (first[1:] == first[:-1] + count[:-1]).all())
        hit = (cluster, cluster.gpu_node.tolist(), contiguous)
        if len(_NODE_OF) > 8:
            _NODE_OF.clear()
        _NODE_OF[key] = hit
    return hit[1], hit[2]


class RoomFloors:
    """Floors under what a cover of each bucket frees (the module's proof), built on the first question (step 2 only
    starts for some searches) from the plan as the search reads it."""

    __slots__ = ("_built", "_lacking", "_planner", "_spec", "_view", "by_gpu", "by_node", "node_of")

    def __init__(self, view: ClusterView, planner: Planner, spec: JobSpec, lacking: dict[int, float]) -> None:
        self._view, self._planner, self._spec, self._lacking = view, planner, spec, lacking
        self.by_node: list[float] | None = None  # node buckets: per node
        self.by_gpu: list[float] | None = None  # GPU buckets: per GPU
        self.node_of: list[int] = []
        self._built: bool | None = None  # None: not yet asked

    def _build(self) -> bool:
        """Builds the floors; False where there are none (the cluster bucket, or nodes that are not ranges)."""
        cluster = self._view.cluster
        free_share = self._planner.free_share
        lacking = self._lacking
        if self._spec.num_gpus < 1:  # GPU buckets
            floors = np.full(len(free_share), _INF)
            gpus = np.fromiter(lacking.keys(), dtype=np.int64, count=len(lacking))
            need = np.fromiter(lacking.values(), dtype=np.float64, count=len(lacking))
            floors[gpus] = need - EPS - SLACK
            self.by_gpu = floors.tolist()
            return True
        if self._spec.workers > cluster.max_gpus_per_node:  # the cluster bucket
            return False
        self.node_of, contiguous = _node_of(cluster)
        if not contiguous:
            return False
        used = 1.0 - free_share
        least = np.minimum.reduceat(np.where(used > OCCUPIED, used, _INF), cluster.node_first_gpu)
        nodes = np.fromiter(lacking.keys(), dtype=np.int64, count=len(lacking))
        need = np.fromiter(lacking.values(), dtype=np.float64, count=len(lacking))
        floors = np.full(len(least), _INF)
        least = least[nodes]
        # (inf where the node holds no tenant: no victim there, no cover; no floor where `least - EPS` is not positive)
        floors[nodes] = np.where(least > EPS, (least - EPS) * (need - EPS) - SLACK, -_INF)
        self.by_node = floors.tolist()
        return True

    def passes_over(self, p: Placement, freed: float, bound: float) -> bool:
        """Whether a victim on `p` that frees `freed` gains only buckets where no cover frees fewer than `bound`
        (within step 2's EPS): then step 2 would take no set holding it."""
        if self._built is None:
            self._built = self._build()
        if not self._built:  # no floors: every victim is read
            return False
        share, gpus = p.share, p.gpus
        if not (share > EPS and share * len(gpus) <= freed + SLACK):
            return False
        limit = bound - EPS
        if self.by_node is not None:
            by_node, node_of = self.by_node, self.node_of
            if len(gpus) == 1:
                return by_node[node_of[gpus[0]]] >= limit
            return all(by_node[node_of[g]] >= limit for g in gpus)
        by_gpu = self.by_gpu
        return all(by_gpu[g] >= limit for g in gpus)  # type: ignore[index]

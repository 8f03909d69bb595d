"""Which victims step 2 of the victim rule (`scheduler.core.victims._cheapest`) would weigh in vain, for Tiresias'
room model (`policies.victim_choice._room_model`): a floor under what any cover of a bucket frees.

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

import itertools
import math
from collections.abc import Callable, Mapping

import numpy as np

from policies.placement import Planner
from scheduler.core.model import Cluster, JobSpec, Placement
from scheduler.core.priorities import may_preempt
from scheduler.core.state import ClusterView
from scheduler.core.victims import EPS, Bound, Needs

SLACK = 1e-9
OCCUPIED = 1e-9  # a GPU whose used share is above this holds a tenant (a victim's share is above 1e-6: checked)
_INF = math.inf

# Per cluster (by identity): each GPU's node as a list, and whether node GPUs are contiguous ranges (reduceat works).
_NODE_OF: dict[int, tuple[Cluster, list[int], bool]] = {}


def share_freed(share: float, free: float) -> float:
    """What a tenant holding `share` of a GPU whose free share is `free` counts toward that GPU's room: the whole GPU
    when it is the only tenant (within EPS), else its part of what is used. Tiresias' room model
    (`policies.victim_choice._room_model`) and the cover floors below count it so: a floor computed otherwise could be
    too high and skip a cheaper set."""
    used = 1.0 - free
    return 1.0 if used <= share + EPS else share / used


def _arrays(lacking: Mapping[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """The buckets a job lacks room in and what it lacks in each, as arrays (`Needs` holds them so already)."""
    if isinstance(lacking, Needs):
        return lacking.buckets, lacking.needs
    return (np.fromiter(lacking.keys(), dtype=np.int64, count=len(lacking)),
            np.fromiter(lacking.values(), dtype=np.float64, count=len(lacking)))


def _node_of(cluster: Cluster) -> tuple[list[int], bool]:
    key = id(cluster)
    hit = _NODE_OF.get(key)
    if hit is None or hit[0] is not cluster:
        first, count = cluster.node_first_gpu, cluster.node_num_gpus
        contiguous = bool(len(first) > 0 and (count >= 1).all() and first[0] == 0
                          and (first[1:] == first[:-1] + count[:-1]).all())
        hit = (cluster, cluster.gpu_node_list, contiguous)  # (the cluster's own list)
        if len(_NODE_OF) > 8:
            _NODE_OF.clear()
        _NODE_OF[key] = hit
    return hit[1], hit[2]


class RoomFloors:
    """Floors under what a cover of each bucket frees (the module's proof), built on the first question (step 2 only
    starts for some searches) from the plan as the search reads it."""

    __slots__ = ("_bound", "_built", "_covers", "_lacking", "_planner", "_spec", "_view", "by_gpu", "by_node",
                 "node_of")

    def __init__(self, view: ClusterView, planner: Planner, spec: JobSpec, lacking: Mapping[int, float],
                 covers: Callable[[], np.ndarray] | None = None, bound: Bound | None = None) -> None:
        """`covers`: the nodes' exact floors (`CoverFloors.floors`), raised to where the floors above are lower; with
        them, the least over the nodes the job lacks room on becomes `bound`'s floor (`Bound.floor`)."""
        self._view, self._planner, self._spec, self._lacking = view, planner, spec, lacking
        self._covers, self._bound = covers, bound
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
            gpus, need = _arrays(lacking)
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
        nodes, need = _arrays(lacking)
        floors = np.full(len(least), _INF)
        least = least[nodes]
        # (inf where the node holds no tenant: no victim there, no cover; no floor where `least - EPS` is not positive)
        floors[nodes] = np.where(least > EPS, (least - EPS) * (need - EPS) - SLACK, -_INF)
        if self._covers is not None and len(nodes):
            floors[nodes] = np.maximum(floors[nodes], self._covers()[nodes])
            if self._bound is not None:
                self._bound.floor = float(floors[nodes].min())
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


# ---- floors kept from one search to the next -------------------------------------------------------------------------

MAX_COVER_FRONTIER = 256  # (gain, cost) pairs in a node's exact search; past it the node gets no floor (-inf)
_EVENTS_KEPT = 1 << 16  # level changes kept for the tables to catch up on; past it every table starts again


class CoverFloors:
    """Per node, what the least set of a search's victims there that makes room for the job frees (less `SLACK`):
    the exact floor under what a cover of that node bucket frees, found by a small exhaustive search over the node's
    victims. With the floors of every node the job lacks room on, a victim search knows when its best set can no
    longer be beaten (`scheduler.core.victims.Bound.floor`) and stops reading victims; a full cluster's late searches
    read hundreds of victims after finding the set they return.

    Computing a node's floor reads its tenants, so what it reads is kept from one search to the next in two layers:
    each node's tenants with what each gains there on the plan (`_NodeTenants`, one for all searches), and the floors
    per what they depend on besides the node (the searching job's queue level, priority and workers: a table's key).
    A node's tenants are read again only when something they depend on may have changed: its GPUs' free share on the
    plan (allocations, releases, closures, the plan's own changes within a call), the set of its tenants
    (`ClusterView.moved_since`: a job allocated or released), or a tenant's queue level (`relevel`, told by the
    policy's index); each reading stamps the node anew, and a table computes again the nodes whose stamp it has not
    seen. (One table per key used to find the changes itself: a key searched rarely, as most of Gittins' are, read
    again every node that changed since, its tenants included, hundreds per search.)

    The victims counted on a node are its tenants at a level below the searching job's that it may preempt: a superset
    of the search's victims (it also leaves out those already chosen in the call), so the floor stays a floor."""

    __slots__ = ("_events", "_nodes", "_tables", "read", "recomputed")

    def __init__(self) -> None:
        self._tables: dict[tuple[int, float, int], _CoverTable] = {}
        self._nodes: _NodeTenants | None = None
        self._events: list[int] = []  # ids of jobs whose queue level changed, oldest first
        self.recomputed = 0  # node floors computed (tests: the tables do spare work)
        self.read = 0  # nodes' tenants read (tests: so do the nodes' tenants)

    def relevel(self, job_id: int) -> None:
        """A running job's queue level changed (or it left the index): the floors of its nodes may have."""
        self._events.append(job_id)
        if len(self._events) > _EVENTS_KEPT:
            self._events.clear()
            self._tables.clear()
            self._nodes = None

    def floors(self, view: ClusterView, planner: Planner, spec: JobSpec, level: int,
               levels: Mapping[int, int]) -> np.ndarray:
        """Per node, the floor for `spec` (a gang that fits on one node) searching victims below `level`, on the plan
        as `planner` has it now (read-only: kept by the table, copied). `levels`: the running jobs' queue levels."""
        nodes = self._nodes
        if nodes is None or nodes.view is not view:
            nodes = self._nodes = _NodeTenants(view)
        self.read += nodes.catch_up(view, planner, self._events, levels)
        key = (level, spec.priority, spec.workers)
        table = self._tables.get(key)
        if table is None or table.view is not view:
            table = self._tables[key] = _CoverTable(view)
        dirty = np.flatnonzero(table.stamp != nodes.stamp)
        if not len(dirty):
            return table.by_node
        node_free, workers, by_node, tenants = planner.node_free, spec.workers, table.by_node, nodes.tenants
        for n in dirty.tolist():
            need = workers - float(node_free[n])
            if need <= 0:
                by_node[n] = _INF
            else:
                items = [(gain, cost) for gain, cost, lv, tenant in tenants[n]
                         if lv > level and may_preempt(tenant, spec, equals=True)]
                by_node[n] = _least_cover(items, need - EPS - SLACK) - SLACK
        table.stamp[dirty] = nodes.stamp[dirty]
        self.recomputed += len(dirty)
        return table.by_node


class _CoverTable:
    """One key's floors (`CoverFloors`), with the stamps of the nodes' tenants they were computed on."""

    __slots__ = ("by_node", "stamp", "view")

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.by_node = np.full(view.cluster.num_nodes, -_INF)
        self.stamp = np.zeros(view.cluster.num_nodes, dtype=np.int64)  # 0: never computed (`_NodeTenants` stamps > 0)


class _NodeTenants:
    """Per node, its running tenants as a node floor reads them: (gain there on the plan, GPUs freed, queue level,
    spec), in the order of its GPUs (then each GPU's tenants), each tenant once; with a stamp that changes whenever
    they are read again. (The level is the one read with them: a tenant that changes level, or stops running, has
    its nodes read again before the next floor is computed, `_stale`.)"""

    __slots__ = ("events", "free", "moves", "next_stamp", "stamp", "tenants", "view", "where")

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        num_nodes = view.cluster.num_nodes
        self.tenants: list[list[tuple[float, float, int, JobSpec]]] = [[] for _ in range(num_nodes)]
        self.stamp = np.zeros(num_nodes, dtype=np.int64)
        self.next_stamp = 1
        self.free: np.ndarray | None = None  # the plan's free share the tenants were read on (None: never)
        self.moves = 0
        self.events = 0
        self.where: dict[int, list[int]] = {}  # tenant id -> the nodes whose tenants hold it

    def catch_up(self, view: ClusterView, planner: Planner, events: list[int], levels: Mapping[int, int]) -> int:
        """Reads again the nodes whose tenants may have changed since the last call (every node the first time; the
        module's `CoverFloors` says what they depend on), stamping them; returns how many. `levels`: the running jobs'
        queue levels (0 where none), as `events` has told every change to them."""
        dirty = self._stale(view, planner, events)
        for n in dirty:
            self._read(n, view, planner, levels)
        if dirty:
            self.stamp[dirty] = np.arange(self.next_stamp, self.next_stamp + len(dirty))
            self.next_stamp += len(dirty)
        self.free = planner.free_share.copy()
        self.moves = view.moves
        self.events = len(events)
        return len(dirty)

    def _stale(self, view: ClusterView, planner: Planner, events: list[int]) -> list[int]:
        """The nodes to read again. A job that moved or changed level matters where it was read and where it runs
        now; a node's free share, to the gains of its tenants (and what the job lacks there)."""
        moved = view.moved_since(self.moves) if self.free is not None else None
        if moved is None or self.events > len(events) or len(self.where) > 2 * len(view.running) + 4096:
            self.where = {}
            return list(range(view.cluster.num_nodes))
        node_of = view.cluster.gpu_node_list
        dirty = {node_of[g] for g in np.flatnonzero(self.free != planner.free_share).tolist()}
        running, placement, where = view.running, view.placement, self.where
        for job_id in itertools.chain(moved, events[self.events:]):
            counted = where.pop(job_id, None)
            if counted is not None:
                dirty.update(counted)
            if job_id in running:
                dirty.update(node_of[g] for g in placement(job_id).gpus)
        return sorted(dirty)

    def _read(self, n: int, view: ClusterView, planner: Planner, levels: Mapping[int, int]) -> None:
        """Node `n`'s running tenants with their gains there (`_room_model`'s, on this plan), the GPUs each frees,
        its level and spec."""
        cluster = view.cluster
        node_of = cluster.gpu_node_list
        first = int(cluster.node_first_gpu[n])
        free = planner.free_share[first:first + int(cluster.node_num_gpus[n])].tolist()
        running, where = view.running, self.where
        items: list[tuple[float, float, int, JobSpec]] = []
        read: set[int] = set()
        for g in range(first, first + len(free)):
            for t in view.tenants(g):
                if t in read:
                    continue
                read.add(t)
                job = running.get(t)
                if job is None:
                    continue
                counted = where.setdefault(t, [])
                if n not in counted:
                    counted.append(n)
                p = view.placement(t)
                gain = 0.0
                for h in p.gpus:
                    if node_of[h] == n:
                        gain += share_freed(p.share, free[h - first])
                items.append((gain, job.spec.gpu_demand, levels.get(t, 0), job.spec))
        self.tenants[n] = items


def _least_cover(items: list[tuple[float, float]], target: float) -> float:
    """The least total cost of items (gain, cost; costs positive) whose gains add up to `target` (inf: none do;
    -inf: too many sets to weigh to be sure). Sets that do not yet cover are kept as a Pareto frontier of (gain,
    cost), widened by each item; one that costs as much as the best cover so far is dropped (it only grows)."""
    best = min((c for g, c in items if g >= target), default=_INF)
    front: list[tuple[float, float]] = [(0.0, 0.0)]
    for gain, cost in items:
        if cost >= best or gain >= target:  # (a cover alone: `best` counts it)
            continue
        grown = []
        for g, c in front:
            c += cost
            if c < best:
                g += gain
                if g >= target:
                    best = c
                else:
                    grown.append((g, c))
        if grown:
            merged = sorted(front + grown, key=lambda e: (-e[0], e[1]))
            front = []
            cheapest = _INF
            for g, c in merged:
                if c < cheapest and c < best:
                    front.append((g, c))
                    cheapest = c
            if len(front) > MAX_COVER_FRONTIER:
                return -_INF
    return best

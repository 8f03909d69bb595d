"""Finding GPUs for a job: the placement generators every policy builds on.

`Planner` holds a tentative copy of the free capacity, so a policy can plan a batch of placements (and preemptions) in
one call without touching the real state. The searches are vectorised over nodes or GPUs, or read an index of the free
GPUs kept as the plan changes (`policies.free_index`) where that answers them alike.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import numpy as np

import policies.placement_shares as placement_shares
import policies.placement_topology as placement_topology
from policies.free_index import FreeIndex
from scheduler.core.colocation import share_fits, share_mask
from scheduler.core.constraints import Constraints, eligible_gpus, eligible_nodes
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.state import EPS, ClusterView

_SCALAR_GPUS = 64  # victims' GPUs up to which `fit_test` adds their shares in Python: numpy costs more per call below
_SCALAR_TAKE = 8  # a placement's GPUs up to which `take` counts them in Python (a datacentre's 64-GPU gangs: numpy)
_INDEX_AFTER = 8  # searches a plan answers by scanning before it builds its index of free GPUs (`Planner.index`)


FitKey = tuple[float, int, float, float, str | None, Constraints | None]


def fit_key(view: ClusterView, spec: JobSpec) -> FitKey:
    """What the placement searches read of a job (`Planner.candidates`, `Planner.may_fit`): its GPUs, workers, share
    and memory, its user where one MPS daemon per node serves one user's shares, and its constraints (the nodes it
    may use). Jobs alike in it fit or do not together, on the same plan."""
    return (spec.num_gpus, spec.workers, spec.share, view.mem_need(spec),
            spec.user if view.mps_users.one_user else None, spec.constraints)


class Planner:
    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.cluster = c = view.cluster
        self.free_share = np.array(view.free_share)
        self.used_mem = np.array(view.used_mem)
        self.node_free = np.array(view.node_free)
        self.free_whole = view.free_whole
        self.free_capacity = view.free_capacity
        self._node_mem = c.node_gpu_mem
        self.min_gpu_mem = c.min_gpu_mem  # GB: a job needing no more fits every GPU
        self._max_free_share: float | None = None  # cached max of free_share; None when stale
        # Whose shares each node holds, as the plan goes (the one-user MPS rule; `scheduler.core.colocation`).
        self.mps = view.mps_users.copy()
        self._cap_ok: dict[tuple[float, float], np.ndarray] = {}  # (GB, share) -> GPUs whose MPS cap holds it
        self._cap_floors: dict[tuple[float, float], float] = {}  # (GB, share) -> `_cap_floor`
        # (GB, constraints) -> the nodes `usable_nodes` allows (read-only), and whether that is all of them: it reads
        # the nodes' memory and labels, which no plan changes, and a placement search asks it per job.
        self._usable: dict[tuple[float, Constraints | None], tuple[np.ndarray, bool]] = {}
        # Smallest demands known not to fit now. Capacity only shrinks as a plan takes GPUs, so anything at least as
        # large does not fit either; `give_back` forgets them. This keeps a scan of a deep queue cheap.
        self._misfit_workers = float("inf")
        self._misfit_shares: list[tuple[float, float, float, str | None]] = []  # (share, GB, `_cap_floor`, user)
        # How many times those changed: what `may_fit` refused before may differ after (`policies.rl_scan` reads it).
        self.misfits = 0
        # `candidates` by what its searches read of a job, for this plan only: `take` and `give_back` empty it. A deep
        # queue holds many jobs of one size and model, and the `rl:` frame and contention-greedy ask for the
        # candidates of each one they pass.
        self._candidates: dict[FitKey, list[Placement]] = {}
        self.changes = 0  # how many times `take` or `give_back` changed the plan: what was found before may not hold
        # Where the free GPUs are, kept as the plan changes: built on the first search that reads it (`index`); None
        # until then, and on a scratch plan (`without`), whose few searches scan. (GPUs numbered node by node.)
        self._index: FreeIndex | None = None
        self._indexable = c.gpus_by_node
        self._asked = 0  # searches that could have read the index before it was built

    # ---- bookkeeping -----------------------------------------------------------------------------------------------

    def take(self, spec: JobSpec, placement: Placement) -> None:
        self._candidates.clear()
        self.changes += 1
        mem = self.view.mem_need(spec)
        if len(placement.gpus) > _SCALAR_TAKE and placement.share >= 1.0:
            self._take_many(placement, mem)
            return
        index, share = self._index, placement.share
        free_share, used_mem, node_free = self.free_share, self.used_mem, self.node_free
        gpu_node = self.cluster.gpu_node_list
        moved = -1  # the node whose whole free GPUs the index is yet to be told
        # (Python floats read by `item`: the same doubles and the same arithmetic as the arrays' scalars, faster.)
        for g in placement.gpus:
            before, node = free_share.item(g), gpu_node[g]
            if before >= 1.0 - EPS:
                node_free[node] -= 1
                self.free_whole -= 1
                if index is not None and node != moved:
                    if moved >= 0:
                        index.moved(moved, node_free.item(moved))
                    moved = node
            free_share[g] = after = before - share  # (what `-=` stores)
            used_mem[g] = used_mem.item(g) + mem  # (what `+=` stores)
            if share < 1.0:
                self.mps.add(node, spec.user)
            if index is not None and (0.0 < before != 1.0 or 0.0 < after != 1.0):  # (what it keeps)
                index.share_changed(g, before, after)
        if index is not None and moved >= 0:
            index.moved(moved, node_free.item(moved))
        self.free_capacity -= share * len(placement.gpus)
        self._max_free_share = None

    def _take_many(self, placement: Placement, mem: float) -> None:
        """`take`'s loop for a large gang of whole GPUs, over arrays: the same counts and the same float operations
        (each GPU's free share and memory changed once, its GPUs being distinct)."""
        gpus = np.fromiter(placement.gpus, dtype=np.intp, count=len(placement.gpus))
        whole = self.free_share[gpus] >= 1.0 - EPS
        np.subtract.at(self.node_free, self.cluster.gpu_node[gpus[whole]], 1)
        self.free_whole -= int(np.count_nonzero(whole))
        before = self.free_share[gpus]
        self.free_share[gpus] -= placement.share
        if (index := self._index) is not None:  # (the free shares it keeps: `share_changed`)
            after = self.free_share[gpus]
            kept = ((before > 0.0) & (before != 1.0)) | ((after > 0.0) & (after != 1.0))
            for at in np.flatnonzero(kept).tolist():
                index.share_changed(int(gpus[at]), float(before[at]), float(after[at]))
            for node in np.unique(self.cluster.gpu_node[gpus[whole]]).tolist():
                index.moved(node, int(self.node_free[node]))
        self.used_mem[gpus] += mem
        self.free_capacity -= placement.share * len(placement.gpus)
        self._max_free_share = None

    def give_back(self, job: Job) -> None:
        """Count a running job's GPUs as free (it is about to be preempted)."""
        self._candidates.clear()
        self.changes += 1
        placement = self.view.placement(job.id)
        mem = self.view.mem_need(job.spec)
        index, share = self._index, placement.share
        free_share, node_free, gpu_node = self.free_share, self.node_free, self.cluster.gpu_node
        for g in placement.gpus:
            before, node = free_share[g], gpu_node[g]
            free_share[g] = after = before + share  # (what `+=` stores)
            self.used_mem[g] -= mem
            if share < 1.0:
                self.mps.remove(int(node), job.spec.user)
            if after >= 1.0 - EPS:
                node_free[node] += 1
                self.free_whole += 1
                if index is not None:
                    index.moved(int(node), int(node_free[node]))
            if index is not None and (0.0 < before != 1.0 or 0.0 < after != 1.0):  # (what it keeps)
                index.share_changed(g, float(before), float(after))
        self.free_capacity += share * len(placement.gpus)
        self._max_free_share = None
        if self._misfit_shares or self._misfit_workers != float("inf"):
            self.misfits += 1
        self._misfit_workers = float("inf")
        self._misfit_shares = []

    def without(self, victims: Sequence[Job]) -> Planner:
        """A scratch plan: this one with `victims` given back (`give_back`), this one left exactly as it is, with
        what its searches found. For weighing a preemption: giving the victims back and taking them again would leave
        rounding errors in the free shares and memory, and forget every search."""
        scratch = copy.copy(self)
        scratch.free_share, scratch.used_mem, scratch.node_free = (
            self.free_share.copy(), self.used_mem.copy(), self.node_free.copy())
        scratch._candidates = {}
        scratch._index, scratch._indexable = None, False
        scratch._misfit_shares = list(self._misfit_shares)  # its own: a search on it notes misfits there, not here
        scratch.mps = self.mps.copy()
        for v in victims:
            scratch.give_back(v)
        return scratch

    def fits_once_freed(self, spec: JobSpec, victims: Sequence[Job]) -> bool:
        """Would `best_fit(spec)` place it once `victims` leave? What giving them back, asking and taking them again
        answers, with the plan left as it is (`fit_test`)."""
        return self.fit_test(spec)(victims)

    def fit_test(self, spec: JobSpec) -> Callable[[Sequence[Job]], bool]:
        """`fits_once_freed` for `spec`, to ask of many victim sets while the plan stays as it is: the victim search
        asks it of hundreds of sets for a gang larger than a node, so what does not depend on the victims is read once.

        A whole-GPU job is answered without touching the plan: `consolidated` places a gang whenever the nodes with
        memory enough hold as many whole free GPUs as it has workers, so it counts the GPUs the victims would leave
        wholly free, their shares added to each GPU's free share in the order `give_back` adds them (the same floats).
        A GPU share is asked of a scratch plan the victims are given back to (`without`), which leaves this one as it
        is: a search for a share asks it of many sets, and giving back and taking again would leave rounding errors
        in this plan's free shares and forget its searches each time."""
        if spec.num_gpus < 1:
            return lambda victims: self.without(victims).best_fit(spec) is not None
        eligible = self.usable_nodes(spec)
        need = spec.workers - int(self.node_free[eligible].sum())
        if need <= 0:
            return lambda victims: True
        free_share, placement = self.free_share, self.view.placement
        eligible_gpu = eligible[self.cluster.gpu_node]

        def whole_fits(victims: Sequence[Job]) -> bool:
            placements = [placement(v.id) for v in victims]
            if sum(len(p.gpus) for p in placements) > _SCALAR_GPUS:
                return int(np.count_nonzero(eligible_gpu[self._wholly_freed(placements)])) >= need
            after: dict[int, float] = {}  # per GPU, its free share plus the victims' shares, added in their order
            for p in placements:
                for g in p.gpus:
                    after[g] = (after[g] if g in after else float(free_share[g])) + p.share
            freed = sum(1 for g, a in after.items()
                        if a >= 1.0 - EPS and free_share[g] < 1.0 - EPS and eligible_gpu[g])
            return freed >= need

        return whole_fits

    def free_once_freed(self, spec: JobSpec, victims: Sequence[Job]) -> np.ndarray:
        """Whole free GPUs per node, on the nodes with memory enough for `spec` (0 elsewhere), once `victims` leave:
        the count `fits_once_freed` makes, per node, with the plan left as it is."""
        eligible = self.usable_nodes(spec)
        free = np.where(eligible, self.node_free, 0)
        if not victims:
            return free
        nodes = self.cluster.gpu_node[self._wholly_freed([self.view.placement(v.id) for v in victims])]
        return free + np.where(eligible, np.bincount(nodes, minlength=len(free)), 0)

    def _wholly_freed(self, placements: Sequence[Placement]) -> np.ndarray:
        """The GPUs victims on `placements` would leave wholly free: their shares added to each GPU's free share in the
        order `give_back` adds them (the same floats)."""
        gpus = np.fromiter((g for p in placements for g in p.gpus), dtype=np.intp)
        shares = np.fromiter((p.share for p in placements for _ in p.gpus), dtype=float, count=gpus.size)
        touched, slot = np.unique(gpus, return_inverse=True)
        before = self.free_share[touched]
        after = before.copy()
        np.add.at(after, slot, shares)  # in the victims' order, one addition at a time, as `give_back` adds
        return touched[(before < 1.0 - EPS) & (after >= 1.0 - EPS)]

    @property
    def index(self) -> FreeIndex | None:
        """Where the free GPUs are (`policies.free_index`), built once the plan has been searched `_INDEX_AFTER` times
        (None before, and on a scratch plan: the scans answer alike). Building it costs several scans (56 us on 1,024
        nodes, 134 on 4,096, against 9-14 us a search), and most plans of a replay are searched a few times only."""
        if self._index is None and self._indexable:
            self._asked += 1
            if self._asked <= _INDEX_AFTER:
                return None
            c = self.cluster
            self._index = FreeIndex(self.node_free, self.free_share, c.node_rack, c.num_racks,
                                    int(c.max_gpus_per_node))
        return self._index

    def rack_free(self, free: np.ndarray) -> np.ndarray:
        """Per rack, the sum of `free` (whole free GPUs per node), as integers: the index's count where `free` is the
        plan's own `node_free`."""
        if free is self.node_free and (index := self.index) is not None:
            return index.rack_free
        c = self.cluster
        return np.bincount(c.node_rack, weights=free, minlength=c.num_racks).astype(np.int64)

    @property
    def max_free_share(self) -> float:
        if self._max_free_share is None:
            found = self._index.max_share(self.free_whole) if self._index is not None else None
            self._max_free_share = float(self.free_share.max()) if found is None else found
        return self._max_free_share

    def full(self) -> bool:
        """No job of any size fits anywhere."""
        return self.free_whole == 0 and self.max_free_share < 1e-3

    def may_fit(self, spec: JobSpec) -> bool:
        """Cheap necessary condition, to skip searches that cannot succeed."""
        n = spec.num_gpus
        if n < 1:
            if n > self.max_free_share + EPS:
                return False
            if not self._misfit_shares:
                return True
            mem, floor, user = self.view.mem_need(spec), self._cap_floor(spec), self._mps_user(spec)
            # A larger share needing more memory, on no larger GPUs than the misfit could use, of the same user (the
            # one-user rule closes nodes per user) has no more room than the misfit had.
            return not any(n >= s - EPS and mem >= m - EPS and floor >= f and user == u
                           for s, m, f, u in self._misfit_shares)
        return self.free_whole >= n and n < self._misfit_workers

    def _mps_user(self, spec: JobSpec) -> str | None:
        """The user, where the one-user MPS rule makes where a share fits depend on it."""
        return spec.user if self.mps.one_user else None

    def cap_ok(self, spec: JobSpec) -> np.ndarray:
        """The GPUs whose MPS memory cap for `spec`'s share holds its model (`colocation.share_fits`)."""
        key = (self.view.mem_need(spec), spec.share)
        ok = self._cap_ok.get(key)
        if ok is None:
            ok = self._cap_ok[key] = share_fits(key[0], key[1], self.cluster.gpu_mem)
            ok.flags.writeable = False  # handed out as it is (`share_ok`)
        return ok

    def _cap_floor(self, spec: JobSpec) -> float:
        """The smallest GPU memory whose MPS cap holds `spec`'s share (inf: none). Larger GPUs hold it too, so a
        share with a higher floor can use no GPU a share with a lower one could not."""
        key = (self.view.mem_need(spec), spec.share)
        floor = self._cap_floors.get(key)
        if floor is None:
            ok = self.cap_ok(spec)
            floor = self._cap_floors[key] = float(self.cluster.gpu_mem[ok].min()) if ok.any() else float("inf")
        return floor

    def _record_misfit(self, spec: JobSpec) -> None:
        if spec.constraints is not None:
            return  # it could use only some nodes: a job that may use others may fit where it did not
        mem = self.view.mem_need(spec)
        if spec.num_gpus < 1:
            self._misfit_shares.append((spec.num_gpus, mem, self._cap_floor(spec), self._mps_user(spec)))
            self.misfits += 1
        # only capacity, not memory, kept it out: larger gangs cannot fit
        elif mem <= self.min_gpu_mem and spec.num_gpus < self._misfit_workers:
            self._misfit_workers = spec.num_gpus
            self.misfits += 1

    # ---- whole-GPU jobs --------------------------------------------------------------------------------------------

    def gpus_in_node(self, node: int, count: int) -> list[int]:
        """`count` free GPUs of a node, under as few PCIe switches as possible (best fit per switch)."""
        c = self.cluster
        first, n, nvlink = c.node_spans[node]
        shares = self.free_share[first:first + n].tolist()  # (one read, not one per GPU)
        whole = 1.0 - EPS
        free = [first + k for k, s in enumerate(shares) if s >= whole]
        if nvlink or count == len(free):
            return free[:count]
        by_switch: dict[int, list[int]] = {}
        for g in free:
            by_switch.setdefault(int(c.gpu_switch[g]), []).append(g)
        fitting = [gs for gs in by_switch.values() if len(gs) >= count]
        if fitting:
            return min(fitting, key=len)[:count]
        chosen: list[int] = []
        for gs in sorted(by_switch.values(), key=len, reverse=True):
            chosen.extend(gs[: count - len(chosen)])
            if len(chosen) == count:
                break
        return chosen

    def _free_in_node(self, node: int) -> list[int]:
        """A node's whole free GPUs, in order."""
        first = int(self.cluster.node_first_gpu[node])
        shares = self.free_share[first:first + int(self.cluster.node_num_gpus[node])].tolist()
        return [first + k for k, s in enumerate(shares) if s >= 1.0 - EPS]

    def usable_nodes(self, spec: JobSpec) -> np.ndarray:
        """The nodes whose GPUs have memory enough for `spec` and that its constraints allow (read-only)."""
        return self._usable_nodes(spec)[0]

    def _usable_nodes(self, spec: JobSpec) -> tuple[np.ndarray, bool]:
        """`usable_nodes`, and whether it is every node."""
        mem = self.view.mem_need(spec)
        key = (mem, spec.constraints)
        found = self._usable.get(key)
        if found is None:
            ok = self._node_mem >= mem - EPS
            if spec.constraints is not None:
                ok &= eligible_nodes(self.cluster, spec.constraints)
            ok.flags.writeable = False
            found = self._usable[key] = (ok, bool(ok.all()))
        return found

    def _usable_free(self, spec: JobSpec) -> np.ndarray:
        """Whole free GPUs per node, 0 on the nodes `spec` cannot use (`usable_nodes`): the plan's own array where it
        may use every node, which its caller reads but never writes."""
        usable, everywhere = self._usable_nodes(spec)
        return self.node_free if everywhere else np.where(usable, self.node_free, 0)

    def consolidated(self, spec: JobSpec, fit: str = "best") -> Placement | None:
        """Whole GPUs on as few nodes (and racks) as possible.

        `fit` picks among the nodes that can hold the whole gang: "first" the lowest-numbered, "best" the one with the
        fewest free GPUs (keeps large holes for large jobs), "worst" the emptiest.
        """
        w = spec.workers
        if self.free_whole < w:
            return None
        free = self._usable_free(spec)
        if free is self.node_free and (index := self.index) is not None:  # may use every node: ask the index
            found = index.first(w) if fit == "first" else index.best(w) if fit == "best" else index.worst(w)
            if found >= 0:
                return Placement(tuple(self.gpus_in_node(found, w)))
            return self._multi_node(spec, free, order_key=-free)
        single = np.flatnonzero(free >= w)
        if single.size:
            if fit == "first":
                node = int(single[0])
            elif fit == "best":
                node = int(single[np.argmin(free[single])])
            else:
                node = int(single[np.argmax(free[single])])
            return Placement(tuple(self.gpus_in_node(node, w)))
        return self._multi_node(spec, free, order_key=-free)

    def least_loaded(self, spec: JobSpec) -> Placement | None:
        """Whole GPUs on the nodes whose NICs carry the least traffic now (fewest nodes among those)."""
        w = spec.workers
        if self.free_whole < w:
            return None
        free = np.where(self.usable_nodes(spec), self.node_free, 0)
        nic_load = np.asarray(self.view.link_load)[self.cluster.node_nic]
        single = np.flatnonzero(free >= w)
        if single.size:
            node = int(single[np.lexsort((free[single], nic_load[single]))[0]])
            return Placement(tuple(self.gpus_in_node(node, w)))
        return self._multi_node(spec, free, order_key=nic_load * 1000.0 - free)

    def _multi_node(self, spec: JobSpec, free: np.ndarray, order_key: np.ndarray) -> Placement | None:
        """Take nodes in `order_key` order until the gang fits, inside the best-fitting rack when one can hold it."""
        w = spec.workers
        c = self.cluster
        if free is self.node_free and (index := self.index) is not None:
            fitting_racks = np.flatnonzero(index.rack_free >= w)
            if fitting_racks.size:  # the best-fitting rack's nodes, as below, without a pass over every node
                rack = fitting_racks[np.argmin(index.rack_free[fitting_racks])]
                nodes = index.rack_nodes(int(rack))
                nodes = nodes[free[nodes] > 0]
                return self._take_nodes(nodes[np.argsort(order_key[nodes], kind="stable")], free, w)
        nodes = np.flatnonzero(free > 0)
        if int(free[nodes].sum()) < w:
            self._record_misfit(spec)
            return None
        rack_free = np.bincount(c.node_rack[nodes], weights=free[nodes], minlength=c.num_racks)
        fitting_racks = np.flatnonzero(rack_free >= w)
        if fitting_racks.size:
            rack = fitting_racks[np.argmin(rack_free[fitting_racks])]
            nodes = nodes[c.node_rack[nodes] == rack]
        return self._take_nodes(nodes[np.argsort(order_key[nodes], kind="stable")], free, w)

    def _take_nodes(self, nodes: np.ndarray, free: np.ndarray, w: int) -> Placement | None:
        """`free[node]` GPUs of each of `nodes` in turn until `w` are taken (None if they hold fewer)."""
        gpus: list[int] = []
        for node in nodes.tolist():
            take = min(int(free[node]), w - len(gpus))
            gpus.extend(self.gpus_in_node(node, take))
            if len(gpus) == w:
                return Placement(tuple(gpus))
        return None

    def topology_fit(self, spec: JobSpec) -> Placement | None:
        """A gang in as few racks, pods and nodes as it fits, rail-aligned (`placement_topology.topology_fit`)."""
        return placement_topology.topology_fit(self, spec)

    def whole_servers_fit(self, spec: JobSpec) -> Placement | None:
        """A gang on the fewest servers (`placement_topology.whole_servers_fit`)."""
        return placement_topology.whole_servers_fit(self, spec)

    def spread(self, spec: JobSpec, rng: np.random.Generator) -> Placement | None:
        """Whole GPUs picked at random among the free ones (the `random` baseline)."""
        w = spec.workers
        if self.free_whole < w:
            return None
        usable, everywhere = self._usable_nodes(spec)  # (a node's GPUs are of one type: its memory is theirs)
        ok = self.free_share >= 1.0 - EPS
        if not everywhere:
            ok &= usable[self.cluster.gpu_node]
        free = np.flatnonzero(ok)
        if free.size < w:
            return None
        return Placement(tuple(sorted(rng.choice(free, size=w, replace=False).tolist())))

    # ---- fractional jobs -------------------------------------------------------------------------------------------

    def share_ok(self, spec: JobSpec) -> np.ndarray:
        """Per GPU, whether CUDA MPS can run `spec`'s share there as the plan stands (`colocation.share_mask`: the
        memory cap, the one-user rule), whatever the free capacity."""
        c = self.cluster
        return share_mask(c.gpu_mem, c.gpu_node, self.view.mem_need(spec), spec.share, spec.user, self.mps,
                          fits=self.cap_ok(spec))

    def _share_candidates(self, spec: JobSpec) -> np.ndarray:
        """The GPUs a share of `spec` fits on now: free share and memory, and what CUDA MPS allows there (its memory
        cap, the one-user rule: `scheduler.core.colocation`, the rule the cluster state checks)."""
        mem = self.view.mem_need(spec)
        ok = (self.free_share >= spec.share - EPS) & (self.cluster.gpu_mem - self.used_mem >= mem - EPS)
        ok &= self.share_ok(spec)
        if spec.constraints is not None:
            ok &= eligible_gpus(self.cluster, spec.constraints)
        found = np.flatnonzero(ok)
        if not found.size:
            self._record_misfit(spec)
        return found

    def packed_share(self, spec: JobSpec) -> Placement | None:
        """A fractional job on the GPU with the least free share that still fits it (best fit: packing)."""
        if (found := placement_shares.packed_gpu(self, spec)) is not None:
            return Placement((found,), spec.share)
        cands = self._share_candidates(spec)
        if not cands.size:
            return None
        g = int(cands[np.argmin(self.free_share[cands])])
        return Placement((g,), spec.share)

    def empty_gpu_share(self, spec: JobSpec) -> Placement | None:
        """A fractional job alone on a free GPU, in the node with the fewest free GPUs (keeps whole nodes free)."""
        if (found := placement_shares.empty_gpu(self, spec)) is not None:
            return Placement((found,), spec.share) if found >= 0 else None
        cands = self._share_candidates(spec)
        cands = cands[self.free_share[cands] >= 1.0 - EPS]
        if not cands.size:
            return None
        nodes = self.cluster.gpu_node[cands]
        g = int(cands[np.argmin(self.node_free[nodes])])
        return Placement((g,), spec.share)

    def shared_gpus(self, spec: JobSpec, limit: int = 8) -> list[Placement]:
        """Up to `limit` partly used GPUs that fit the job, the ones with most free share first."""
        cands = self._share_candidates(spec)
        cands = cands[self.free_share[cands] < 1.0 - EPS]
        if cands.size > limit:
            cands = cands[np.argsort(-self.free_share[cands], kind="stable")[:limit]]
        return [Placement((int(g),), spec.share) for g in cands]

    def first_share(self, spec: JobSpec) -> Placement | None:
        cands = self._share_candidates(spec)
        return Placement((int(cands[0]),), spec.share) if cands.size else None

    def random_share(self, spec: JobSpec, rng: np.random.Generator) -> Placement | None:
        cands = self._share_candidates(spec)
        if not cands.size:
            return None
        return Placement((int(rng.choice(cands)),), spec.share)

    # ---- the generic entry points ----------------------------------------------------------------------------------

    def best_fit(self, spec: JobSpec) -> Placement | None:
        """The consolidated, packing placement of Slurm-like topology best fit."""
        if spec.num_gpus < 1:
            return self.packed_share(spec)
        return self.consolidated(spec, "best")

    def first_fit(self, spec: JobSpec) -> Placement | None:
        """Fewest nodes, lowest-numbered first: the plain consolidated placement of FIFO schedulers."""
        if spec.num_gpus < 1:
            return self.first_share(spec)
        return self.consolidated(spec, "first")

    def candidates(self, spec: JobSpec) -> list[Placement]:
        """Distinct placements worth comparing for a job (for contention-aware and learned policies).

        The searches read the plan and, of the job, only its GPUs, workers, share and memory: jobs alike in those get
        the same placements from the same plan, so they are searched once per plan. (A search that finds nothing
        also notes the misfit for `may_fit`; a repeat would note the same.)"""
        key = fit_key(self.view, spec)  # (the plan's MPS users are the view's, copied: the same `one_user`)
        found = self._candidates.get(key)
        if found is None:
            found = self._candidates[key] = self._search_candidates(spec)
        return list(found)

    def has_room(self, spec: JobSpec) -> bool:
        """Whether `candidates(spec)` finds any placement, without searching for them, noting the misfit its searches
        would note where it finds none (`may_fit` then refuses alike). A whole-GPU gang is placed by `consolidated`
        exactly when the nodes with memory enough (and that its constraints allow) hold as many whole free GPUs as it
        has workers, and its other searches need the same; a share, where some GPU takes it (`_share_candidates`)."""
        found = self._candidates.get(fit_key(self.view, spec))
        if found is not None:
            return bool(found)
        if spec.num_gpus < 1:
            return bool(self._share_candidates(spec).size)
        w = spec.workers
        if self.free_whole < w:
            return False
        if int(self.node_free[self.usable_nodes(spec)].sum()) >= w:
            return True
        self._record_misfit(spec)
        return False

    def _search_candidates(self, spec: JobSpec) -> list[Placement]:
        if spec.num_gpus < 1:
            found = [self.packed_share(spec), self.empty_gpu_share(spec), *self.shared_gpus(spec)]
        elif spec.workers == 1:
            found = [self.consolidated(spec, "best")]
        else:
            found = [self.consolidated(spec, "best"), self.consolidated(spec, "worst"), self.least_loaded(spec)]
            if self.cluster.fabric is not None:  # tiers above the racks: the placement that spans fewest of them
                found.append(self.topology_fit(spec))
        unique: dict[tuple[int, ...], Placement] = {}
        for p in found:
            if p is not None and p.gpus not in unique:
                unique[p.gpus] = p
        return list(unique.values())

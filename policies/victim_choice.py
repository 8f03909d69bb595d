"""Which running jobs a start of one job preempts, by the rule of `scheduler.core.victims`, counted in room on this
cluster: Tiresias' `pick_victims`, which Gittins and the learned policy's preemption slots call too.

The rule is the core's (the first victims in the policy's order that make room, unless they free GPUs nobody would
take where fewer would do); what this module adds is the room model it counts in (`_room_model`: per node for a gang
that fits on one, per cluster for a larger one, per GPU for a share) and the offers it reads lazily (`_Gains`,
`_bounded_offers`), so that a search over a deep cluster reads only the victims it weighs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping

import numpy as np

from policies.placement import Planner
from policies.victim_floors import RoomFloors, share_freed
from scheduler.core.constraints import eligible_gpus
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.state import EPS, ClusterView
from scheduler.core.victims import EPS as VICTIM_EPS
from scheduler.core.victims import Bound, Needs, Offer, PendingDemands, choose_victims, fewest_victims, queue_demands


def pick_victims(view: ClusterView, planner: Planner, spec: JobSpec, victims: Iterable[Job],
                 others: Iterable[Job] | PendingDemands = (),
                 fits: Callable[[list[Job]], bool] | None = None, bound: Bound | None = None,
                 covers: Callable[[], np.ndarray] | None = None) -> list[Job]:
    """Which of `victims` (the policy's order of preference, lowest priority first) to preempt so that `spec` fits,
    by the rule of `scheduler.core.victims`: the first ones in order that make room, unless they free more than the
    job lacks where it would start (a 16-GPU job for a 2-GPU one) and the `others` pending (read only then; `spec`'s
    own job among them, which is not counted) would not take the surplus; then the set that frees the fewest GPUs.
    Room is counted on each node that can hold the whole gang when one can (so no GPUs are freed where they cannot
    help), else over the cluster; for a GPU share, on each GPU. Every set returned fits (`Planner.best_fit`); empty if
    none does; `fits` replaces that test where the job may start only on some placements (`policies.compactness`);
    `bound` follows the search for the source of `victims` (`scheduler.core.victims.Bound`), with `covers` (the floors
    of `policies.victim_floors.CoverFloors`, for these victims) for its floor. `victims` is read as far as the core's
    rule reads its offers (a source that tidies itself as it is read, Tiresias' index, is left as the rule leaves it)."""
    lacking, gains = _room_model(view, planner, spec)
    if not lacking:
        return []
    pending = others if isinstance(others, PendingDemands) else queue_demands(others)
    takers = pending.takers(spec.gpu_demand)
    rest = iter(victims)
    read: list[Job] = []
    first: tuple[list[Job], int] | None
    if spec.num_gpus >= 1 and isinstance(lacking, Needs):
        fits = fits or planner.fit_test(spec)
        first = _first_on_nodes(view, planner.free_share, rest, lacking, gains, fits, read)
    elif spec.num_gpus >= 1 and fits is None:  # the cluster bucket, counted as `Planner.fit_test` counts
        first = _first_in_cluster(view, planner, spec, rest, lacking[_CLUSTER], gains, read)
        fits = planner.fit_test(spec)
    else:  # GPU buckets (a share), or the caller's own test: the core's rule on offers
        fits = fits or planner.fit_test(spec)
        return choose_victims(_offers(view, planner, spec, rest, gains, lacking, bound, covers), lacking, fits,
                              takers, bound)
    if first is None:
        return []
    chosen, node = first
    placement = view.placement

    def offers() -> Iterator[Offer[Job, int]]:  # step 2's: those step 1 read, then the rest
        seen = [Offer(v, gains(placement(v.id)), v.spec.gpu_demand) for v in read]
        return itertools.chain(seen, _offers(view, planner, spec, rest, gains, lacking, bound, covers))

    return fewest_victims([Offer(v, gains(placement(v.id)), v.spec.gpu_demand) for v in chosen], node, offers,
                          lacking, fits, takers, bound)


def _offers(view: ClusterView, planner: Planner, spec: JobSpec, victims: Iterable[Job],
            gains: Callable[[Placement], dict[int, float]], lacking: Mapping[int, float], bound: Bound | None,
            covers: Callable[[], np.ndarray] | None) -> Iterator[Offer[Job, int]]:
    """The offers of `victims`, read lazily: their gains computed when first read (`_Gains`), or, with a bound, less
    the victims step 2 would weigh in vain (`_bounded_offers`)."""
    if bound is None:
        return (Offer(v, _Gains(gains, view.placement(v.id)), v.spec.gpu_demand) for v in victims)
    return _bounded_offers(view, victims, gains, bound, RoomFloors(view, planner, spec, lacking, covers, bound))


def _first_on_nodes(view: ClusterView, free_share: np.ndarray, victims: Iterator[Job], lacking: Needs,
                    gains: Callable[[Placement], dict[int, float]], fits: Callable[[list[Job]], bool],
                    read: list[Job]) -> tuple[list[Job], int] | None:
    """`scheduler.core.victims.first_victims` over node buckets, on the victims themselves: the first ones in order
    whose gains on one node cover what the job lacks there and that `fits` accepts, with that node; None if none do.
    The same sums in the same order, bit for bit (`tests/test_victims_fast.py`), without an offer per victim read: a
    deep cluster's search reads a hundred victims before the first that covers, and building their offers (a gains
    mapping each, read through three generators) was most of Tiresias' time on a million jobs. Each victim read is
    appended to `read` (step 2 weighs them again), and `victims` is read no further than the victim returned."""
    needs = lacking.listed()
    node_of = view.cluster.gpu_node_list
    placements = view.placements
    got: dict[int, float] = {}
    taken: dict[int, list[Job]] = {}
    for v in victims:
        read.append(v)
        p = placements[v.id]
        gpus = p.gpus
        if len(gpus) == 1:  # (`node_gains`' one-GPU case: one node, the GPU's fraction)
            g = gpus[0]
            items: Iterable[tuple[int, float]] = ((node_of[g], share_freed(p.share, float(free_share[g]))),)
        else:
            items = gains(p).items()
        for node, gain in items:
            need = needs[node]
            if need != need or gain <= 0.0:  # (nan: not a bucket)
                continue
            total = got[node] = got.get(node, 0.0) + gain
            chosen = taken.get(node)
            if chosen is None:
                chosen = taken[node] = []
            chosen.append(v)
            if total >= need - VICTIM_EPS and fits(list(chosen)):
                return chosen, node
    return None


def _bounded_offers(view: ClusterView, victims: Iterable[Job], gains: Callable[[Placement], dict[int, float]],
                    bound: Bound, floors: RoomFloors) -> Iterator[Offer[Job, int]]:
    """`pick_victims`' offers, less those step 2 would weigh in vain: once it has a bound (`Bound`), a victim whose
    every GPU lies in a bucket where no cover frees fewer GPUs than the bound (`RoomFloors`) is passed over. Their
    gains are computed at once: step 1 reads every offer's, and step 2 every offer of `victims` it is given (its
    source leaves out, by `Bound`, those it would pass over unread), so nothing is computed that `_Gains` spares."""
    placement = view.placement
    for v in victims:
        p = placement(v.id)
        freed = v.spec.gpu_demand
        if bound.value < math.inf and floors.passes_over(p, freed, bound.value):
            continue
        yield Offer(v, gains(p), freed)


def _first_in_cluster(view: ClusterView, planner: Planner, spec: JobSpec, victims: Iterator[Job], need: float,
                      gains: Callable[[Placement], dict[int, float]],
                      read: list[Job]) -> tuple[list[Job], int] | None:
    """`_first_on_nodes` for a gang larger than a node (one bucket, the cluster), with the plan's own test
    (`Planner.fit_test`) counted as the victims come: each time their gains cover the need, that test asks whether
    they leave as many whole GPUs free (on nodes with memory enough) as the job lacks, and where shares over-count
    it refuses prefix after prefix, each read whole (a search read ~50 of ~90 victims so). The count here adds each
    victim's shares to its GPUs' free shares in the test's order, the same floats, once: a GPU once wholly free stays
    so as victims are added."""
    eligible = planner.usable_nodes(spec)
    lacks = spec.workers - int(planner.node_free[eligible].sum())  # (the test's need: whole GPUs)
    free_share, gpu_node, placement = planner.free_share, view.cluster.gpu_node, view.placement
    after: dict[int, float] = {}  # per GPU the taken victims hold, its free share plus theirs
    wholly = 0  # GPUs they leave wholly free, not free before, on nodes with memory enough
    got = 0.0
    taken: list[Job] = []
    for v in victims:
        read.append(v)
        p = placement(v.id)
        gain = gains(p)[_CLUSTER]
        if gain <= 0.0:
            continue
        got += gain  # (the first: 0.0 + gain, as `first_victims` adds)
        taken.append(v)
        share = p.share
        for g in p.gpus:
            before = after.get(g)
            now = after[g] = (float(free_share[g]) if before is None else before) + share
            if now >= 1.0 - EPS and (before is None or before < 1.0 - EPS) and free_share[g] < 1.0 - EPS \
                    and eligible[gpu_node[g]]:
                wholly += 1
        if got >= need - VICTIM_EPS and (lacks <= 0 or wholly >= lacks):
            return taken, _CLUSTER
    return None


class _Gains(Mapping[int, float]):
    """A victim's gains (`_room_model`), computed when first read: the victim search reads them only of the victims
    it weighs, and passes over (unread) every one that alone frees as much as the best set found. Nothing they read
    changes while the search runs (`Planner.fit_test` leaves the plan as it is), so they are the gains computed
    eagerly, bit for bit."""

    __slots__ = ("_gains", "_of", "_placement")

    def __init__(self, of: Callable[[Placement], dict[int, float]], placement: Placement) -> None:
        self._of, self._placement = of, placement
        self._gains: dict[int, float] | None = None

    def _read(self) -> dict[int, float]:
        if self._gains is None:
            self._gains = self._of(self._placement)
        return self._gains

    def __getitem__(self, key: int) -> float:
        return self._read()[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def items(self) -> ItemsView[int, float]:
        return self._read().items()


def _room_model(
    view: ClusterView, planner: Planner, spec: JobSpec
) -> tuple[Mapping[int, float], Callable[[Placement], dict[int, float]]]:
    """What `spec` lacks in each bucket (only buckets that could hold it), and what a victim's placement gains each.

    Whole GPUs: a node (or, for a gang larger than any node, the cluster, bucket -1) gains from each GPU of the victim
    the share of that GPU's tenants the victim is: 1 where it is the last, 1/2 where it is one of two halves. That
    never under-counts whole GPUs freed (two victims sharing a GPU free it together); `Planner.fit_test` has the last
    word."""
    cluster = view.cluster
    mem = view.mem_need(spec)
    if spec.num_gpus < 1:  # a GPU share: on one GPU with enough memory (a victim frees memory too: lacking > 0)
        tenanted = (planner.free_share < 1.0 - EPS) & (cluster.gpu_mem >= mem - EPS) & planner.cap_ok(spec)
        if spec.constraints is not None:  # victims only help on GPUs its constraints allow
            tenanted &= eligible_gpus(cluster, spec.constraints)
        gpus = np.flatnonzero(tenanted)
        need = np.maximum(spec.share - planner.free_share[gpus], 2 * _CAPACITY_EPS)
        return Needs(gpus, need, len(tenanted)), lambda p: {g: p.share for g in p.gpus}
    free_share, gpu_node = planner.free_share, cluster.gpu_node
    eligible = planner.usable_nodes(spec)  # memory enough, and allowed by its constraints
    workers = spec.workers

    def fraction(p: Placement, g: int) -> float:
        return share_freed(p.share, float(free_share[g]))

    if workers <= cluster.max_gpus_per_node:
        nodes = np.flatnonzero(eligible & (cluster.node_num_gpus >= workers) & (planner.node_free < workers))
        need = workers - planner.node_free[nodes]

        node_of = cluster.gpu_node_list

        def node_gains(p: Placement) -> dict[int, float]:
            gpus, share = p.gpus, p.share
            if len(gpus) == 1:  # (0.0 + its fraction is its fraction: the loop's dict)
                g = gpus[0]
                return {node_of[g]: share_freed(share, float(free_share[g]))}
            out: dict[int, float] = {}
            for g in gpus:  # (a list's nodes, not the array's: a deep search reads a hundred victims' GPUs)
                node = node_of[g]
                out[node] = out.get(node, 0.0) + share_freed(share, float(free_share[g]))
            return out if len(out) == 1 else dict(sorted(out.items()))

        return Needs(nodes, need, len(eligible)), node_gains
    have = float(planner.node_free[eligible].sum())
    eligible_gpu = eligible[gpu_node]
    used_all = 1.0 - free_share  # per GPU, as `fraction` computes it

    def cluster_gains(p: Placement) -> dict[int, float]:
        if len(p.gpus) < _VECTOR_GPUS:
            return {_CLUSTER: sum(fraction(p, g) for g in p.gpus if eligible[gpu_node[g]])}
        # A large gang: `fraction` per GPU over arrays (the same float operations), summed in the same order.
        gpus = np.asarray(p.gpus)
        gpus = gpus[eligible_gpu[gpus]]
        used = used_all[gpus]
        whole = used <= p.share + EPS
        part = np.divide(p.share, used, out=np.ones_like(used), where=~whole)
        return {_CLUSTER: sum(part.tolist())}

    return ({_CLUSTER: workers - have} if workers > have else {}), cluster_gains


_CAPACITY_EPS = 1e-6
_VECTOR_GPUS = 32  # from this many GPUs a victim's gains are computed over arrays
_CLUSTER = -1  # the bucket of a gang larger than any node: the whole cluster

"""Which running jobs a preemption takes: the one rule every preempting path follows (policies and the tenancy frame).

A preempting path offers victims in its own order of preference (Tiresias: lowest priority, then latest arrival,
first; the tenancy frame's reclaim: the team furthest over its fair share, youngest first). The rule:

1. Take the first victims in that order that make room for the starting job, minus any victim the others make room
   without (largest first).
2. If they free more than the job lacks where it would start, and the other pending jobs would not take the
   surplus (`takers`), take instead, among all the offered victims, the set that frees the fewest GPUs and still
   makes room (of equal sets, the one the order reaches first). So a 2-GPU job never preempts a 16-GPU job (14 GPUs
   then idle for nobody) while a 2-GPU job or two 1-GPU jobs would make room.

Why the surplus counts as used when other pending jobs would take it: a scheduling pass places them on it at once.
Without that exception, sparing the 16-GPU job cost a small job's preemption for each pending one instead of one
preemption for all of them, and the spared job, the lowest priority, was preempted soon after anyway: on held-out
synthetic-long windows at loads 1.3 and 1.7, Tiresias made 2.4 times the preemptions (6 windows) and had 10% more
average JCT (`benchmarks/decision_quality.py`).

Room is counted per *bucket*, which the caller defines with what the starting job lacks in each (`lacking`): a node
for a gang that fits on one node (its workers minus the node's free GPUs), the cluster for a larger gang, a GPU for a
GPU share. Each victim is an `Offer`: what it gains each bucket (GPUs of that node it frees, or GPU share) and what it
frees in all (its GPU demand, the cost of preempting it). A 16-GPU job over two nodes gains each 8 and frees 16.

Gains add up: a caller may count them so that the sum over-counts room (a relaxation, e.g. half of a GPU shared by two
victims), never under-counts it, and pass `fits`, its exact test that the job fits once a set of victims leaves; a set
`fits` refuses is never returned. Step 2 is an exact least-cost cover per bucket (a Pareto frontier of gain and cost),
run only when step 1 wastes GPUs and pruned by what step 1 frees, so the common case costs what taking victims in
order did.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np

from scheduler.core.book import Queued

if TYPE_CHECKING:
    from scheduler.core.model import Job

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
EPS = 1e-6  # GPUs: float sums of shares (6.999999999999998 for 7) must count as enough
MAX_FRONTIER = 64  # (gain, cost) pairs kept per bucket in step 2: a bound on its cost where shares make many sums

Fits = Callable[[list[T]], bool]
# Whether the other pending jobs would take the `surplus` GPUs freed beyond what the starting job lacks.
Takers = Callable[[float], bool]


class Needs(Mapping[int, float]):
    """What a job lacks in each of many buckets numbered from 0 (a datacentre's nodes, or its GPUs), kept as arrays:
    a search reads the buckets of the victims it weighs, a few hundred of thousands, so only those become Python
    floats (a dict of them all was most of a search's set-up on 1,024 nodes, and its garbage)."""

    __slots__ = ("_by", "_listed", "buckets", "needs")

    def __init__(self, buckets: np.ndarray, needs: np.ndarray, size: int) -> None:
        self.buckets = buckets  # ascending
        self.needs = needs.astype(np.float64)  # what each lacks
        self._by = np.full(size, np.nan)  # per bucket number, its need (nan: not a bucket)
        self._by[buckets] = self.needs
        self._listed: list[float] | None = None

    def listed(self) -> list[float]:
        """Per bucket number, its need as `get` returns it, nan where it is not a bucket: for a loop that asks it of
        each victim it reads (one list read, not a call and an array read)."""
        if self._listed is None:
            self._listed = self._by.tolist()
        return self._listed

    def get(self, bucket: int, default: float | None = None) -> float | None:  # type: ignore[override]
        if 0 <= bucket < len(self._by):
            need = self._by[bucket]
            if need == need:  # (not nan)
                return float(need)
        return default

    def __getitem__(self, bucket: int) -> float:
        need = self.get(bucket)
        if need is None:
            raise KeyError(bucket)
        return need

    def __len__(self) -> int:
        return len(self.buckets)

    def __iter__(self) -> Iterator[int]:
        return iter(self.buckets.tolist())


@dataclass(frozen=True, slots=True)
class Offer(Generic[T, K]):
    """A running job that may be preempted: `gains` toward each bucket's room, `freed` GPUs in all."""

    victim: T
    gains: Mapping[K, float]
    freed: float


class Bound:
    """The GPUs the cheapest set step 2 has found so far frees (inf: step 2 has not started), for a caller whose offers
    come from an index: past this point an offer that alone frees as much (`skips`) is one step 2 passes over
    unread, so the index may leave it out rather than build it. Step 1 reads every offer (the bound is inf then), and
    the bound only falls, so an offer skipped once is skipped for the rest of the search.

    `floor`, if the caller knows one (-inf: none), is what every set that makes room frees at least (within float
    sums, which it allows for): once the bound is down to it, step 2 can find nothing cheaper and every offer is
    skipped, for the rest of the search too (the floor is set once, the bound only falls)."""

    __slots__ = ("floor", "value")

    def __init__(self) -> None:
        self.value = math.inf
        self.floor = -math.inf

    def skips(self, freed: float) -> bool:
        # `_cheapest`'s own test on the same numbers, or no set at all could pass it
        return freed >= self.value - EPS or self.floor >= self.value - EPS


def choose_victims(offers: Iterable[Offer[T, K]], lacking: Mapping[K, float], fits: Fits[T] | None = None,
                   takers: Takers | None = None, bound: Bound | None = None) -> list[T]:
    """The victims to preempt (in the offers' order) by the module's rule; empty if no set makes room. `offers` is
    read lazily, and past the first victims that make room only when those waste GPUs. `bound`, if given, follows
    step 2's bound while it reads `offers` (see `Bound`)."""
    seen: list[Offer[T, K]] = []
    rest = iter(offers)
    first = first_victims(_noting(rest, seen), lacking, fits)
    if first is None:
        return []
    chosen, bucket = first
    return fewest_victims(chosen, bucket, itertools.chain(seen, rest), lacking, fits, takers, bound)


def first_victims(offers: Iterable[Offer[T, K]], lacking: Mapping[K, float],
                  fits: Fits[T] | None = None) -> tuple[list[Offer[T, K]], K] | None:
    """Step 1's set before trimming: the first offers, in order, whose gains in one bucket cover what the job lacks
    there (and that `fits` accepts), with that bucket; None if no prefix does."""
    got: dict[K, float] = {}
    taken: dict[K, list[Offer[T, K]]] = {}
    for offer in offers:
        for bucket, gain in offer.gains.items():
            need = lacking.get(bucket)
            if need is None or gain <= 0.0:
                continue
            got[bucket] = got.get(bucket, 0.0) + gain
            taken.setdefault(bucket, []).append(offer)
            if got[bucket] >= need - EPS and (fits is None or fits(_victims(taken[bucket]))):
                return taken[bucket], bucket
    return None


def fewest_victims(first: Sequence[Offer[T, K]], bucket: K,
                   offers: Iterable[Offer[T, K]] | Callable[[], Iterable[Offer[T, K]]],
                   lacking: Mapping[K, float], fits: Fits[T] | None = None,
                   takers: Takers | None = None, bound: Bound | None = None) -> list[T]:
    """Steps 1 and 2 from `first_victims`' set: trimmed, and replaced by the cheapest set among `offers` (which may
    repeat `first`) if it frees more than the job lacks in its bucket and `takers` would not take the surplus.
    `bound`: step 2's bound, kept up to date for the source of `offers` (`Bound`). `offers` may be a callable that
    returns them, called only if step 2 runs, before the bound is set (a caller that builds the offers step 1 read
    only for step 2)."""
    chosen = _trim(first, bucket, lacking[bucket], fits)
    cost = _freed(chosen)
    surplus = cost - lacking[bucket]
    if surplus <= EPS or (takers is not None and takers(surplus)):
        return _victims(chosen)
    if callable(offers):
        offers = offers()
    cheaper = _cheapest(offers, lacking, cost, fits, bound)
    return _victims(chosen if cheaper is None else cheaper)


class PendingDemands:
    """The pending jobs' GPU demands (positive), counted per demand: `takers` for each starting job. A pass weighs
    preemptions for many jobs against one queue; the book keeps the counts as jobs come and go (`Queued.demands`),
    so a pass over its queue reads no job for them, and any other queue is read once, on the first question."""

    def __init__(self, demands: Callable[[], Iterable[float] | np.ndarray] | None = None,
                 counts: Mapping[float, int] | None = None) -> None:
        self._demands = demands  # called on the first question, where no `counts` are given
        self._given = counts  # copied on the first question (the book's change as jobs come and go)
        self._counts: dict[float, int] = {}
        self._values: list[float] | None = None  # the distinct demands, ascending (None: not asked yet)

    def takers(self, own: float | None = None) -> Takers:
        """`Takers` of the pending jobs but the starting one, whose demand is `own` (None: it is not pending): they
        take the surplus if those no larger than it, all of them, add up to it (whether they pack into it is left to
        the pass that places them), summed smallest first. The sum stops once it gets there: sums of positive floats
        only grow, so the whole sum would get there too."""

        def take(surplus: float) -> bool:
            if self._values is None:
                given = self._given
                self._counts = dict(given) if given is not None else \
                    _counted(self._demands() if self._demands is not None else ())
                self._values = sorted(self._counts)
            counts, need, most, total = self._counts, surplus - EPS, surplus + EPS, 0.0
            for d in self._values:
                if d > most:
                    break
                for _ in range(counts[d] - (d == own)):  # (one copy of `own` left out: the starting job's)
                    total += d
                    if total >= need:
                        return True
            return total >= need

        return take


def _counted(demands: Iterable[float] | np.ndarray) -> dict[float, int]:
    """How many of `demands` are each value: an array's by sorting it (a deep queue's 1,500 demands counted as Python
    floats were ~120 us of a decision, sorted 20)."""
    if isinstance(demands, np.ndarray):
        values, counts = np.unique(demands, return_counts=True)
        return dict(zip(values.tolist(), counts.tolist(), strict=True))
    return Counter(demands)


def queue_demands(queue: Iterable[Job]) -> PendingDemands:
    """The pending jobs' demands: the book's counts where `queue` is its queue, else read on the first question."""
    counts = queue.demands if isinstance(queue, Queued) else None
    if counts is not None:
        return PendingDemands(counts=counts)
    return PendingDemands(lambda: (j.spec.gpu_demand for j in queue))


def _noting(offers: Iterator[Offer[T, K]], seen: list[Offer[T, K]]) -> Iterator[Offer[T, K]]:
    for offer in offers:
        seen.append(offer)
        yield offer


def _victims(offers: Iterable[Offer[T, K]]) -> list[T]:
    return [o.victim for o in offers]


def _freed(offers: Iterable[Offer[T, K]]) -> float:
    return sum(o.freed for o in offers)


def _trim(chosen: Sequence[Offer[T, K]], bucket: K, need: float, fits: Fits[T] | None) -> list[Offer[T, K]]:
    """`chosen` minus every victim the others make room without: the largest first, and of equal ones the last in
    the policy's order (the first are the ones it most wants to preempt)."""
    kept = list(chosen)
    for _i, offer in sorted(enumerate(chosen), key=lambda io: (-io[1].freed, -io[0])):
        if len(kept) == 1:
            break
        rest = [o for o in kept if o is not offer]
        if sum(o.gains[bucket] for o in rest) >= need - EPS and (fits is None or fits(_victims(rest))):
            kept = rest
    return kept


# One candidate set, as a linked list of its offers (last added first): extending a set costs O(1).
_Chain = tuple[Offer[T, K], "_Chain[T, K]"] | None
# A frontier's entry: (minus the gain so far, GPUs freed, the set). The gain is kept negated so that the frontier's
# order (most gain first, then least cost) is the entries' own first two fields, sorted by C's comparisons.
_Entry = tuple[float, float, _Chain[T, K]]
_MOST_GAIN_LEAST_COST = operator.itemgetter(0, 1)


def _cheapest(offers: Iterable[Offer[T, K]], lacking: Mapping[K, float], bound: float,
              fits: Fits[T] | None, cell: Bound | None = None) -> list[Offer[T, K]] | None:
    """The set of offers that covers some bucket's need (and that `fits` accepts) while freeing the fewest GPUs, if it
    frees fewer than `bound`; None otherwise. Per bucket, a Pareto frontier of (gain so far, GPUs freed, set),
    widened by each offer in turn (0/1 knapsack cover): exact up to `MAX_FRONTIER` pairs per bucket. `cell` follows
    the bound (set before the first offer is read, and as it falls)."""
    if cell is not None:
        cell.value = bound
    fronts: dict[K, list[_Entry[T, K]]] = {}
    best: list[Offer[T, K]] | None = None
    # Offers (what they free, what they gain each bucket) that changed nothing since anything last changed: the
    # frontiers and the bound are all an offer's effect depends on (its own sets stay only if they change something),
    # so an offer alike to one of them changes nothing either and is passed over. Many running jobs are alike (a
    # deep cluster of 1-GPU jobs), and once the frontiers hold what they can build, the rest were most of the search.
    inert: set[tuple[float, tuple[tuple[K, float], ...]]] = set()
    for offer in offers:
        freed = offer.freed
        if freed >= bound - EPS:  # alone it frees as much as the best set: no set holding it is cheaper
            continue
        gains = tuple(offer.gains.items())
        if (freed, gains) in inert:
            continue
        changed = False
        for bucket, gain in gains:
            need = lacking.get(bucket)
            if need is None or gain <= 0.0:
                continue
            front = fronts.get(bucket) or [(-0.0, 0.0, None)]
            grown = _grown(front, offer, freed, gain, need, bound - EPS)
            # Nothing grown, the frontier would come out as it is (it is its own Pareto frontier): not sorted again.
            if grown:
                merged = _pareto(front + grown)
                # (No grown set kept: the frontier is the one it was, entry for entry.)
                changed = changed or len(merged) != len(front) or not all(map(operator.is_, merged, front))
                front = merged
            fronts[bucket] = front
            minus_top_gain, top_cost, top = front[0]
            if -minus_top_gain >= need - EPS and top_cost < bound - EPS:
                changed = True
                found = _unchain(top)
                if fits is None or fits(_victims(found)):
                    bound, best = top_cost, found
                    if cell is not None:
                        cell.value = bound
                else:  # out of the frontier, or it would keep out dearer sets that cover and may fit
                    del front[0]
        if changed:
            inert.clear()
        else:
            inert.add((freed, gains))
    return best


def _grown(front: list[_Entry[T, K]], offer: Offer[T, K], freed: float, gain: float, need: float,
           limit: float) -> list[_Entry[T, K]]:
    """The frontier's sets with `offer` added (it frees `freed`, gains `gain`), their gain capped at `need`, less those
    that free `limit` or more and those `_pareto` would drop at once: of the sets the cap brings to `need`, all but the
    cheapest. Along the frontier (most gain first) gains and costs fall, so the sets under `limit` are a suffix, and
    the capped ones a prefix of that."""
    start = bisect.bisect_left(front, True, key=lambda e: e[1] + freed < limit)
    # (the gain so far plus this offer's is `gain - minus_g`; negated, `minus_g - gain`, the same float)
    cut = bisect.bisect_left(front, True, lo=start, key=lambda e: e[0] - gain > -need)
    grown: list[_Entry[T, K]] = []
    if cut > start:  # capped: the last, the cheapest of them, stays (of equal gains `_pareto` keeps the cheapest)
        _, c, chain = front[cut - 1]
        grown.append((-need, c + freed, (offer, chain)))
    grown += [(minus_g - gain, c + freed, (offer, chain)) for minus_g, c, chain in front[cut:]]
    return grown


def _unchain(chain: _Chain[T, K]) -> list[Offer[T, K]]:
    out: list[Offer[T, K]] = []
    while chain is not None:
        offer, chain = chain
        out.append(offer)
    return out[::-1]


def _pareto(entries: list[_Entry[T, K]]) -> list[_Entry[T, K]]:
    """The entries no other beats (at least as much gain for less cost), most gain first. Of equal ones the earlier
    stays (the set the policy's order reached first). The empty set (no gain, no cost) always stays."""
    entries.sort(key=_MOST_GAIN_LEAST_COST)  # stable: earlier entries first among equals
    out = []
    cheapest = float("inf")
    for e in entries:
        if e[1] < cheapest - EPS:
            out.append(e)
            cheapest = e[1]
    if len(out) > MAX_FRONTIER:
        out = [*out[:MAX_FRONTIER - 1], out[-1]]
    return out

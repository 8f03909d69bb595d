"""Tiresias (NSDI'19): discretised two-dimensional least-attained-service with preemption.

A job's attained service is GPUs x time it has run. Jobs sit in priority queues by attained service (thresholds in
GPU-seconds); inside a queue, arrival order. A pending job may preempt running jobs only from strictly lower-priority
queues, lowest priority (then latest arrival) first, which is what keeps it from thrashing; but never a set that
frees GPUs neither the job nor the rest of the queue would take where a set freeing fewer would make room
(`pick_victims`, the rule of `scheduler.core.victims`: no 16-GPU job preempted for one 2-GPU job while a 2-GPU job
of a lower queue would do).
Placement is consolidated when possible (Tiresias consolidates communication-heavy jobs).

With `starvation_factor` set (off by default: under overload it turns LAS into round robin with a preemption per
quantum), a job that has waited that many times as long as it has run is promoted to the top queue and its attained
service counts from zero again, as in Tiresias' simulator, so it is not demoted and preempted straight back.

Running jobs are indexed by queue incrementally (a demotion heap, per-queue lists in arrival order), so a scheduling
call costs the queue's length plus the victims it actually examines, not the number of running jobs.

Options (`tiresias:KEY=VALUE,...`, parsed by `parse_options`): `thresholds=60,600,3600` sets the queue thresholds
(GPU-seconds, positive, strictly increasing; one queue more than thresholds), `starvation=F` the starvation factor.
E.g. `tiresias:thresholds=60,600,6000,starvation=8`. Plain `tiresias` keeps the defaults.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from typing import ClassVar

from policies.heuristics import wait_reason
from policies.placement import FitKey, Planner
from policies.queue_scan import NONE, Position, QueueIndex, whole_fit_key
from policies.registry import UnknownPolicyError, parse_options, register, register_prefix
from policies.victim_choice import pick_victims
from policies.victim_floors import CoverFloors
from scheduler.core.book import Queued
from scheduler.core.decisions import Decision, Place, Preempt, Wait, WakeAt
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.priorities import may_preempt
from scheduler.core.state import ClusterView
from scheduler.core.victims import Bound, PendingDemands, queue_demands

# Queue thresholds in GPU-seconds of attained service: one GPU-hour and ten GPU-hours.
DEFAULT_THRESHOLDS: tuple[float, ...] = (3600.0, 36000.0)


@register
class Tiresias:
    name: ClassVar[str] = "tiresias"
    oracle: ClassVar[bool] = False
    # Its least-attained-service preemption takes jobs of equal priority (`scheduler.core.priorities`, rule 2).
    time_sharing: ClassVar[bool] = True

    def __init__(
        self, seed: int = 0, thresholds: Sequence[float] = DEFAULT_THRESHOLDS, starvation_factor: float | None = None
    ) -> None:
        self.thresholds = sorted(thresholds)
        self.starvation_factor = starvation_factor
        self._discount: dict[int, float] = {}  # attained service forgiven at promotion, by job id
        self._indexed_view: ClusterView | None = None
        self._queue: PendingDemands = queue_demands(())  # the pending jobs' demands, of the current call
        self._queue_index: QueueIndex | None = None  # the book's queue by `_group` (`_indexed`)
        self._reset_index()

    def _reset_index(self) -> None:
        # Index of running jobs: queue level by id, per-level (submit, id) lists for levels >= 1 (only those can be
        # victims), and a heap of (time it crosses its next threshold, id, level it leaves).
        self._level: dict[int, int] = {}
        self._submit: dict[int, float] = {}
        self._demand: dict[int, float] = {}
        # Per level, one list per GPU demand: a victim search past its first victims (`Bound`) skips every demand
        # that frees too much at once, rather than pass over each such job (most of those running, on a busy cluster).
        self._by_level: list[dict[float, list[tuple[float, int]]]] = [{} for _ in range(len(self.thresholds) + 1)]
        # Per level, the demands whose lists may hold jobs that stopped running (an entry stays until a walk passes
        # it): what a walk the bound cut short tidies. Read from the view's `moves` up to `_moves`.
        self._stale: list[set[float]] = [set() for _ in self._by_level]
        self._moves = 0
        self._demote: list[tuple[float, int, int]] = []
        self._placed: list[int] = []
        # Victims this policy named (and took out of the index). The caller may not carry a preemption out (the
        # tenancy frame drops those that leave it; the live controller, stale ones): one still running is indexed
        # again, or it could never be a victim again.
        self._named: list[int] = []
        self._covers = CoverFloors()  # the victim search's floors per node, kept while the index tells them changes
        self._given_back = 0  # how many times a call's plan was given victims' GPUs back (`_untried`'s `grown`)

    # ---- queue levels ----------------------------------------------------------------------------------------------

    def attained(self, view: ClusterView, job: Job) -> float:
        return view.attained_gpu_s(job) - self._discount.get(job.id, 0.0)

    def queue_of(self, view: ClusterView, job: Job, now: float) -> int:
        attained = self.attained(view, job)
        if self.starvation_factor is not None and job.start_s is None and attained > 0:
            executed = attained / job.spec.gpu_demand
            if now - job.queued_since >= self.starvation_factor * executed:
                self._discount[job.id] = view.attained_gpu_s(job)
                return 0
        return bisect.bisect_right(self.thresholds, attained)

    # ---- the running-job index -------------------------------------------------------------------------------------

    def _unindex(self, job_id: int) -> None:
        level = self._level.pop(job_id, None)
        self._covers.relevel(job_id)
        if level:
            lst = self._by_level[level].get(self._demand[job_id], [])
            i = bisect.bisect_left(lst, (self._submit[job_id], job_id))
            if i < len(lst) and lst[i][1] == job_id:
                del lst[i]

    def level_and_next(self, spec: JobSpec, attained: float) -> tuple[int, float | None]:
        """The queue of a job with this much attained service, and the attained service at which a running job next
        changes queue (None: never). Subclasses with other queue rules (`policies.gittins`) override this."""
        level = bisect.bisect_right(self.thresholds, attained)
        return level, (self.thresholds[level] if level < len(self.thresholds) else None)

    def _index(self, view: ClusterView, job: Job, now: float) -> None:
        self._unindex(job.id)
        attained = self.attained(view, job)
        level, next_attained = self.level_and_next(job.spec, attained)
        self._level[job.id] = level
        self._covers.relevel(job.id)
        self._submit[job.id] = job.spec.submit_s
        self._demand[job.id] = job.spec.gpu_demand
        if level:
            bisect.insort(self._by_level[level].setdefault(job.spec.gpu_demand, []), (job.spec.submit_s, job.id))
        if next_attained is not None:
            cross = now + (next_attained - attained) / job.spec.gpu_demand
            # Attained service can land a rounding step below a threshold, so that `cross` == `now`: `_sync` would
            # then pop and re-push this entry forever. Keep it strictly ahead.
            cross = max(cross, math.nextafter(now, math.inf))
            heapq.heappush(self._demote, (cross, job.id, level))

    def _sync(self, view: ClusterView, now: float) -> None:
        if self._indexed_view is not view:  # first call (or a new view): index whatever already runs
            self._reset_index()
            self._indexed_view = view
            self._moves = view.moves
            for run in view.running.values():
                self._index(view, run, now)
        else:
            self._note_stopped(view)
        for job_id in self._placed:
            job = view.running.get(job_id)
            if job is not None:
                self._index(view, job, now)
        self._placed = []
        for job_id in self._named:
            job = view.running.get(job_id)
            if job is not None and job_id not in self._level:
                self._index(view, job, now)
        self._named = []
        while self._demote and self._demote[0][0] <= now:
            _, job_id, level = heapq.heappop(self._demote)
            job = view.running.get(job_id)
            if job is not None and self._level.get(job_id) == level:
                self._index(view, job, now)
        running = len(view.running)
        if sum(len(lst) for lists in self._by_level for lst in lists.values()) > 2 * running + 1024:
            for lists, stale in zip(self._by_level, self._stale, strict=True):  # drop finished jobs now and then
                for lst in lists.values():
                    lst[:] = [e for e in lst if e[1] in view.running]
                stale.clear()
            self._level = {j: lv for j, lv in self._level.items() if j in view.running}
            # (what `_unindex` reads of a job is only read while it is in `_level`: the rest would grow with the run)
            self._submit = {j: t for j, t in self._submit.items() if j in self._level}
            self._demand = {j: d for j, d in self._demand.items() if j in self._level}

    def _note_stopped(self, view: ClusterView) -> None:
        """Mark the lists of the indexed jobs that stopped running since the last call (all, past the view's record)."""
        moved = view.moved_since(self._moves)
        self._moves = view.moves
        if moved is None:
            for lists, stale in zip(self._by_level, self._stale, strict=True):
                stale.update(lists)
            return
        for job_id in moved:
            level = self._level.get(job_id)
            if level and job_id not in view.running:
                self._stale[level].add(self._demand[job_id])

    def _victims_below(self, view: ClusterView, level: int, bound: Bound | None = None) -> Iterator[Job]:
        """Running jobs in queues lower than `level`, lowest priority (highest queue, latest arrival) first; of those
        `bound` skips (`scheduler.core.victims.Bound`), none once it does."""
        for lv in range(len(self._by_level) - 1, level, -1):
            if self._by_level[lv]:
                yield from self._walk(view, lv, bound)

    def _walk(self, view: ClusterView, lv: int, bound: Bound | None) -> Iterator[Job]:
        """One level's running jobs, latest arrival first: its per-demand lists merged, each walked backwards, an
        entry whose job finished since it was indexed dropped on the way (walking backwards keeps lower indices
        valid). A demand the bound skips is left unwalked; once the walk ends its finished jobs are dropped as the
        walk would have dropped them (the index, and so `_has_victims_below`, ends as a full walk leaves it)."""
        lists = self._by_level[lv]
        heads = [(-lst[-1][0], -lst[-1][1], len(lst) - 1, demand) for demand, lst in lists.items() if lst]
        heapq.heapify(heads)
        skipped: list[tuple[float, int]] = []  # demands the bound skipped, with the entry it stopped at
        running, levels = view.running, self._level
        while heads:
            _, _, i, demand = heapq.heappop(heads)
            lst = lists[demand]
            if bound is not None and bound.value < math.inf and bound.skips(demand):  # (inf: step 1, none skipped)
                skipped.append((demand, i))
                continue
            # This list's entries while they come before every other list's head (the heap would pop this list
            # again: keys are distinct, ids being unique), then its next entry back in the heap.
            # (The head's key compared field by field, as tuples compare: no key built per entry. No other list: inf.)
            up_submit, up_id = heads[0][:2] if heads else (math.inf, math.inf)
            while True:
                if i < len(lst):
                    job_id = lst[i][1]
                    job = running.get(job_id)
                    if job is not None and levels.get(job_id) == lv:
                        yield job
                    else:
                        del lst[i]
                i = min(i, len(lst)) - 1
                if i < 0:
                    break
                submit, job_id = lst[i]
                if -submit > up_submit or (-submit == up_submit and -job_id > up_id):
                    heapq.heappush(heads, (-submit, -job_id, i, demand))
                    break
                if bound is not None and bound.value < math.inf and bound.skips(demand):
                    skipped.append((demand, i))
                    break
        stale = self._stale[lv]
        for demand, i in skipped:  # (past `i` the walk has read the list: what it left there is running, at `lv`)
            if demand in stale:
                lst = lists[demand]
                lst[:i + 1] = [e for e in lst[:i + 1] if levels.get(e[1]) == lv and e[1] in running]
        stale.clear()  # (the walk dropped what it read of the other lists: the whole level is clean)

    def _has_victims_below(self, level: int) -> bool:
        return any(lst for lv in range(level + 1, len(self._by_level)) for lst in self._by_level[lv].values())

    # ---- scheduling ------------------------------------------------------------------------------------------------

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        index = self._indexed(view, queue)  # (before `_sync`, which forgets the jobs placed at the last call)
        self._sync(view, now)
        if not queue:  # demotions only matter when someone is waiting
            return []
        self._queue = queue_demands(queue)  # who else would take GPUs a preemption frees beyond its job's need
        planner = Planner(view)
        buckets = self._buckets(view, queue, now) if index is None else None
        decisions: list[Decision] = []
        preempted: set[int] = set()
        blocked = False
        for level in range(len(self.thresholds) + 1):
            can_preempt = self._has_victims_below(level)
            if not can_preempt and planner.full():
                # Nothing fits and nobody below can be preempted, for this level and every later one: they wait,
                # and must be looked at again when a running job drops to a lower queue (it may become a victim).
                blocked = True
                break
            # Within a level, victims only get scarcer and free capacity only shrinks (what preemption frees, the
            # preempting job takes), so once preempting for a demand failed, larger demands fail too.
            no_victims_from = float("inf")
            failed: dict[Hashable, int] = {}  # group -> the plan (`Planner.changes`) it failed on, at this level
            # Once a job waits, one that neither passes `may_fit` nor may look for victims (none below, or a demand
            # that found none) fails as it would when reached, with nothing to say. Read as the level goes: a job
            # waits, the demand that finds no victims falls (`_Hope`).
            hope = _Hope(planner, can_preempt, blocked)
            jobs = ((job, None) for job in buckets[level]) if buckets is not None else \
                _untried(index, level, planner, failed, hope.hopeless,  # type: ignore[arg-type]
                         lambda: self._given_back)
            for job, group in jobs:
                plan = planner.changes
                placement, no_victims_from = self._fit_or_preempt(view, planner, job, level, can_preempt,
                                                                  no_victims_from, preempted, decisions)
                hope.no_victims_from = no_victims_from
                if placement is None:
                    if not blocked:
                        decisions.append(Wait(job.id, wait_reason(planner, job.spec)))
                    blocked = hope.blocked = True
                    if group is not None and planner.changes == plan:
                        failed[group] = plan
                    continue
                self._start(planner, job, placement, f"queue {level}", decisions)
        if blocked and self._demote:
            decisions.append(WakeAt(self._demote[0][0] + 1e-6))
        return decisions

    def _buckets(self, view: ClusterView, queue: Collection[Job], now: float) -> list[list[Job]]:
        """The queue by level, each in queue order (it arrives in queue order, so no sort)."""
        buckets: list[list[Job]] = [[] for _ in range(len(self.thresholds) + 1)]
        if self.starvation_factor is None:  # a pending job's service is frozen
            th = self.thresholds
            for job in queue:
                a = job.attained_gpu_s
                buckets[bisect.bisect_right(th, a) if a else 0].append(job)
        else:
            for job in queue:
                buckets[self.queue_of(view, job, now)].append(job)
        return buckets

    def _indexed(self, view: ClusterView, queue: Collection[Job]) -> QueueIndex | None:
        """The book's queue grouped by level and by what decides a job's fate in a call (`_group`), brought up to
        date (`policies.queue_scan.QueueIndex`): the jobs placed at the last call out once out of the queue, the jobs
        the book appended since (arrivals, and victims put back, which the index puts in their places: the queue is
        never sorted for it). None where a call reads the queue job by job: a queue that is not the book's, or levels
        that move while jobs wait (the starvation rule)."""
        if not isinstance(queue, Queued) or self.starvation_factor is not None:
            self._queue_index = None
            return None
        index, self._queue_index = self._queue_index, None
        mapping = queue.unsorted
        if index is not None and index.view is view:
            for job_id in self._placed:  # placed at the last call: out of the index once out of the queue
                p = index.pos.get(job_id)
                if p is not None and mapping.get(job_id) is not index.at[p][0]:
                    index.remove(job_id)
            if index.mapping is mapping:
                kept = index.catch_up(queue.appended_since(index.mark))
            else:  # sorted into a new mapping since (another reader wanted it in order): this policy's victims in it
                mapping = queue.mapping
                kept = index.follow(mapping, [mapping[j] for j in self._named if j in mapping])
            if kept:
                index.mark = queue.mark
                self._queue_index = index
                return index
        index = QueueIndex.build(queue.mapping, view, self._group)
        if index is not None:
            index.mark = queue.mark
        self._queue_index = index
        return index

    def _group(self, view: ClusterView, job: Job) -> tuple[int, int, FitKey]:
        """What a job's fate in a call depends on but the plan: its level (frozen while it waits), its priority (whom
        it may preempt) and what the placement and victim searches read of it (`queue_scan.whole_fit_key`)."""
        a = job.attained_gpu_s
        return (bisect.bisect_right(self.thresholds, a) if a else 0), job.spec.priority, whole_fit_key(view, job.spec)

    def _fit_or_preempt(
        self, view: ClusterView, planner: Planner, job: Job, level: int, can_preempt: bool, no_victims_from: float,
        preempted: set[int], decisions: list[Decision],
    ) -> tuple[Placement | None, float]:
        """Where `job` starts (best fit on free GPUs, else preempting lower queues), and the smallest demand known
        to find no victims at this level (updated when preempting failed)."""
        spec = job.spec
        placement = planner.best_fit(spec) if planner.may_fit(spec) else None
        if placement is None and can_preempt and spec.num_gpus < no_victims_from:
            placement = self._preempt_for(view, planner, spec, level, preempted, decisions)
            if placement is None:
                no_victims_from = spec.num_gpus
        return placement, no_victims_from

    def _start(self, planner: Planner, job: Job, placement: Placement, reason: str, decisions: list[Decision]) -> None:
        planner.take(job.spec, placement)
        self._placed.append(job.id)
        decisions.append(Place(job.id, placement, reason))

    def _preempt_for(
        self, view: ClusterView, planner: Planner, spec: JobSpec, level: int, preempted: set[int],
        decisions: list[Decision],
    ) -> Placement | None:
        """Preempt the lowest-priority jobs that let `spec` fit, if any set does."""
        chosen = self._victims(view, planner, spec, level, preempted)
        if not chosen:
            return None
        for v in chosen:
            planner.give_back(v)
        self._given_back += 1
        placement = planner.best_fit(spec)
        if placement is None:  # fragmentation: preempting would not help; undo
            for v in chosen:
                planner.take(v.spec, view.placement(v.id))
            return None
        for v in chosen:
            preempted.add(v.id)
            self._unindex(v.id)
            self._named.append(v.id)
            decisions.append(Preempt(v.id, f"preempted by {spec.name} (queue {level})"))
        return placement

    def _victims(
        self, view: ClusterView, planner: Planner, spec: JobSpec, level: int, preempted: set[int]
    ) -> list[Job]:
        bound = Bound()
        victims = (v for v in self._victims_below(view, level, bound)
                   if v.id not in preempted and may_preempt(v.spec, spec, equals=True))
        covers = None
        if spec.num_gpus >= 1 and spec.workers <= view.cluster.max_gpus_per_node:  # node buckets: floors kept
            covers = functools.partial(self._covers.floors, view, planner, spec, level, self._level)
        return pick_victims(view, planner, spec, victims, self._queue, bound=bound, covers=covers)


class _Hope:
    """Whether a job of a level fails on the plan as it stands with nothing to say (`_untried`'s `hopeless`): a job of
    the call waits already (no `Wait` to give), it does not pass `Planner.may_fit` (only stricter until the plan
    changes) and it may not look for victims (none below its level, or its demand is at least one that found none at
    this level, which only falls). Each holds until the plan changes, so `_untried` may set its group aside."""

    __slots__ = ("blocked", "can_preempt", "no_victims_from", "planner")

    def __init__(self, planner: Planner, can_preempt: bool, blocked: bool) -> None:
        self.planner, self.can_preempt, self.blocked = planner, can_preempt, blocked
        self.no_victims_from = math.inf

    def hopeless(self, job: Job) -> bool:
        spec = job.spec
        return self.blocked and (not self.can_preempt or spec.num_gpus >= self.no_victims_from) and \
            not self.planner.may_fit(spec)


def _untried(index: QueueIndex, level: int, planner: Planner, failed: Mapping[Hashable, int],
             hopeless: Callable[[Job], bool] | None = None,
             grown: Callable[[], int] | None = None) -> Iterator[tuple[Job, Hashable]]:
    """A level's jobs in queue order, with their groups, less those of a group that failed on the plan as it stands
    (`failed`: group -> `Planner.changes` then): a job alike in all a call reads of it, on the same plan, with no
    more victims to hope for (the call's bound on demands only falls), fails as it did, with nothing to say (the
    call named its first waiting job already). Each group is skipped until the plan changes, then read again from
    where the call is: the work is the jobs that may start, and a look per group when the plan changes, however
    deep the level. A group whose next job `hopeless` says fails on the plan as it stands (it stays so while the
    plan does: `may_fit` only grows stricter between changes) is parked at once, without being handed out, and so is
    one whose job the call reaches once `hopeless` says so of it (it may say so only as the level goes: `_Hope`).
    With `grown` (a count that moves whenever the plan gets GPUs back: victims given back), such a group is read again
    only once it moves: a plan that only took GPUs since passes `may_fit` for no job it refused before."""
    heads: list[tuple[Position, Hashable]] = []
    parked: list[Hashable] = []  # groups that failed on the plan `plan`
    asleep: list[Hashable] = []  # groups `hopeless` parked, where `grown` is given: read again once it moves
    grew = grown() if grown is not None else 0

    def place(p: Position, group: Hashable) -> None:
        if hopeless is not None and hopeless(index.at[p][0]):  # parked: read again only once the plan changes
            (asleep if grown is not None else parked).append(group)
        else:
            heapq.heappush(heads, (p, group))

    for group in index.groups:
        if group[0] == level:  # type: ignore[index]
            p = index.first(group, NONE)
            if p is not None:
                place(p, group)
    plan = planner.changes
    at = NONE  # the position the call has reached
    while heads or parked or asleep:
        if planner.changes != plan:  # the plan changed: a parked group may fare otherwise now
            plan = planner.changes
            again, parked = parked, []
            if grown is not None and grown() != grew:  # (GPUs came back: a hopeless group may fit now)
                grew = grown()
                again += asleep
                asleep = []
            for group in again:
                p = index.first(group, at, strict=True)
                if p is not None:
                    place(p, group)
        if not heads:
            return
        at, group = heapq.heappop(heads)
        if failed.get(group) == plan:
            parked.append(group)
            continue
        if hopeless is not None and hopeless(index.at[at][0]):  # (it fails on this plan: the call passes it)
            (asleep if grown is not None else parked).append(group)
            continue
        yield index.at[at][0], group
        p = index.first(group, at, strict=True)
        if p is not None:
            if failed.get(group) == planner.changes:
                parked.append(group)
            else:
                place(p, group)


def las_level(attained_gpu_s: float, thresholds: Sequence[float] = DEFAULT_THRESHOLDS) -> int:
    """Tiresias' queue for a job that has attained this much service (0 is the highest priority)."""
    return bisect.bisect_right(thresholds, attained_gpu_s) if attained_gpu_s else 0


# ---- options: `tiresias:thresholds=60,600,3600,starvation=8` ---------------------------------------------------------


def check_thresholds(name: str, arg: str, values: Sequence[float], unit: str = "GPU-seconds") -> tuple[float, ...]:
    """Queue thresholds must be positive and strictly increasing (one queue per interval)."""
    where = f"policy '{name}:{arg}': option 'thresholds'"
    for v in values:
        if not v > 0:
            raise UnknownPolicyError(f"{where}: {v:g} is not positive (thresholds are {unit})")
    for lo, hi in itertools.pairwise(values):
        if not hi > lo:
            raise UnknownPolicyError(f"{where}: {hi:g} after {lo:g} is not increasing (thresholds must strictly "
                                     "increase)")
    return tuple(values)


def format_thresholds(values: Sequence[float]) -> str:
    return ",".join(f"{v:g}" for v in values)


def make_tiresias(arg: str, seed: int = 0) -> Tiresias:
    """`tiresias:thresholds=60,600,3600` and/or `starvation=F`; the instance reports its canonical name."""
    opts = parse_options("tiresias", arg, lists=("thresholds",), numbers=("starvation",))
    thresholds = check_thresholds("tiresias", arg, opts.get("thresholds", list(DEFAULT_THRESHOLDS)))
    starvation = opts["starvation"][0] if "starvation" in opts else None
    if starvation is not None and not starvation > 0:
        raise UnknownPolicyError(f"policy 'tiresias:{arg}': option 'starvation': {starvation:g} is not positive")
    policy = Tiresias(seed=seed, thresholds=thresholds, starvation_factor=starvation)
    parts = [f"thresholds={format_thresholds(thresholds)}"] if "thresholds" in opts else []
    parts += [f"starvation={starvation:g}"] if starvation is not None else []
    policy.name = "tiresias:" + ",".join(parts)  # type: ignore[misc]  # instances report the name they were asked for
    return policy


register_prefix("tiresias", make_tiresias)

"""The first queued job that fits, in queue order, found without reading a deep queue at every call.

A policy that places, one call at a time, the first job in queue order whose placement search finds something
(contention-greedy) used to try every queued job again at each new instant. Two facts make most of that work
unnecessary, while every answer stays the one the full scan gives:

* Whether a job fits is decided by what the placement searches read of it (`placement.fit_key`: GPUs, workers,
  share, memory, and the user where CUDA MPS serves one user per node): jobs alike in it fit or do not together. The
  queue is kept grouped by that key, each group in queue order (`QueueIndex`), so a call weighs one job per group.
  (`whole_fit_key` groups coarser, for policies whose every search of whole GPUs reads memory as the planner does.)
* A group that fitted nowhere still fits nowhere while no GPU was freed or reopened (`ClusterView.frees`): placements
  only shrink free capacity. So it is not tried again, across instants, until something frees GPUs.

Within an instant the scan keeps `policies.deepshare.PassedOver`'s semantics exactly: the jobs passed over at this
instant (every job before the last one placed) are skipped until the clock moves or free capacity grows, and a call
that places nothing names the first job it passed over as waiting.

The index follows the book's queue (`scheduler.core.book.Queued`): the book appends arrivals at the end of the same
mapping and builds a new one whenever it puts a job anywhere else (`Book.sort_queue`), so while the mapping is the
same object the jobs it holds that the index does not are at its end, found walking it backwards: O(new jobs) per
call. A job the policy placed leaves the index when it has left the queue; any other departure shows in the count and
the index is built again (O(queue), rare). Positions are the book's queue order, (submitted, id). A policy that
preempts may follow the book's mapping unsorted instead (tiresias): the book appends the jobs it puts back too, and
merges them into their places only when the queue is read in order, so the index takes what was appended since its
mark and puts them in their places itself (`QueueIndex.catch_up`, `Queued.appended_since`); after a sort it follows
the new mapping (`QueueIndex.follow`). Any other queue (a priority band's list, the live controller's) is scanned job
by job as before, the known misfits still skipped without a search.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Callable, Collection, Hashable, Mapping

from policies.placement import FitKey, fit_key
from scheduler.core.book import Mark, Queued
from scheduler.core.model import Job, JobSpec
from scheduler.core.progress import queue_position as position
from scheduler.core.state import ClusterView

Key = Hashable
Position = tuple[float, int]  # a job's place in the book's queue order: (submitted, id), `progress.in_queue_order`'s
NONE: Position = (-math.inf, -1)  # before every job
ALL: Position = (math.inf, 0)  # after every job


def whole_fit_key(view: ClusterView, spec: JobSpec) -> FitKey:
    """`fit_key`, less a whole-GPU job's memory where every GPU holds it. The planner's whole-GPU searches, and the
    victim searches of `scheduler.core.victims` over its plans, read such a job's memory only through the nodes it may
    use (`Planner.usable_nodes`: all of them then) and whether it fits every GPU: a deep queue's gangs of one size but
    many models fit, or find victims, together. (Not what a plan records once it takes one: its GPUs' memory.)"""
    key = fit_key(view, spec)
    if spec.num_gpus >= 1 and key[3] <= view.cluster.min_gpu_mem:
        return key[:3] + (0.0,) + key[4:]
    return key


def queue_mapping(queue: Collection[Job]) -> Mapping[int, Job] | None:
    """The book's queue as its mapping of job ids to jobs in queue order, the object the book appends arrivals to
    (None for any other collection). Read, never changed."""
    return queue.mapping if isinstance(queue, Queued) else None


class QueueIndex:
    """A queue's jobs grouped by key, each group as the jobs' positions in queue order (ascending). Only for a
    mapping in queue order (`build` says None otherwise), which the book's is: `Book.sort_queue` sorts it by
    position, and arrivals are appended in submission order (checked as they come)."""

    def __init__(self, mapping: Mapping[int, Job], view: ClusterView, key: Callable[[ClusterView, Job], Key]) -> None:
        self.mapping = mapping
        self.view = view
        self._key = key
        self.groups: dict[Key, list[Position]] = {}  # key -> positions: from `_lo[key]` on, its jobs', ascending
        self._lo: dict[Key, int] = {}  # key -> index of its first live position (those before it: jobs gone)
        self.at: dict[Position, tuple[Job, Key]] = {}  # live position -> its job and key
        self.pos: dict[int, Position] = {}  # job id -> its live position
        self._last = NONE  # the last position appended
        self.mark: Mark | None = None  # the book's `Queued.mark` when the index last described its queue

    @classmethod
    def build(cls, mapping: Mapping[int, Job], view: ClusterView,
              key: Callable[[ClusterView, Job], Key]) -> QueueIndex | None:
        """The index of `mapping`, or None if it is not in queue order."""
        index = cls(mapping, view, key)
        for job in mapping.values():
            if not index._append(job):
                return None
        return index

    def _append(self, job: Job) -> bool:
        """Index a job after every other; False (and nothing indexed) if its position is not after theirs."""
        p = position(job)
        if p <= self._last:
            return False
        self._last = p
        key = self._key(self.view, job)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = []
            self._lo[key] = 0
        group.append(p)
        self.at[p] = (job, key)
        self.pos[job.id] = p
        return True

    def _insert(self, job: Job) -> None:
        """Index a job in its place (a job put back in the queue)."""
        p, key = position(job), self._key(self.view, job)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = []
            self._lo[key] = 0
        lo = self._lo[key]
        i = bisect.bisect_left(group, p, lo)
        if i == lo and lo:  # before the group's first: in the slot its last dead position left
            group[lo - 1] = p
            self._lo[key] = lo - 1
        else:
            group.insert(i, p)
        self.at[p] = (job, key)
        self.pos[job.id] = p

    def remove(self, job_id: int) -> None:
        """Take a job that left the queue out of the index. A group's positions from `_lo` on are its live ones:
        the first is dropped by moving `_lo` (a group's jobs mostly leave from its front), any other at once."""
        p = self.pos.pop(job_id)
        _, key = self.at.pop(p)
        group, lo = self.groups[key], self._lo[key]
        i = bisect.bisect_left(group, p, lo)
        if i != lo:
            del group[i]
        elif lo + 1 == len(group):
            del self.groups[key], self._lo[key]
        elif lo > 64 and 2 * lo > len(group):
            del group[:lo + 1]
            self._lo[key] = 0
        else:
            self._lo[key] = lo + 1

    def sync(self) -> bool:
        """Index the jobs appended to the mapping since the last call; False if it changed in any other way (a job
        gone that the index did not see go, one put anywhere but at the end): the index no longer describes it."""
        new: list[Job] = []
        pos = self.pos
        for job in reversed(self.mapping.values()):  # type: ignore[call-overload]  # (the book's is a dict)
            if job.id in pos:
                break
            new.append(job)
        if len(self.mapping) != len(pos) + len(new):
            return False
        return all(self._append(job) for job in reversed(new))

    def catch_up(self, appended: list[Job] | None) -> bool:
        """Index the jobs the book appended to the same mapping since `mark` (`Queued.appended_since`: arrivals, and
        jobs put back, which go in their places); False if the mapping changed in any other way, or is a new one
        (None): the index no longer describes it."""
        if appended is None:
            return False
        pos = self.pos
        for job in appended:
            p = pos.get(job.id)
            if p is not None:  # put back, its departure unseen: where the index holds it, or the index is stale
                if p != position(job) or self.at[p][0] is not job:
                    return False
            elif not self._append(job):
                self._insert(job)
        return len(self.mapping) == len(pos)

    def follow(self, mapping: Mapping[int, Job], put_back: Collection[Job]) -> bool:
        """Follow the book's queue into a new mapping (`Book.sort_queue`, in queue order) that holds the jobs
        indexed, less those that left, plus `put_back` where they are in it, plus arrivals at its end; False if it
        holds anything else (the index no longer describes it)."""
        for job in put_back:
            if job.id not in self.pos and mapping.get(job.id) is job:
                self._insert(job)
        self.mapping = mapping
        return self.sync()

    def first(self, key: Key, start: Position, strict: bool = False) -> Position | None:
        """The group's first live position from `start` on (after it if `strict`; None: none)."""
        group = self.groups.get(key)
        if group is None:
            return None
        if start == NONE and not strict:  # its first live one (no search: Tiresias asks it of each group per level)
            i = self._lo[key]
        else:
            i = (bisect.bisect_right if strict else bisect.bisect_left)(group, start, self._lo[key])
        return group[i] if i < len(group) else None

    def heads(self, start: Position, skip: Collection[Key] = ()) -> list[tuple[Position, Key]]:
        """Per group but those in `skip`, its first live position from `start` on, with the group's key: in queue
        order."""
        lo = self._lo
        # (`first`, inlined: a deep queue's every call asks it of each of its ~100 groups)
        if start == NONE:  # every live position is after NONE: each group's first is its first live one
            out = [(group[lo[key]], key) for key, group in self.groups.items() if key not in skip]
        else:
            out = []
            for key, group in self.groups.items():
                if key not in skip:
                    i = bisect.bisect_left(group, start, lo[key])
                    if i < len(group):
                        out.append((group[i], key))
        out.sort(key=operator.itemgetter(0))  # (positions are unique: the order is theirs alone)
        return out

    def head(self, start: Position, found: list[tuple[Position, Key]] | None = None) -> Job | None:
        """The first job from position `start` on (None: none). `found`: what `heads(start, skip)` returned, for some
        `skip`: only the groups it does not hold are read again."""
        if start == NONE:
            return next(iter(self.mapping.values()), None)  # the mapping is in position order
        best = found[0][0] if found else ALL
        known = {key for _, key in found} if found else ()
        lo = self._lo
        for key, group in self.groups.items():
            if key not in known:
                i = bisect.bisect_left(group, start, lo[key])
                if i < len(group) and group[i] < best:
                    best = group[i]
        return self.at[best][0] if best != ALL else None


class FirstFit:
    """The scan (module docstring): at each call, the first job not passed over at this instant that `fits`, or,
    if none does, the first job passed over at this call (the one to name as waiting)."""

    def __init__(self, key: Callable[[ClusterView, Job], Key]) -> None:
        self._key_of = key
        # Passed over at this instant (`PassedOver`'s rule): the indexed jobs at positions below `_cursor` (the one
        # placed last, or ALL once a call placed nothing; NONE: none passed over yet), or, once the scan left the
        # index at this instant, the ids in `_passed`.
        self._instant: tuple[float, float] | None = None  # (now, free capacity) of the last call
        self._cursor = NONE
        self._passed: set[int] | None = None
        # Keys known to fit nowhere, and the view and its `frees` they hold for.
        self._misfits: set[Key] = set()
        self._misfits_of: tuple[ClusterView, int] | None = None
        self._index: QueueIndex | None = None
        self._placed: Job | None = None  # the job named at the last call: it leaves the index once it leaves the queue

    def first(self, view: ClusterView, queue: Collection[Job], now: float,
              fits: Callable[[Job], bool]) -> tuple[Job | None, Job | None]:
        """(the job to place, None), or (None, the job to name as waiting), or (None, None): nothing left to try."""
        self._refresh(view, now)
        index = self._indexed(view, queue)
        if index is None:
            return self._scan(view, queue, fits)
        misfits = self._misfits
        heads = index.heads(self._cursor, misfits)
        for p, key in heads:  # a group known to fit nowhere is not tried
            job = index.at[p][0]
            if fits(job):
                self._cursor, self._placed = p, job
                return job, None
            misfits.add(key)
        waiting = index.head(self._cursor, heads)  # every job from the cursor on was passed over: the first waits
        self._cursor = ALL
        return None, waiting

    def _refresh(self, view: ClusterView, now: float) -> None:
        """Forget what the clock moving or GPUs freed make stale."""
        capacity = view.free_capacity
        if self._instant is None or self._instant[0] != now or capacity > self._instant[1] + 1e-9:
            self._cursor, self._passed = NONE, None
        self._instant = (now, capacity)
        if self._misfits_of is None or self._misfits_of[0] is not view or self._misfits_of[1] != view.frees:
            self._misfits = set()
            self._misfits_of = (view, view.frees)

    def _indexed(self, view: ClusterView, queue: Collection[Job]) -> QueueIndex | None:
        """The index of `queue`, brought up to date; None where this call must scan job by job (a queue that is not
        the book's, or the book's changed while jobs are passed over at this instant)."""
        mapping = None if self._passed is not None else queue_mapping(queue)
        index, placed = self._index, self._placed
        self._placed = None
        if index is not None and placed is not None and placed.id in index.pos and \
                mapping is index.mapping and mapping.get(placed.id) is not placed:
            index.remove(placed.id)  # it started (a frame may have kept it back: then it is still queued, indexed)
        if mapping is not None and index is not None and index.mapping is mapping and index.view is view \
                and index.sync():
            return index
        if mapping is not None and self._cursor == NONE:  # nothing passed over yet: the index may start again
            self._index = QueueIndex.build(mapping, view, self._key_of)
            if self._index is not None:
                return self._index
        if self._passed is None:  # jobs are passed over: keep them as ids, for the rest of the instant
            self._passed = set() if index is None or self._cursor == NONE else \
                {job.id for p, (job, _) in index.at.items() if p < self._cursor}
        self._index = None
        return None

    def _scan(self, view: ClusterView, queue: Collection[Job],
              fits: Callable[[Job], bool]) -> tuple[Job | None, Job | None]:
        """The scan job by job, for a queue the index does not follow: `PassedOver`'s, known misfits not searched."""
        passed = self._passed
        if passed is None:
            passed = self._passed = set()
        misfits = self._misfits
        waiting: Job | None = None
        for job in queue:
            if job.id in passed:
                continue
            key = self._key_of(view, job)
            if key not in misfits:
                if fits(job):
                    return job, None
                misfits.add(key)
            passed.add(job.id)
            if waiting is None:
                waiting = job
        return None, waiting

"""The book of running and pending jobs, kept by the simulator and the live controller alike.

Starting or stopping a run changes three things that must agree: who holds which GPU share (`ClusterState`), the
contention model's footprints and slowdowns, and the maps of running and pending jobs the policies read. The book
changes them together, in one order, and returns the jobs whose predicted slowdown changed; re-rating those is the
caller's (the simulator reschedules their ends, the controller tells their workers). What only one caller keeps stays
with it: the simulator's clock, events and progress accounting, the controller's store rows, attempts and workers.

The book also indexes the running jobs' priorities (`lowest_preemptible`, which the priority rules ask at every
instant with a queue) and the queued jobs' (`queue`: the priority rules split a queue of one priority into bands
without reading each job, which on a deep queue was most of an instant's work): a change of a job's priority goes
through `respec`, and a job leaves the queue through `start` or `dequeue`.

A job's attained service (Tiresias' 2D attained service, GPU-seconds) is accumulated here, on the job, when a run
stops: the one place it grows.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Collection, Iterator, Mapping

from scheduler.core.contention import ContentionModel
from scheduler.core.elastic import sized, speedup
from scheduler.core.model import Job, JobPhase, JobSpec, Placement
from scheduler.core.progress import in_queue_order, queue_position
from scheduler.core.state import ClusterState, ClusterView, PlacementError


class BookError(RuntimeError):
    """A start of a job that is running already, a stop of one that is not, or a queued job that is running: a bug
    in the caller, which would otherwise count a run twice or leave its GPUs held forever."""


class Queued(Collection[Job]):
    """The pending jobs in queue order, as a policy is offered them, with how many distinct priorities they hold
    (`priorities`) and how many of them ask for each GPU demand (`demands`, read-only; None: not known, read each
    job). The book's own (`Book.queue`) also offers its mapping unsorted (`unsorted`) and what was appended to it
    since a mark (`appended_since`), for a policy that follows the queue without having it sorted."""

    __slots__ = ("_book", "_jobs", "demands", "priorities")

    def __init__(self, jobs: Mapping[int, Job], priorities: int | None,
                 demands: Mapping[float, int] | None = None, book: Book | None = None) -> None:
        self._jobs = jobs
        self.priorities = priorities
        self.demands = demands
        self._book = book

    def __iter__(self) -> Iterator[Job]:
        return iter(self.mapping.values())

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job: object) -> bool:
        return isinstance(job, Job) and self._jobs.get(job.id) is job

    @property
    def mapping(self) -> Mapping[int, Job]:
        """Job ids to jobs in queue order: the book's own mapping (sorted first if jobs were put back since it was
        last sorted), which it appends arrivals to and replaces when it puts a job anywhere else (`policies.queue_scan`
        follows it). Read it; never change it."""
        if self._book is not None and self._book.has_put_back:
            self._jobs = self._book.pending
        return self._jobs

    @property
    def unsorted(self) -> Mapping[int, Job]:
        """The same jobs by id, not sorted first: in queue order but for the jobs the book put back since its last
        sort, at its end with the arrivals (`appended_since`). For lookups, and for a policy that puts those jobs in
        their places itself. Read it; never change it."""
        return self._jobs

    @property
    def mark(self) -> Mark | None:
        """A mark of what the book has appended to `unsorted` so far (`appended_since`; None: not the book's)."""
        return (self._book.sorts, self._book.appended) if self._book is not None else None

    def appended_since(self, mark: Mark | None) -> list[Job] | None:
        """The jobs appended to `unsorted` (arrived, or put back) since `mark` that are still queued, in the order
        appended: its last ones (appends go to the end; a dequeue, or a pack, keeps the order of the rest). None if
        the book has sorted its queue into a new mapping since, or this queue is not the book's."""
        book = self._book
        if book is None or mark is None or mark[0] != book.sorts:
            return None
        out: list[Job] = []
        stamp, since = book.stamps, mark[1]
        for job in reversed(self._jobs.values()):  # type: ignore[call-overload]  # (the book's is a dict)
            if stamp[job.id] <= since:
                break
            out.append(job)
        out.reverse()
        return out


# (the book's sorts, its appends): what `Queued.appended_since` counts from
Mark = tuple[int, int]


class Tally:
    """Jobs' values (priorities, GPU demands), counted, with each job's counted value: which values a set of jobs
    holds and how many hold each, kept as jobs come and go rather than read from every job."""

    def __init__(self) -> None:
        self.counts: Counter[float] = Counter()  # value -> jobs counted at it (no zero entries)
        self.of: dict[int, float] = {}  # job id -> the value it is counted at

    def add(self, job_id: int, value: float) -> None:
        self.counts[value] += 1
        self.of[job_id] = value

    def remove(self, job_id: int) -> None:
        """Uncount `job_id` if it is counted."""
        value = self.of.pop(job_id, None)
        if value is not None:
            self.counts[value] -= 1
            if not self.counts[value]:
                del self.counts[value]


class Book:
    """The cluster's allocations, the contention model, and the running and pending jobs, changed only together.

    `running` is one dict for the book's life (the view reads it); `pending` is rebuilt when the queue is put back in
    order, so callers read it through the book each time rather than keep it.

    A job put back in the queue (`requeue`, `enqueue`) is appended to it, and merged into its place when the queue is
    next read in order (`pending`): a deep queue under a preempting policy was copied whole at each preemption, most
    of a million-job replay's time under Tiresias, though its policy reads the queue through an index that puts the
    jobs back itself (`Queued.appended_since`)."""

    def __init__(self, state: ClusterState, contention: ContentionModel) -> None:
        if contention.cluster is not state.cluster:
            raise ValueError("contention: the contention model is of another cluster than the state")
        self.state = state
        self.contention = contention
        self.running: dict[int, Job] = {}
        self.elastic: dict[int, Job] = {}  # the running jobs that may be resized (elastic as submitted)
        # The queue by id: in queue order (`in_queue_order`) but for the jobs in `_unplaced`, and for arrivals appended
        # out of order (`_ordered`), each at the end in the order appended.
        self._jobs: dict[int, Job] = {}
        self._unplaced: dict[int, Job] = {}  # put back since the last sort (only while `_ordered`)
        self.stamps: dict[int, int] = {}  # queued job id -> `appended` when it was appended (read-only outside)
        self.appended = 0  # jobs appended to the queue so far, arrived or put back
        self.sorts = 0  # times `_jobs` was replaced by a new dict in queue order
        self._taken = 0  # jobs taken out of `_jobs` since it was last packed (`dequeue`)
        # Whether `_jobs` less `_unplaced` is in queue order (every change since the last sort kept it so), and a
        # position (submitted, id) no queued job's is above: what lets `_place` merge the jobs put back rather than
        # sort them all.
        self._ordered = True
        self._last: tuple[float, int] = (-math.inf, -1)
        self._running_priorities = Tally()  # of the running preemptible jobs
        self._queued = Tally()  # of the queued jobs
        self._demands = Tally()  # the queued jobs' GPU demands (the victim rule's `PendingDemands` reads them)
        self.view = ClusterView(state, contention, self.running, self.lowest_preemptible, self.elastic)

    def start(self, job: Job, placement: Placement, now: float, *, adopt: bool = False) -> set[int]:
        """Start a run of `job` on `placement` at `now`: allocate it (PlacementError, changing nothing, if it breaks
        an invariant; `adopt`: a run that exists already, as `ClusterState.check` takes it), take the job from the
        queue if it is there, and add it to the contention model. Returns the jobs whose slowdown changed, the job
        itself included, in the model's order (the caller re-rates them in that order)."""
        if job.id in self.running:
            raise BookError(f"job {job.spec.name} (id {job.id}) is running already")
        spec, speed = job.spec, 1.0
        if spec.elastic and len(placement.gpus) != spec.workers:
            spec, speed = self._sized(spec, len(placement.gpus))
        self.state.allocate(job.id, spec, placement, adopt=adopt)
        if spec is not job.spec:  # (only once the allocation held: a refused start changes nothing)
            job.submitted, job.spec, job.speedup = job.spec, spec, speed
        self.dequeue(job.id)
        job.state = JobPhase.RUNNING
        job.placement = placement
        job.start_s = now
        job.resized_s = None
        self.running[job.id] = job
        if (job.submitted or job.spec).elastic:
            self.elastic[job.id] = job
        self._count(job.id, job.spec)
        return self.contention.add(job.id, job.spec, placement)

    def resize(self, job: Job, placement: Placement, now: float) -> set[int]:
        """Run `job` (running, elastic) on `placement`, another number of whole GPUs, from `now` (its run goes on: the
        same start, time limit and attained service, which counts at the old size until now). PlacementError, changing
        nothing, for a size it does not accept or GPUs it cannot have. Returns the jobs whose slowdown changed, the
        job itself included. The pause a resize costs is the caller's to account (the simulator's clock)."""
        if job.id not in self.elastic:
            raise BookError(f"job {job.spec.name} (id {job.id}) is not a running elastic job")
        submitted = job.submitted or job.spec
        spec, speed = self._sized(submitted, len(placement.gpus))
        if spec.workers == job.spec.workers:
            raise PlacementError(f"job {spec.name}: a resize changes the size; it runs at {spec.workers} GPUs already")
        problem = self.state.resize_check(job.id, spec, placement)
        if problem is not None:
            raise PlacementError(f"job {spec.name}: {problem}")
        since = job.sized_since
        assert since is not None  # (running)
        job.attained_gpu_s += max(0.0, now - since) * job.spec.gpu_demand
        job.resized_s = now
        job.resizes += 1
        self.state.release(job.id)
        self.state.allocate(job.id, spec, placement)  # (cannot fail: `resize_check` held)
        if spec is submitted:
            job.spec, job.submitted, job.speedup = submitted, None, 1.0
        else:
            job.spec, job.submitted, job.speedup = spec, submitted, speed
        job.placement = placement
        self.view.respecs += 1  # (its spec changed in place: what policies keep of the running jobs is read again)
        affected = self.contention.remove(job.id)
        return affected | self.contention.add(job.id, spec, placement)

    def stop(self, job: Job, now: float) -> set[int]:
        """End `job`'s run at `now` (whatever ends it: the caller sets its phase): release its GPUs, add the run's
        service to its attained service, and take it out of the contention model. Returns the other running jobs
        whose slowdown changed, in the model's order."""
        if job.id not in self.running:
            raise BookError(f"job {job.spec.name} (id {job.id}) is not running")
        del self.running[job.id]
        self.elastic.pop(job.id, None)
        self._uncount(job.id)
        self.state.release(job.id)
        since = job.sized_since
        assert since is not None  # (`start` set it)
        # Not below zero: the controller's clock is the wall clock, which may step back between a start and a stop.
        job.attained_gpu_s += max(0.0, now - since) * job.spec.gpu_demand
        job.start_s = job.resized_s = None
        job.placement = None
        if job.submitted is not None:  # back to the queue at the size it was submitted at: the next run sizes it anew
            job.spec, job.submitted, job.speedup = job.submitted, None, 1.0
        return self.contention.remove(job.id)

    def _sized(self, spec: JobSpec, k: int) -> tuple[JobSpec, float]:
        """An elastic job's spec at `k` GPUs and its speed there (PlacementError for a size it does not accept)."""
        try:
            return sized(spec, k), speedup(self.contention, spec, k)
        except ValueError as exc:
            raise PlacementError(f"job {spec.name}: {exc}") from None

    def respec(self, job: Job, spec: JobSpec) -> None:
        """Give `job` a new spec (the API changed its priority or time limit), running or not: the one way a job's
        spec changes, so that the indexes of running and queued priorities follow (and the view counts it). An
        elastic job running at another size keeps that size: `spec` becomes the one it was submitted with."""
        if job.submitted is not None:
            job.submitted, spec = spec, sized(spec, job.spec.workers)
        if job.id in self._jobs and spec.submit_s != job.spec.submit_s:  # (moved in queue order: sort it next time)
            self._disordered()
        job.spec = spec
        if job.id in self.running:
            self._uncount(job.id)
            self._count(job.id, spec)
            self.view.respecs += 1
        if job.id in self._queued.of:
            self._queued.remove(job.id)
            self._queued.add(job.id, spec.priority)
            self._demands.remove(job.id)
            self._demands.add(job.id, spec.gpu_demand)

    def lowest_preemptible(self) -> float:
        """The lowest priority of a running, preemptible job (inf: none is), from the index: O(distinct priorities)."""
        counts = self._running_priorities.counts
        return min(counts) if counts else math.inf

    def _count(self, job_id: int, spec: JobSpec) -> None:
        if spec.preemptible:
            self._running_priorities.add(job_id, spec.priority)

    def _uncount(self, job_id: int) -> None:
        self._running_priorities.remove(job_id)

    def queue(self) -> Queued:
        """The queue as a policy is offered it, with its count of distinct priorities (None if the queue was changed
        other than through the book, and the count may be stale)."""
        if len(self._queued.of) != len(self._jobs):
            return Queued(self._jobs, None, book=self)
        return Queued(self._jobs, len(self._queued.counts), self._demands.counts, book=self)

    @property
    def pending(self) -> dict[int, Job]:
        """The queue in queue order: the jobs put back since the last read merged into their places first (a new
        dict then, as a sort makes one). Arrivals appended out of order stay at the end until `sort_queue`."""
        if self._unplaced:
            self._place()
        return self._jobs

    @property
    def unsorted(self) -> Mapping[int, Job]:
        """The queue by id, the jobs put back since the last sort not merged in (at its end, with the arrivals): for
        lookups and counts, which need no order."""
        return self._jobs

    @property
    def has_put_back(self) -> bool:
        """Whether jobs put back wait to be merged into their places (`pending` makes a new mapping then)."""
        return bool(self._unplaced)

    def append(self, job: Job) -> None:
        """Queue `job` at the end: an arrival, which comes in submission order (a caller that cannot vouch for that
        calls `sort_queue` after its arrivals)."""
        self._queueable(job)
        p = queue_position(job)
        if p > self._last and job.id not in self._jobs:
            self._last = p
        else:
            self._disordered()
        self._add(job)

    def enqueue(self, job: Job) -> None:
        """Queue `job` in its place in queue order (`in_queue_order`), not at the end."""
        self._queueable(job)
        self._put_back(job)

    def dequeue(self, job_id: int) -> None:
        """Take a job from the queue (cancelled, or started), if it is there."""
        pending = self._jobs
        if pending.pop(job_id, None) is not None:
            del self.stamps[job_id]
            self._unplaced.pop(job_id, None)
            self._taken += 1
            # A dict keeps a hole where a key was popped, and reading its first job walks past every hole before it:
            # a queue drained from its head (a million-job replay's, with no arrivals to make the dict grow and pack
            # itself) cost a walk over every job started since at each look at its head, most of an instant's work.
            # Packed in place (the same object, in the same order: the policies follow it, `Queued.mapping`,
            # `Queued.appended_since`) past ~sqrt(len) holes:
            # O(sqrt(len)) per job taken, in copying and in walking alike.
            if self._taken > 64 + 8 * math.isqrt(len(pending)):
                packed = dict(pending)
                pending.clear()
                pending.update(packed)
                self._taken = 0
        self._queued.remove(job_id)
        self._demands.remove(job_id)

    def requeue(self, job: Job, now: float) -> None:
        """Put back in the queue, in its old place, a job whose run was stopped (`stop`) at `now` and will run
        again (preempted, evicted, lost, checkpointed)."""
        self._queueable(job)
        job.state = JobPhase.PENDING
        job.queued_since = now
        self._put_back(job)

    def sort_queue(self) -> None:
        """Put the queue back in queue order (by submission time, then id)."""
        self._jobs = in_queue_order(self._jobs)  # (a new dict: packed)
        self.sorts += 1
        self._unplaced = {}
        self._taken = 0
        self._ordered = True
        self._last = queue_position(next(reversed(self._jobs.values()))) if self._jobs else (-math.inf, -1)

    def _add(self, job: Job) -> None:
        """Append `job` to `_jobs` (where it is if it is there), stamped."""
        if job.id not in self._jobs:
            self.appended += 1
            self.stamps[job.id] = self.appended
        self._jobs[job.id] = job

    def _put_back(self, job: Job) -> None:
        """Queue `job` where `sort_queue` would put it: appended now, merged into its place at the next read in
        order (`pending`). Where the rest is not known to be in order (or `job` is queued already), sorted now, as
        the book always did."""
        if not self._ordered or job.id in self._jobs:
            self._add(job)
            self.sort_queue()
            return
        self._add(job)
        self._unplaced[job.id] = job
        self._last = max(self._last, queue_position(job))  # (an arrival before it is out of order, as it was)

    def _disordered(self) -> None:
        """The queue less the jobs put back is no longer in queue order: merge those in first, while it is."""
        if self._unplaced:
            self._place()
        self._ordered = False

    def _place(self) -> None:
        """Merge the jobs put back since the last sort into their places, in a new dict (as a sort makes one: the
        policies that follow the queue see a job put anywhere but at the end so). The rest is in queue order: each is
        found a place by bisection, reading ~log2(len) positions, and the rest is copied in slices, in C."""
        unplaced = sorted(self._unplaced.values(), key=queue_position)
        rest = dict(self._jobs)
        for job in unplaced:
            del rest[job.id]
        values = list(rest.values())
        items = iter(rest.items())
        merged: dict[int, Job] = {}
        done = 0
        for job in unplaced:
            i = bisect.bisect_left(values, queue_position(job), done, key=queue_position)
            merged.update(itertools.islice(items, i - done))
            merged[job.id] = job
            done = i
        merged.update(items)
        self._jobs = merged
        self.sorts += 1
        self._unplaced = {}
        self._taken = 0

    def _queueable(self, job: Job) -> None:
        """Check that `job` may be queued, and count its priority (the callers queue it next)."""
        if job.id in self.running:
            raise BookError(f"job {job.spec.name} (id {job.id}) is running: stop its run before queueing it")
        self._queued.remove(job.id)  # (queued again while queued: counted once)
        self._queued.add(job.id, job.spec.priority)
        self._demands.remove(job.id)
        self._demands.add(job.id, job.spec.gpu_demand)

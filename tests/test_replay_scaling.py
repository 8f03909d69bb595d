"""Replays that scale (issue 48): the work per event does not grow with the running set, and events that change
nothing are not pushed, while every decision and every end stays as it was."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Iterator, Mapping

import numpy as np
import pytest
from conftest import job, small_cluster

from policies import make_policy
from scheduler.core.book import Book, Queued
from scheduler.core.contention import ContentionModel
from scheduler.core.model import Job, Placement, parse_cluster
from scheduler.core.priorities import bands
from scheduler.core.progress import progress_rate
from scheduler.core.simulator import _FINISH, Simulator
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.traces import load_trace
from scheduler.core.victims import Bound, Offer, choose_victims
from scheduler.core.workloads import catalog


class AlwaysPush(Simulator):
    """The simulator as it was before issue 48: every re-rating pushes a new end event, changed or not."""

    def _set_rate(self, job: Job) -> None:
        self._advance(job)
        slow = self.contention.slowdown(job.id)
        self._slow[job.id] = slow
        job.rate = progress_rate(job.spec.kind, slow)
        self._version[job.id] += 1
        self._push(self.now + max(job.work_left, 0.0) / job.rate, _FINISH, job.id, self._version[job.id])


def _live_ends(sim: Simulator) -> list[tuple[float, int]]:
    return sorted((t, j) for t, _seq, kind, j, v in sim._heap if kind == _FINISH and v == sim._version[j])


def test_a_rerating_that_changes_nothing_pushes_no_event() -> None:
    sim = Simulator(small_cluster(nodes=1, gpus=4), [job("a", 0.0, 0.5, 1000.0), job("b", 0.0, 2, 500.0)],
                    make_policy("fifo"))
    sim.advance()
    sim.schedule()
    assert set(sim.running) == {0, 1}
    heap, ends = list(sim._heap), _live_ends(sim)
    sim.now = sim.view.now = 100.0  # later, at the same slowdowns: each end stands
    for j in (0, 1):
        sim._set_rate(sim.jobs[j])
    assert sim._heap == heap and _live_ends(sim) == ends


def test_a_rerating_that_moves_the_end_pushes_it_and_the_old_one_goes_stale() -> None:
    sim = Simulator(small_cluster(nodes=1, gpus=4), [job("a", 0.0, 0.5, 1000.0), job("b", 10.0, 0.5, 1000.0)],
                    make_policy("fifo"))
    sim.advance()
    sim.schedule()
    (before,) = _live_ends(sim)
    sim.advance()  # b arrives at t=10 and shares a's GPU: a slows down
    sim.schedule()
    ends = dict((j, t) for t, j in _live_ends(sim))
    assert set(ends) == {0, 1} and ends[0] > before[0]
    assert sum(1 for e in sim._heap if e[3] == 0) == 2  # the stale end stays in the heap, dropped when popped


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "contention-greedy"])
def test_a_replay_ends_every_job_where_pushing_every_rerating_did(policy: str) -> None:
    """The same decisions and the same ends, bit for bit, as the simulator that pushed every re-rating: only the
    events that changed nothing are gone."""
    trace = load_trace("synthetic:500,iat=20")
    cluster = parse_cluster("dgx-a100:4")
    new = Simulator(cluster, trace.jobs, make_policy(policy)).run()
    old = AlwaysPush(cluster, trace.jobs, make_policy(policy)).run()
    assert [(j.state, j.end_s, j.first_start_s, j.preemptions, j.run_time) for j in new.jobs] == \
        [(j.state, j.end_s, j.first_start_s, j.preemptions, j.run_time) for j in old.jobs]
    assert new.metrics == old.metrics
    assert new.events < old.events


def _scan(view: ClusterView) -> float:
    return min((r.spec.priority for r in view.running.values() if r.spec.preemptible), default=math.inf)


def test_the_books_priority_index_agrees_with_a_scan_of_the_running_jobs() -> None:
    cluster = small_cluster(nodes=2, gpus=4)
    book = Book(ClusterState(cluster, catalog()), ContentionModel(cluster, catalog()))
    rng = np.random.default_rng(0)
    jobs = [Job(i, dataclasses.replace(job(f"j{i}", 0.0, 1, 100.0), priority=int(rng.integers(-2, 3)),
                                       preemptible=bool(rng.random() < 0.7)), 100.0) for i in range(8)]
    bare = ClusterView(book.state, book.contention, book.running)  # no index: it scans
    assert book.view.lowest_preemptible() == math.inf
    for step in range(300):
        j = jobs[int(rng.integers(len(jobs)))]
        roll = rng.random()
        if j.id in book.running and roll < 0.4:
            book.stop(j, float(step))
            book.requeue(j, float(step))
        elif j.id in book.running and roll < 0.7:  # the API changes its priority while it runs
            book.respec(j, dataclasses.replace(j.spec, priority=int(rng.integers(-2, 3))))
        elif j.id not in book.running:
            free = np.flatnonzero(book.state.free_share >= 1.0)
            if len(free):
                if j.id not in book.pending:
                    book.append(j)
                book.start(j, Placement((int(free[0]),)), float(step))
        assert book.view.lowest_preemptible() == bare.lowest_preemptible() == _scan(book.view)


class _CountingJobs(Mapping[int, Job]):
    """The book's queue mapping, counting the jobs anyone reads from it (iterated either way, or looked up)."""

    read = 0

    def __init__(self, jobs: dict[int, Job]) -> None:
        self.jobs = jobs

    def __getitem__(self, job_id: int) -> Job:
        _CountingJobs.read += 1
        return self.jobs[job_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)

    def values(self) -> _CountingValues:  # type: ignore[override]
        return _CountingValues(self.jobs)


class _CountingValues:
    def __init__(self, jobs: dict[int, Job]) -> None:
        self.jobs = jobs

    def __iter__(self) -> Iterator[Job]:
        for j in self.jobs.values():
            _CountingJobs.read += 1
            yield j

    def __reversed__(self) -> Iterator[Job]:
        for j in reversed(self.jobs.values()):
            _CountingJobs.read += 1
            yield j


class _CountingSim(Simulator):
    """The simulator offering its queue through `_CountingJobs`: one wrapper per mapping of the book's, so that the
    queue is the same object from call to call while the book keeps it (as the book's own is)."""

    def _queue(self) -> Collection[Job]:
        q = super()._queue()
        assert isinstance(q, Queued)
        wrapped = getattr(self, "_wrapped", None)
        if wrapped is None or wrapped.jobs is not q._jobs:
            wrapped = self._wrapped = _CountingJobs(q._jobs)  # type: ignore[arg-type]
        return Queued(wrapped, q.priorities, q.demands, book=self.book)  # (the book's: followed as the book's own)


def _reads_per_instant(depth: int, policy: str = "fifo", hog: int = 4, size: int = 1,
                       window: Callable[[], None] = lambda: None) -> float:
    """Jobs read from the queue per scheduling instant while `depth` jobs of `size` GPUs wait behind a long job
    holding `hog` of the cluster's 4 GPUs (nothing fits; for fifo, a blocked head). `window` is called as the 50
    instants measured begin."""
    jobs = [job("hog", 0.0, hog, 1e6), job("head", 1.0, 4, 100.0)]
    jobs += [job(f"j{i}", 2.0 + i * 1e-3, size, 100.0) for i in range(depth)]
    jobs += [job(f"late{i}", 10.0 + i, size, 100.0) for i in range(50)]  # 50 instants on the deep queue
    sim = _CountingSim(small_cluster(nodes=1, gpus=4), jobs, make_policy(policy))
    while sim.next_event_time() < 9.0:
        sim.advance()
        sim.schedule()
    assert len(sim.pending) == depth + 1 and len(sim.running) == 1
    _CountingJobs.read = 0
    window()
    for _ in range(50):
        sim.advance()
        sim.schedule()
    assert len(sim.pending) == depth + 51 and len(sim.running) == 1
    return _CountingJobs.read / 50


def test_the_work_of_an_instant_does_not_grow_with_the_queue() -> None:
    """fifo behind a blocked head reads the head and stops: the priority frame splits a queue of one priority into
    bands without reading a job, so a queue ten times as deep costs an instant nothing more (it read every job)."""
    shallow, deep = _reads_per_instant(100), _reads_per_instant(1000)
    assert shallow == deep <= 2


@pytest.mark.parametrize("policy", ["contention-greedy", "tiresias"])
def test_a_policy_that_backfills_reads_only_the_new_jobs_of_a_queue_that_fits_nowhere(policy: str) -> None:
    """Behind a full cluster every queued job is known to fit nowhere until GPUs free: an instant reads the job
    that arrived, the one the walk back from it stops at, the head (named waiting) and the priority frame's look at
    the band, not the whole queue again (it read all 1,000 or 100 at each instant; tiresias to bucket it by queue)."""
    shallow, deep = _reads_per_instant(100, policy), _reads_per_instant(1000, policy)
    assert shallow == deep <= 4


def test_tiresias_tries_one_job_of_a_kind_that_failed_on_the_plan_as_it_stands(monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    """With one GPU free and only 2-GPU jobs queued (no victims: the long job is in the top queue too), a call tries
    the first 2-GPU job and skips the others, alike and on the same plan (it tried every one at each call)."""
    tiresias = type(make_policy("tiresias"))
    tried = []
    fit_or_preempt = tiresias._fit_or_preempt

    def counting(self: object, *args: object) -> object:
        tried.append(1)
        return fit_or_preempt(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(tiresias, "_fit_or_preempt", counting)
    counts = []
    for depth in (100, 1000):
        _reads_per_instant(depth, "tiresias", hog=3, size=2, window=tried.clear)
        counts.append(len(tried))
    assert counts[0] == counts[1] <= 2 * 50  # a call or two an instant, one job tried at each


def test_a_queue_of_several_priorities_is_still_split_into_bands() -> None:
    a, b, c = (Job(i, dataclasses.replace(job(f"j{i}", float(i), 1, 10.0), priority=p), 10.0)
               for i, p in enumerate([0, 5, 0]))
    assert [[j.id for j in band] for band in bands(Queued({0: a, 1: b, 2: c}, 2))] == [[1], [0, 2]]
    assert [[j.id for j in band] for band in bands(Queued({0: a, 2: c}, None))] == [[0, 2]]


def test_the_books_count_of_queued_priorities_agrees_with_the_queue() -> None:
    cluster = small_cluster(nodes=2, gpus=4)
    book = Book(ClusterState(cluster, catalog()), ContentionModel(cluster, catalog()))
    rng = np.random.default_rng(1)
    jobs = [Job(i, dataclasses.replace(job(f"j{i}", float(i), 1, 100.0), priority=int(rng.integers(-1, 2))), 100.0)
            for i in range(8)]
    for step in range(400):
        j = jobs[int(rng.integers(len(jobs)))]
        roll = rng.random()
        if j.id in book.running:
            book.stop(j, float(step))
            book.requeue(j, float(step))
        elif j.id in book.pending and roll < 0.3:
            book.respec(j, dataclasses.replace(j.spec, priority=int(rng.integers(-1, 2))))
        elif j.id in book.pending and roll < 0.5:
            book.dequeue(j.id)
        elif j.id in book.pending:
            free = np.flatnonzero(book.state.free_share >= 1.0)
            if len(free):
                book.start(j, Placement((int(free[0]),)), float(step))
        else:
            (book.append if roll < 0.8 else book.enqueue)(j)
        assert book.queue().priorities == len({q.spec.priority for q in book.pending.values()})
    book.pending.pop(next(iter(book.pending)))  # changed behind the book's back: the count is not trusted
    assert book.queue().priorities is None


def test_a_victim_source_that_follows_the_bound_builds_fewer_offers_and_the_same_victims() -> None:
    """Past step 1, step 2 passes over an offer that alone frees as much as the cheapest set found: a source that
    leaves those out (`Bound`) gets the same victims for less work."""
    rng = np.random.default_rng(2)
    freed = [16.0, *rng.choice([0.25, 0.5, 1.0, 2.0, 4.0, 8.0], size=400).tolist()]
    nodes = rng.integers(0, 50, size=len(freed)).tolist()
    lacking = {n: 1.0 for n in range(50)}

    def offers(bound: Bound | None, built: list[int]) -> Iterator[Offer[int, int]]:
        for i, (f, n) in enumerate(zip(freed, nodes, strict=True)):
            if bound is not None and bound.skips(f):
                continue
            built.append(i)
            yield Offer(i, {n: min(f, 1.0) if f >= 1 else f * 2}, f)

    plain: list[int] = []
    bounded: list[int] = []
    bound = Bound()
    want = choose_victims(offers(None, plain), lacking, takers=lambda s: False)
    got = choose_victims(offers(bound, bounded), lacking, takers=lambda s: False, bound=bound)
    assert got == want and want != [0]  # the 16-GPU first victim was replaced by a cheaper set
    assert len(plain) == len(freed) and len(bounded) < len(freed) / 2

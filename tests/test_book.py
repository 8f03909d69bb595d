"""The book of running and pending jobs: a start, a stop and a preemption change the allocations, the contention model
and the maps together, return the jobs whose slowdown changed, and accumulate attained service on the job."""

from __future__ import annotations

import random
import sys
from collections import Counter
from dataclasses import replace

import pytest
from conftest import job, small_cluster

from scheduler.core.book import Book, BookError
from scheduler.core.contention import ContentionModel
from scheduler.core.model import Job, JobPhase, Placement
from scheduler.core.progress import in_queue_order
from scheduler.core.state import ClusterState, PlacementError
from scheduler.core.workloads import catalog


@pytest.fixture
def book() -> Book:
    cluster = small_cluster(nodes=1, gpus=4)
    profiles = catalog()
    return Book(ClusterState(cluster, profiles), ContentionModel(cluster, profiles))


def half(job_id: int, submit: float = 0.0) -> Job:
    """Half a GPU of ResNet-50: two of them on one GPU slow each other down."""
    return Job(job_id, job(f"half-{job_id}", submit, 0.5, 1000.0), 1000.0)


def whole(job_id: int, gpus: int, submit: float = 0.0) -> Job:
    return Job(job_id, job(f"whole-{job_id}", submit, gpus, 1000.0), 1000.0)


def test_a_start_allocates_places_and_models_the_job_and_leaves_the_queue(book: Book) -> None:
    a = whole(0, 2)
    book.append(a)
    affected = book.start(a, Placement((0, 1), 1.0), 10.0)
    assert affected == {0}  # alone on the cluster: only its own slowdown is new
    assert book.running == {0: a} and book.pending == {}
    assert a.state is JobPhase.RUNNING and a.placement == Placement((0, 1), 1.0) and a.start_s == 10.0
    assert book.state.placements[0] == Placement((0, 1), 1.0)
    assert list(book.state.free_share) == [0.0, 0.0, 1.0, 1.0] and book.state.free_whole == 2
    assert book.contention.slowdown(0) == pytest.approx(1.0)
    assert book.view.running[0] is a and book.view.free_whole == 2  # what the policies see is the same book


def test_a_start_beside_a_tenant_returns_both_and_a_stop_returns_the_neighbour(book: Book) -> None:
    a, b = half(0), half(1)
    assert book.start(a, Placement((0,), 0.5), 0.0) == {0}
    alone = book.contention.slowdown(0)
    assert book.start(b, Placement((0,), 0.5), 5.0) == {0, 1}  # it slows the job already on its GPU
    assert book.contention.slowdown(0) > alone
    assert book.state.tenants[0] == [0, 1]
    assert book.stop(b, 25.0) == {0}  # its neighbour runs alone again
    assert book.contention.slowdown(0) == pytest.approx(alone)
    assert 1 not in book.contention.slowdowns() and book.state.tenants[0] == [0]
    assert book.running == {0: a} and b.placement is None and b.start_s is None


def test_a_stop_releases_the_gpus_and_adds_the_run_to_the_attained_service(book: Book) -> None:
    a = whole(0, 2)
    a.attained_gpu_s = 50.0
    book.start(a, Placement((2, 3), 1.0), 100.0)
    assert book.stop(a, 130.0) == set()
    assert a.attained_gpu_s == 50.0 + 30.0 * 2  # held 30 s on two GPUs
    assert 0 not in book.running and 0 not in book.state.placements and 0 not in book.contention.slowdowns()
    assert list(book.state.free_share) == [1.0] * 4 and book.state.free_whole == 4
    book.start(a, Placement((0, 1), 1.0), 200.0)
    book.stop(a, 210.0)
    assert a.attained_gpu_s == 110.0 + 10.0 * 2  # the runs add up


def test_a_stop_before_its_start_adds_no_service(book: Book) -> None:
    a = whole(0, 1)
    book.start(a, Placement((0,), 1.0), 100.0)
    book.stop(a, 99.0)  # a wall clock stepped back
    assert a.attained_gpu_s == 0.0


def test_a_preemption_requeues_the_job_in_its_place(book: Book) -> None:
    early, late = whole(0, 4, submit=0.0), whole(1, 1, submit=5.0)
    book.start(early, Placement((0, 1, 2, 3), 1.0), 0.0)
    book.append(late)
    book.stop(early, 40.0)
    book.requeue(early, 40.0)
    assert list(book.pending) == [0, 1]  # by submission, not at the end
    assert early.state is JobPhase.PENDING and early.queued_since == 40.0 and early.attained_gpu_s == 160.0
    assert book.running == {} and book.state.free_whole == 4 and book.contention.slowdowns() == {}
    assert book.start(early, Placement((0, 1, 2, 3), 1.0), 50.0) == {0}  # and it starts again from the queue
    assert list(book.pending) == [1]


def test_arrivals_go_to_the_end_and_sorting_restores_queue_order(book: Book) -> None:
    later, earlier = whole(0, 1, submit=9.0), whole(1, 1, submit=3.0)
    book.append(later)
    book.append(earlier)
    assert list(book.pending) == [0, 1]
    book.sort_queue()
    assert list(book.pending) == [1, 0]
    book.enqueue(whole(2, 1, submit=5.0))
    assert list(book.pending) == [1, 2, 0]


def test_a_double_start_raises_and_changes_nothing(book: Book) -> None:
    a = whole(0, 1)
    book.start(a, Placement((0,), 1.0), 0.0)
    with pytest.raises(BookError, match="running already"):
        book.start(a, Placement((1,), 1.0), 1.0)
    assert a.placement == Placement((0,), 1.0) and a.start_s == 0.0
    assert list(book.state.free_share) == [0.0, 1.0, 1.0, 1.0] and book.state.placements == {0: Placement((0,), 1.0)}


def test_a_stop_of_a_job_not_running_raises(book: Book) -> None:
    a = whole(0, 1)
    with pytest.raises(BookError, match="not running"):
        book.stop(a, 0.0)
    book.start(a, Placement((0,), 1.0), 0.0)
    book.stop(a, 1.0)
    with pytest.raises(BookError, match="not running"):
        book.stop(a, 2.0)
    assert a.attained_gpu_s == 1.0  # the second stop counted nothing


def test_a_running_job_cannot_be_queued(book: Book) -> None:
    a = whole(0, 1)
    book.start(a, Placement((0,), 1.0), 0.0)
    for queue in (book.append, book.enqueue, lambda j: book.requeue(j, 1.0)):
        with pytest.raises(BookError, match="stop its run"):
            queue(a)
    assert book.pending == {} and a.state is JobPhase.RUNNING and a.queued_since == 0.0


def test_an_invalid_placement_changes_nothing(book: Book) -> None:
    a, b = whole(0, 2), whole(1, 1)
    book.start(a, Placement((0, 1), 1.0), 0.0)
    book.append(b)
    with pytest.raises(PlacementError, match="GPU 1 has 0.000 free"):
        book.start(b, Placement((1,), 1.0), 1.0)
    assert list(book.pending) == [1] and book.running == {0: a} and b.placement is None
    assert b.state is JobPhase.PENDING and 1 not in book.contention.slowdowns()


def test_the_state_and_the_model_must_be_of_one_cluster() -> None:
    profiles = catalog()
    with pytest.raises(ValueError, match="contention"):
        Book(ClusterState(small_cluster(nodes=1), profiles), ContentionModel(small_cluster(nodes=2), profiles))


def test_a_queue_drained_from_its_head_is_packed_again_in_queue_order(book: Book) -> None:
    """A dict keeps a hole for each popped key, and reading its first value walks past them all: the book packs its
    queue in place as holes pile up, so a queue drained from its head (no arrivals to make the dict pack itself) does
    not make each look at its head cost every job started since. The order, the jobs and the counts stay as they
    were."""
    jobs = [whole(i, 1, submit=float(i)) for i in range(20_000)]
    for j in jobs:
        book.append(j)
    full, mapping = sys.getsizeof(book.pending), book.pending
    for j in jobs[:19_000]:
        book.dequeue(j.id)
        assert next(iter(book.pending.values())) is jobs[j.id + 1]
    assert list(book.pending.values()) == jobs[19_000:]
    assert sys.getsizeof(book.pending) < full / 4 and book.pending is mapping  # packed in place
    queued = book.queue()
    assert queued.priorities == 1 and list(queued) == jobs[19_000:]
    book.dequeue(jobs[-1].id)
    assert list(book.queue()) == jobs[19_000:-1]


def test_a_job_put_back_in_the_queue_lands_where_a_sort_would_put_it(book: Book) -> None:
    """The book inserts one requeued job among jobs in queue order instead of sorting them all: on random sequences of
    arrivals (some out of order, which the book must then sort), requeues, enqueues, departures, sorts and specs that
    move a queued job, its queue is, after every step, the one the book made when it sorted every queue (the
    reference below), and the demands it counts are those of its jobs."""
    rng = random.Random(7)
    for _ in range(30):
        for job_id in list(book.pending):
            book.dequeue(job_id)
        book.sort_queue()
        ref: dict[int, Job] = {}
        jobs = [whole(i, rng.choice([1, 2, 4]), submit=float(rng.randrange(40))) for i in range(60)]
        out = list(jobs)
        for step in range(150):
            op = rng.random()
            if out and op < 0.45:
                j = out.pop(rng.randrange(len(out)) if rng.random() < 0.2 else 0)
                if rng.random() < 0.5:
                    book.append(j)
                    ref[j.id] = j
                else:
                    (book.requeue(j, float(step)) if rng.random() < 0.5 else book.enqueue(j))
                    ref[j.id] = j
                    ref = in_queue_order(ref)
            elif ref and op < 0.8:
                j = ref[rng.choice(list(ref))]
                book.dequeue(j.id)
                del ref[j.id]
                out.append(j)
            elif op < 0.85:
                book.sort_queue()
                ref = in_queue_order(ref)
            elif ref and op < 0.9:  # a queued job's spec moves it in queue order: it stays put until a sort
                j = ref[rng.choice(list(ref))]
                book.respec(j, replace(j.spec, submit_s=float(rng.randrange(40))))
            elif ref:  # a queued job requeued where it is (the book sorts then, as it did)
                j = ref[rng.choice(list(ref))]
                book.requeue(j, float(step))
                ref = in_queue_order(ref)
            if rng.random() < 0.4:  # (read in order now and then: several jobs put back are merged at once)
                assert list(book.pending) == list(ref), step
                assert list(book.queue()) == list(ref.values())
            assert set(book.unsorted) == set(ref)
            assert book.queue().demands == Counter(j.spec.gpu_demand for j in ref.values())  # (no zero counts kept)


def test_jobs_put_back_wait_at_the_end_until_the_queue_is_read_in_order(book: Book) -> None:
    """A job put back is appended (the queue is not copied at each preemption) and merged into its place when the
    queue is next read in order, in a new mapping; `appended_since` a mark gives what was appended after it and is
    still queued, in the order appended, until the book sorts its queue into a new mapping."""
    jobs = [whole(i, 1, submit=float(i)) for i in range(6)]
    for j in jobs[1:4]:
        book.append(j)
    queue = book.queue()
    mark, raw = queue.mark, book.unsorted
    book.append(jobs[4])
    book.requeue(jobs[0], 5.0)  # before every queued job
    book.append(jobs[5])
    book.dequeue(4)
    assert book.unsorted is raw and list(raw) == [1, 2, 3, 0, 5] and book.has_put_back
    later = book.queue()
    assert later.appended_since(mark) == [jobs[0], jobs[5]]
    assert list(later.unsorted) == [1, 2, 3, 0, 5]  # (not sorted by a lookup or a count)
    assert list(later) == [jobs[0], jobs[1], jobs[2], jobs[3], jobs[5]]  # read in order: merged
    assert book.unsorted is not raw and not book.has_put_back
    assert later.appended_since(mark) is None  # a new mapping: the mark no longer counts
    book.enqueue(jobs[4])
    assert list(book.pending) == [0, 1, 2, 3, 4, 5]

"""The book's queue index (`policies.queue_scan.QueueIndex`): each group's first job from a position on, for every
group and for each one (`first`), as reading the queue itself finds them, whatever jobs left it and whichever groups a
scan skips."""

from __future__ import annotations

import random

from conftest import job, small_cluster

from policies.queue_scan import NONE, QueueIndex, position
from scheduler.core.book import Book
from scheduler.core.contention import ContentionModel
from scheduler.core.model import Job
from scheduler.core.state import ClusterState
from scheduler.core.workloads import catalog


def test_heads_are_each_groups_first_job_from_a_position_on_in_queue_order() -> None:
    rng = random.Random(3)
    for _ in range(40):
        jobs = [Job(i, job(f"j{i}", float(rng.randrange(50)), 1.0, 10.0), 10.0) for i in range(rng.randrange(1, 80))]
        jobs.sort(key=position)
        mapping = {j.id: j for j in jobs}
        group = {j.id: rng.randrange(6) for j in jobs}
        index = QueueIndex.build(mapping, None, lambda view, j, group=group: group[j.id])  # type: ignore[arg-type]
        assert index is not None
        for j in rng.sample(jobs, rng.randrange(len(jobs))):  # jobs that left the queue, from anywhere in it
            del mapping[j.id]
            index.remove(j.id)
        live = list(mapping.values())
        for start in [NONE, *(position(j) for j in rng.sample(jobs, min(5, len(jobs))))]:
            skip = set(rng.sample(range(6), rng.randrange(3)))
            want: dict[int, tuple[float, int]] = {}
            for j in live:  # the queue read job by job: each group's first from `start` on
                if position(j) >= start and group[j.id] not in skip and group[j.id] not in want:
                    want[group[j.id]] = position(j)
            assert index.heads(start, skip) == sorted((p, k) for k, p in want.items())
            for k in set(range(6)) - skip:  # each group's own first from `start` on (NONE: its first live one)
                assert index.first(k, start) == want.get(k)
            first = next((j for j in live if position(j) >= start), None)
            assert index.head(start) is first
            assert index.head(start, index.heads(start, skip)) is first  # (the groups skipped read again)


def test_an_index_that_catches_up_with_the_book_is_the_one_built_afresh() -> None:
    """Followed through the book's appends (`Queued.appended_since`: arrivals, and jobs put back anywhere, which the
    index puts in their places), over random arrivals, put-backs, departures and sorts, the index holds each group's
    jobs as an index built from the queue in order does, and says so unless the book made a new mapping."""
    rng = random.Random(11)
    cluster = small_cluster()
    for _ in range(20):
        book = Book(ClusterState(cluster, catalog()), ContentionModel(cluster, catalog()))
        jobs = [Job(i, job(f"j{i}", float(i // 3), 1.0, 10.0), 10.0) for i in range(120)]
        group = {j.id: rng.randrange(5) for j in jobs}
        key = lambda view, j, group=group: group[j.id]  # noqa: E731
        out, arrived = list(jobs), 0
        index = None
        for step in range(200):
            op = rng.random()
            queued = list(book.unsorted.values())
            if op < 0.4 and arrived < len(jobs):
                book.append(jobs[arrived])
                out.remove(jobs[arrived])
                arrived += 1
            elif op < 0.6 and queued:
                j = rng.choice(queued)
                book.dequeue(j.id)
                out.append(j)
                if index is not None and j.id in index.pos:
                    index.remove(j.id)  # (a departure the policy sees: the job it placed)
            elif op < 0.85:
                back = [j for j in out if j.id < arrived]
                if back:
                    j = rng.choice(back)
                    out.remove(j)
                    book.requeue(j, float(step))
            elif op < 0.9:
                book.sort_queue()
            queue = book.queue()
            fresh = QueueIndex.build(dict(sorted(book.unsorted.items(), key=lambda kv: position(kv[1]))), None,
                                     key)  # type: ignore[arg-type]
            assert fresh is not None
            if index is not None and index.mapping is queue.unsorted and index.catch_up(queue.appended_since(index.mark)):
                live = {k: g[index._lo[k]:] for k, g in index.groups.items() if g[index._lo[k]:]}
                assert live == {k: g for k, g in fresh.groups.items() if g}, step
                assert index.pos == fresh.pos
            else:
                index = QueueIndex.build(queue.mapping, None, key)  # type: ignore[arg-type]
                assert index is not None
            index.mark = queue.mark

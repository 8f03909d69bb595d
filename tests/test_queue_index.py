"""The book's queue index (`policies.queue_scan.QueueIndex`): each group's first job from a position on, for every
group, as reading the queue itself finds them, whatever jobs left it and whichever groups a scan skips."""

from __future__ import annotations

import random

from conftest import job

from policies.queue_scan import NONE, QueueIndex, position
from scheduler.core.model import Job


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
            first = next((j for j in live if position(j) >= start), None)
            assert index.head(start) is first
            assert index.head(start, index.heads(start, skip)) is first  # (the groups skipped read again)

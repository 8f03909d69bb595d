"""Replays that scale (issue 48): the work per event does not grow with the running set, and events that change
nothing are not pushed, while every decision and every end stays as it was."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from conftest import job, small_cluster

from policies import make_policy
from scheduler.core.book import Book
from scheduler.core.contention import ContentionModel
from scheduler.core.model import Job, Placement, parse_cluster
from scheduler.core.progress import progress_rate
from scheduler.core.simulator import _FINISH, Simulator
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.traces import load_trace
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

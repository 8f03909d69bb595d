"""The victim search's cover floors kept from one search to the next (`policies.victim_floors.CoverFloors`).

* Kept floors are the floors computed afresh: a busy cluster changes step by step (jobs end, start, change queue
  level, GPUs close, the plan takes and gives back GPUs) and at every step the kept table must equal a new one's,
  node for node, while it recomputes far fewer nodes than a new one does.
* A node's floor (`_least_cover`) is the least cost of a set of items that covers, against every subset.
* With the floors (and the floor they give `Bound`), `pick_victims` returns what it returns without them.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from dataclasses import replace

import numpy as np
import pytest
from test_victim_floors import _busy_view, _spec

from policies.placement import Planner
from policies.victim_choice import pick_victims
from policies.victim_floors import SLACK, CoverFloors, _least_cover, share_freed
from scheduler.core.model import Job, JobPhase, JobSpec, Placement
from scheduler.core.priorities import may_preempt
from scheduler.core.state import ClusterView
from scheduler.core.victims import EPS, Bound


def _step(rng: random.Random, view: ClusterView, jobs: dict[int, Job], levels: dict[int, int], covers: CoverFloors,
          planner: Planner, taken: list[int]) -> Planner:
    """One change to the cluster or the plan (`jobs`: the view's running map); returns the plan the next search
    reads. `taken`: the GPU the plan took at the last step, if it did (a job may start there next)."""
    state = view._state
    if taken and rng.random() < 0.5:  # the call's plan carried out: a job starts where the plan took a GPU
        g = taken.pop()
        s = _spec(f"p{g}", 1.0)
        if state.check(s, Placement((g,), 1.0)) is None:
            j = Job(max(jobs, default=100) + 1000, s, s.duration_s)
            state.allocate(j.id, s, Placement((g,), 1.0))
            view._contention.add(j.id, s, Placement((g,), 1.0))
            j.state, j.placement, j.start_s = JobPhase.RUNNING, Placement((g,), 1.0), 0.0
            jobs[j.id] = j
            levels[j.id] = rng.choice([1, 2])
            return Planner(view)  # (the same free shares as the plan the floors last read)
    taken.clear()
    kind = rng.random()
    if kind < 0.3 and jobs:  # a job ends; another of its size may start where it was
        victim = rng.choice(sorted(jobs))
        p = state.release(victim)
        view._contention.remove(victim)
        del jobs[victim]
        old = max(jobs, default=100) + 1000
        s = _spec(f"n{old}", p.share if p.share < 1 else float(len(p.gpus)))
        if rng.random() < 0.7 and state.check(s, p) is None:  # (not where a GPU closed)
            j = Job(old, s, s.duration_s)
            state.allocate(j.id, s, p)
            view._contention.add(j.id, s, p)
            j.state, j.placement, j.start_s = JobPhase.RUNNING, p, 0.0
            jobs[j.id] = j
            levels[j.id] = rng.choice([0, 1, 2])
            covers.relevel(j.id)
        return Planner(view)
    if kind < 0.6 and jobs:  # a job changes level (or leaves the index)
        job_id = rng.choice(sorted(jobs))
        if rng.random() < 0.2:
            levels.pop(job_id, None)
        else:
            levels[job_id] = rng.choice([0, 1, 2])
        covers.relevel(job_id)
        return planner
    if kind < 0.7:  # a GPU closes or reopens
        g = rng.randrange(view.cluster.num_gpus)
        closed = dict(state.closed)
        if g in closed:
            del closed[g]
        else:
            closed[g] = "drain"
        state.set_closed(closed)
        return Planner(view)
    if kind < 0.85 and jobs:  # the plan gives a victim back
        planner.give_back(jobs[rng.choice(sorted(jobs))])
        return planner
    free = np.flatnonzero(planner.free_share >= 1.0 - EPS).tolist()
    if free:  # the plan takes a free GPU
        g = rng.choice(free)
        planner.take(_spec("placed", 1.0), Placement((g,), 1.0))
        taken.append(g)
    return planner


@pytest.mark.parametrize("seed", range(30))
def test_kept_floors_are_the_floors_computed_afresh(seed: int) -> None:
    rng = random.Random(seed)
    busy = _busy_view(rng, nodes=rng.choice([3, 4, 6]), gpus=8)
    jobs = dict(busy.running)
    view = ClusterView(busy._state, busy._contention, jobs)
    levels = {j: rng.choice([0, 1, 2]) for j in view.running}
    covers, planner = CoverFloors(), Planner(view)
    fresh_work = fresh_reads = 0
    taken: list[int] = []
    for _ in range(60):
        planner = _step(rng, view, jobs, levels, covers, planner, taken)
        for workers, level in ((1, 0), (2, 0), (1, 1)):
            spec = _spec("new", float(workers))
            kept = covers.floors(view, planner, spec, level, levels).copy()
            fresh = CoverFloors()
            expected = fresh.floors(view, planner, spec, level, levels)
            fresh_work += fresh.recomputed
            fresh_reads += fresh.read
            assert kept.tolist() == expected.tolist(), (seed, workers, level)
    # Kept: only what changed is read again, once for all keys, and computed again per key.
    assert covers.read < fresh_reads / 6
    assert covers.recomputed < fresh_work / 2


def _brute_least_cover(items: list[tuple[float, float]], target: float) -> float:
    best = float("inf")
    for r in range(1, len(items) + 1):
        for subset in itertools.combinations(items, r):
            if sum(g for g, _ in subset) >= target:
                best = min(best, sum(c for _, c in subset))
    return best


@pytest.mark.parametrize("seed", range(200))
def test_a_node_floor_is_the_least_cover(seed: int) -> None:
    rng = random.Random(seed)
    items = [(rng.choice([0.25, 1 / 3, 0.5, 2 / 3, 0.75, 1.0, 2.0]), rng.choice([0.25, 0.5, 0.75, 1.0, 2.0, 4.0]))
             for _ in range(rng.randrange(0, 9))]
    target = rng.choice([1.0, 2.0, 3.0]) - EPS
    assert _least_cover(items, target) == pytest.approx(_brute_least_cover(items, target), abs=1e-12)


def _with_and_without_covers(seed: int) -> int:
    """Asserts the victims are the same; returns how many searches the floor stopped early."""
    rng = random.Random(seed)
    view = _busy_view(rng, nodes=rng.choice([2, 3, 4]), gpus=8)
    levels = {j: 1 for j in view.running}
    stopped = 0
    for need in (1.0, 2.0, 4.0):
        victims = list(view.running.values())
        rng.shuffle(victims)
        new = _spec("new", need)
        without = pick_victims(view, Planner(view), new, victims, bound=Bound())
        planner, bound = Planner(view), Bound()
        covers = functools.partial(CoverFloors().floors, view, planner, new, 0, levels)
        with_covers = pick_victims(view, planner, new, victims, bound=bound, covers=covers)
        assert [v.id for v in with_covers] == [v.id for v in without], (seed, need)
        stopped += bound.floor >= bound.value - EPS
    return stopped


@pytest.mark.parametrize("seed", range(100))
def test_the_cover_floors_leave_the_chosen_victims_as_they_were(seed: int) -> None:
    _with_and_without_covers(seed)


def test_the_floor_stops_searches() -> None:
    assert sum(_with_and_without_covers(1000 + seed) for seed in range(40)) > 0


def _reference_floors(view: ClusterView, planner: Planner, spec: JobSpec, level: int,
                      levels: dict[int, int]) -> list[float]:
    """Per node, the least cover of its victims (running, at a level below `level`, that `spec` may preempt) with
    their gains there on the plan, from the view's placements: what `CoverFloors.floors` must give, read afresh."""
    cluster = view.cluster
    out = []
    for n in range(cluster.num_nodes):
        need = spec.workers - float(planner.node_free[n])
        if need <= 0:
            out.append(math.inf)
            continue
        items = []
        for job_id, job in view.running.items():
            p = view.placement(job_id)
            on_node = [g for g in p.gpus if int(cluster.gpu_node[g]) == n]
            if on_node and levels.get(job_id, 0) > level and may_preempt(job.spec, spec, equals=True):
                gain = sum(share_freed(p.share, float(planner.free_share[g])) for g in on_node)
                items.append((gain, job.spec.gpu_demand))
        out.append(_brute_least_cover(items, need - EPS - SLACK) - SLACK)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_kept_floors_count_the_victims_a_fresh_reading_counts(seed: int) -> None:
    """Against floors found from the running jobs themselves (not through the nodes' tenants as kept): their levels
    as they change, the searching job's level and priority (whom it may preempt)."""
    rng = random.Random(seed)
    busy = _busy_view(rng, nodes=rng.choice([2, 3]), gpus=8)
    jobs = dict(busy.running)
    view = ClusterView(busy._state, busy._contention, jobs)
    levels = {j: rng.choice([0, 1, 2]) for j in view.running}
    covers, planner = CoverFloors(), Planner(view)
    taken: list[int] = []
    for _ in range(25):
        planner = _step(rng, view, jobs, levels, covers, planner, taken)
        for workers, level, priority in ((1, 0, 0), (2, 1, 0), (1, 0, -1)):
            spec = replace(_spec("new", float(workers)), priority=priority)
            kept = covers.floors(view, planner, spec, level, levels).tolist()
            assert kept == pytest.approx(_reference_floors(view, planner, spec, level, levels), abs=1e-12), \
                (seed, workers, level, priority)

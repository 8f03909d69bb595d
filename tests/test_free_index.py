"""The plan's index of free GPUs (`policies.free_index.FreeIndex`) and the searches that read it.

The index is kept as a plan changes (`Planner.take`, `Planner.give_back`); it must always be what building it afresh
from the plan's arrays gives, and every search that reads it must answer exactly as the scan over every node or GPU
does (a planner that never builds one). Cases: the random partly busy clusters of `tests/test_planner_room.py` (GPUs of
two memory sizes, two nodes a rack, shares of two users), random jobs (shares including ones whose sums round, 1 to 24
GPUs, node constraints), the plan going on by random placements and preemptions.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from policies import placement, placement_topology
from policies.free_index import FreeIndex
from policies.placement import Planner
from scheduler.core.model import Job, JobPhase, JobSpec, Placement
from scheduler.core.state import EPS, ClusterView
from tests.test_planner_room import MODELS, _spec, _view

ROUNDING = [0.1, 0.2, 0.3]  # shares whose sums are not exact in binary: free shares a hair off 0 or 1


def _afresh(planner: Planner) -> FreeIndex:
    c = planner.cluster
    return FreeIndex(planner.node_free, planner.free_share, c.node_rack, c.num_racks, int(c.max_gpus_per_node))


@pytest.fixture(autouse=True)
def _index_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans build their index at the first search that may read it (they wait `_INDEX_AFTER` searches otherwise)."""
    monkeypatch.setattr("policies.placement._INDEX_AFTER", 0)


def _same_index(kept: FreeIndex, fresh: FreeIndex) -> None:
    assert kept.free == fresh.free
    assert kept.counts == fresh.counts
    assert kept.rack_free.tolist() == fresh.rack_free.tolist()
    assert kept.shares == fresh.shares
    assert (kept.near_one, kept.above) == (fresh.near_one, fresh.above)
    assert kept.max_share(sum(kept.free)) == fresh.max_share(sum(fresh.free))
    for k in range(1, len(kept.counts)):
        if fresh.counts[k]:
            assert kept.lowest(k) == fresh.lowest(k), k
    for s in fresh.shares:
        assert kept.lowest_with_share(s) == fresh.lowest_with_share(s), s
    for w in range(1, len(kept.counts) + 1):
        assert (kept.best(w), kept.worst(w), kept.first(w)) == (fresh.best(w), fresh.worst(w), fresh.first(w)), w


def _share_spec(rng: random.Random, i: int) -> JobSpec:
    return JobSpec(name=f"r{i}", submit_s=0.0, model=rng.choice(MODELS[:2]), duration_s=3600.0,
                   num_gpus=rng.choice(ROUNDING), user=rng.choice(["ann", "bob", "cy"]))


def _answers(planner: Planner, spec: JobSpec, seed: int) -> tuple[object, ...]:
    """Every search that may read the index, for `spec`."""
    if spec.num_gpus < 1:
        return (planner.max_free_share, planner.may_fit(spec), planner.packed_share(spec), planner.empty_gpu_share(spec), planner.best_fit(spec), planner.misfits)
    return (planner.consolidated(spec, "best"), planner.consolidated(spec, "first"),
            planner.consolidated(spec, "worst"), planner.topology_fit(spec), planner.whole_servers_fit(spec),
            planner.spread(spec, np.random.default_rng(seed)), planner.misfits)


def _step(rng: random.Random, view: ClusterView, planners: list[Planner], running: list[int], i: int) -> None:
    """The plan goes on, alike in every planner: a preemption, or a placement the first one finds."""
    if running and rng.random() < 0.3:
        victim = view.running[running.pop(rng.randrange(len(running)))]
        for p in planners:
            p.give_back(victim)
        return
    spec = _share_spec(rng, i) if rng.random() < 0.3 else _spec(rng, view, i)
    how = rng.random()

    def found(p: Planner) -> Placement | None:  # (each planner searches: what it notes of misfits stays alike)
        if how < 0.7:
            return p.best_fit(spec)
        return p.spread(spec, np.random.default_rng(i)) if spec.num_gpus >= 1 else p.empty_gpu_share(spec)

    placements = [found(p) for p in planners]
    assert all(p == placements[0] for p in placements), spec
    placement = placements[0]
    if placement is not None:
        for p in planners:
            p.take(spec, placement)


@pytest.mark.parametrize("seed", range(40))
def test_the_kept_index_is_the_index_built_afresh(seed: int) -> None:
    rng = random.Random(seed)
    view = _view(rng)
    planner = Planner(view)
    assert planner.index is not None
    running = sorted(view.running)
    for i in range(40):
        _step(rng, view, [planner], running, i)
        assert planner._index is not None
        _same_index(planner._index, _afresh(planner))
        assert planner._index.free == planner.node_free.tolist()
        top = planner._index.max_share(planner.free_whole)
        assert top is None and planner.free_share.max() <= 0.0 or top == planner.free_share.max()
        partly = [g for g, s in enumerate(planner.free_share.tolist()) if 0.0 < s < 1.0]
        assert sorted(g for s in planner._index.shares for g in partly if planner.free_share[g] == s) == partly


@pytest.mark.parametrize("seed", range(60))
def test_the_searches_answer_as_the_scans(seed: int) -> None:
    rng = random.Random(seed)
    view = _view(rng)
    indexed, scanned = Planner(view), Planner(view)
    scanned._indexable = False  # never builds an index: every search scans
    running = sorted(view.running)
    for i in range(30):
        probes = [_spec(rng, view, 100 + k) for k in range(6)] + [_share_spec(rng, 100 + k) for k in range(3)]
        for k, spec in enumerate(probes):
            assert _answers(indexed, spec, k) == _answers(scanned, spec, k), spec
        _step(rng, view, [indexed, scanned], running, i)
        assert scanned._index is None
        for name in ("free_share", "used_mem", "node_free"):
            assert getattr(indexed, name).tobytes() == getattr(scanned, name).tobytes(), name


def test_a_scratch_plan_scans_and_leaves_the_index_as_it_was() -> None:
    rng = random.Random(7)
    view = _view(rng)
    planner = Planner(view)
    assert planner.index is not None
    victims = [view.running[j] for j in sorted(view.running)[:3]]
    scratch = planner.without(victims)
    assert scratch._index is None and scratch.index is None
    spec = _spec(rng, view, 0)
    scratch.best_fit(spec)
    _same_index(planner.index, _afresh(planner))


def _gang_view(rng: random.Random) -> ClusterView:
    """Four to six nodes of 8 GPUs, some of them shared, and gangs of 9 to 24 whole GPUs over several nodes: victims
    that `Planner.give_back` counts over arrays (more than `_SCALAR_TAKE` GPUs)."""
    view = _view(rng)
    while view.cluster.num_nodes < 4 or view.cluster.max_gpus_per_node != 8 or view.free_whole < 9:
        view = _view(rng)
    state, model, jobs = view._state, view._contention, dict(view.running)
    free = [g for g, s in enumerate(view.free_share.tolist()) if s >= 1.0]
    rng.shuffle(free)
    while len(free) >= 9:
        gpus = tuple(sorted(free[:rng.randint(9, min(24, len(free)))]))
        del free[:len(gpus)]
        spec = JobSpec(name=f"g{len(jobs)}", submit_s=0.0, model=MODELS[0], duration_s=1e6, num_gpus=float(len(gpus)))
        job = Job(1000 + len(jobs), spec, spec.duration_s)
        state.allocate(job.id, spec, Placement(gpus))
        model.add(job.id, spec, Placement(gpus))
        job.state, job.placement, job.start_s = JobPhase.RUNNING, Placement(gpus), 0.0
        jobs[job.id] = job
    return ClusterView(state, model, jobs)


@pytest.mark.parametrize("seed", range(30))
def test_a_large_gang_given_back_leaves_the_plan_as_one_gpu_at_a_time(seed: int,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`give_back` of a gang over `_SCALAR_TAKE` GPUs (over arrays) leaves the plan as giving back each GPU in turn
    does, bit for bit, and its index as one built afresh; among jobs taken and given back in a random order."""
    rng = random.Random(seed)
    view = _gang_view(rng)
    arrays, each = Planner(view), Planner(view)
    assert arrays.index is not None and each.index is not None
    victims = [view.running[j] for j in sorted(view.running)]
    rng.shuffle(victims)
    assert any(len(view.placement(v.id).gpus) > placement._SCALAR_TAKE for v in victims)
    for i, victim in enumerate(victims):
        arrays.give_back(victim)
        with monkeypatch.context() as m:
            m.setattr(placement, "_SCALAR_TAKE", 10**9)  # (the loop over each GPU)
            each.give_back(victim)
        for name in ("free_share", "used_mem", "node_free"):
            assert getattr(arrays, name).tobytes() == getattr(each, name).tobytes(), name
        assert (arrays.free_whole, arrays.free_capacity) == (each.free_whole, each.free_capacity)
        assert arrays._index is not None
        _same_index(arrays._index, _afresh(arrays))
        spec = _spec(rng, view, i)
        found = arrays.best_fit(spec)
        assert found == each.best_fit(spec), spec
        if found is not None and rng.random() < 0.5:
            arrays.take(spec, found)
            each.take(spec, found)


NEAR = [0.0, -1e-17, 1e-17, 0.25, 0.5, 0.75, 0.3, 1.0 - 1e-16, 1.0 - 2e-10, 1.0, 1.0, 1.0, 1.0 + 2e-16, 1.0 + 1e-10]


@pytest.mark.parametrize("seed", range(30))
def test_the_index_keeps_free_shares_a_rounding_left_a_hair_off(seed: int) -> None:
    """Free shares a hair below 0 or 1 (counted whole free when within EPS of it) or above 1, changed one GPU at a time
    as `Planner.take` and `give_back` tell the index (skipping the changes between exactly 1 and at most 0): the kept
    index is the one built afresh, and its largest free share is the array's."""
    rng = random.Random(seed)
    nodes, per = rng.randint(2, 6), rng.choice([4, 8])
    share = np.array([rng.choice(NEAR) for _ in range(nodes * per)])
    node_rack = np.array([n // 2 for n in range(nodes)])

    def node_free() -> np.ndarray:
        return (share.reshape(nodes, per) >= 1.0 - EPS).sum(axis=1).astype(np.int64)

    kept = FreeIndex(node_free(), share, node_rack, int(node_rack.max()) + 1, per)
    for _ in range(60):
        g, after = rng.randrange(len(share)), rng.choice(NEAR)
        before, share[g] = float(share[g]), after
        if 0.0 < before != 1.0 or 0.0 < after != 1.0:
            kept.share_changed(g, before, after)
        kept.moved(g // per, int(node_free()[g // per]))
        fresh = FreeIndex(node_free(), share, node_rack, int(node_rack.max()) + 1, per)
        _same_index(kept, fresh)
        top = kept.max_share(int(node_free().sum()))
        assert top == share.max() if share.max() > 0.0 else top is None


@pytest.mark.parametrize("seed", range(40))
def test_the_tightest_node_rack_by_rack_is_the_sorts_first(seed: int) -> None:
    """`topology_fit`'s one-node search rack by rack picks the node the sort of every node that holds the gang by
    (its rack's free GPUs, its own, its number) puts first: random racks of 1 to 5 nodes of up to 8 free GPUs."""
    rng = random.Random(seed)
    sizes = [rng.randint(1, 5) for _ in range(rng.randint(1, 12))]
    node_rack = np.repeat(np.arange(len(sizes)), sizes)
    free = np.array([rng.choice([0, 0, 1, 2, 3, 4, 6, 8]) for _ in node_rack], dtype=np.int64)
    rack_free = np.bincount(node_rack, weights=free, minlength=len(sizes)).astype(np.int64)
    starts = np.searchsorted(node_rack, np.arange(len(sizes)))
    for w in range(1, 9):
        holding = [n for n in range(len(free)) if free[n] >= w]
        want = min(holding, key=lambda n: (rack_free[node_rack[n]], free[n], n)) if holding else -1
        assert placement_topology._tightest_node(free, rack_free, starts, w, 8) == want, w


def test_a_plan_searched_a_few_times_scans_then_builds_its_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the index costs several scans: a plan answers its first `_INDEX_AFTER` searches by scanning, and
    the same searches afterwards from the index, alike."""
    monkeypatch.setattr("policies.placement._INDEX_AFTER", 3)
    view = _view(random.Random(1))
    planner = Planner(view)
    spec = JobSpec(name="q", submit_s=0.0, model=MODELS[0], duration_s=3600.0, num_gpus=2.0, user="ann")
    first = [planner.consolidated(spec) for _ in range(3)]
    assert planner._index is None
    later = [planner.consolidated(spec) for _ in range(3)]
    assert planner._index is not None and later == first

"""`Planner.has_room` answers what `Planner.candidates` finds, without the search.

The `rl:` frame's preemption orders ask only whether each job they pass fits on free capacity (`_Frame._passing`), so
they ask `has_room`. It must say "room" exactly where the searches find a placement, and leave the plan's misfits
(what `may_fit` refuses afterwards) as the searches leave them: random partly busy clusters (whole-GPU gangs, GPU
shares two to four to a GPU, GPUs of two memory sizes), random jobs (shares, 1 to 24 GPUs, large and small models,
node constraints), asked in a random order of two planners of the same view, one by each.
"""

from __future__ import annotations

import random

import pytest

from policies import placement as placement_module
from policies.placement import Planner
from scheduler.core.constraints import Constraints
from scheduler.core.contention import ContentionModel
from scheduler.core.model import (
    Cluster,
    ClusterSpec,
    Job,
    JobPhase,
    JobSpec,
    NodeGroupSpec,
    NodeTypeSpec,
    Placement,
    build_cluster,
)
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.workloads import catalog

MODELS = ["ResNet-50-bs64", "MobileNetV3", "Transformer-XL", "ResNet-50-bs128", "GPT-1.3B"]  # the last: 80 GB only
SHARES = [0.25, 0.5, 0.75]


def _cluster(rng: random.Random, gpus: int) -> Cluster:
    """Two to six nodes, 32 GB or 80 GB GPUs, or some of each (a large model fits on the 80 GB ones only)."""
    groups = [NodeGroupSpec(count=rng.randint(1, 3), node=NodeTypeSpec(gpu=gpu, gpus_per_node=gpus, interconnect="nvlink",
                                                                   nic_gbps=100.0))
              for gpu in rng.choice([["V100-32GB"], ["A100-80GB"], ["V100-32GB", "A100-80GB"]])]
    return build_cluster(ClusterSpec(name="mixed", nodes_per_rack=2, groups=groups))


def _view(rng: random.Random) -> ClusterView:
    gpus = rng.choice([4, 8])
    cluster = _cluster(rng, gpus)
    nodes = cluster.num_nodes
    state, model, jobs = ClusterState(cluster, catalog()), ContentionModel(cluster), {}
    for node in range(nodes):
        g, end = node * gpus, (node + 1) * gpus
        while g < end:
            kind = rng.random()
            if kind < 0.35:  # left free
                g += 1
                continue
            if kind < 0.6 and g + 2 <= end:
                size = min(rng.choice([2, 4]), end - g)
                placements = [(tuple(range(g, g + size)), 1.0)]
                g += size
            else:
                split = rng.choice([(0.5,), (0.25, 0.5), (0.25,) * 4, (1.0,), (0.75,)])
                placements = [((g,), share) for share in split]
                g += 1
            for gpu_list, share in placements:
                s = JobSpec(name=f"j{len(jobs)}", submit_s=0.0, model=rng.choice(MODELS[:2]), duration_s=1e6,
                            num_gpus=share if share < 1 else float(len(gpu_list)), user=rng.choice(["ann", "bob"]))
                j = Job(100 + len(jobs), s, s.duration_s)
                p = Placement(gpu_list, share)
                state.allocate(j.id, s, p)
                model.add(j.id, s, p)
                j.state, j.placement, j.start_s = JobPhase.RUNNING, p, 0.0
                jobs[j.id] = j
    return ClusterView(state, model, jobs)


def _spec(rng: random.Random, view: ClusterView, i: int) -> JobSpec:
    names = view.cluster.node_names
    constraints = rng.choice([None, None, Constraints.make(exclude=[names[0]]),
                              Constraints.make(nodes=list(names[-2:]))])
    gpus = rng.choice(SHARES + [1.0, 1.0, 2.0, 3.0, 4.0, 8.0, 12.0, 24.0])
    return JobSpec(name=f"q{i}", submit_s=0.0, model=rng.choice(MODELS), duration_s=3600.0, num_gpus=gpus,
                   user=rng.choice(["ann", "bob", "cy"]), constraints=constraints)


@pytest.mark.parametrize("seed", range(60))
def test_has_room_is_what_the_searches_find(seed: int) -> None:
    rng = random.Random(seed)
    view = _view(rng)
    specs = [_spec(rng, view, i) for i in range(30)]
    asked, searched = Planner(view), Planner(view)
    rooms = 0
    for spec in specs:
        may = asked.may_fit(spec)
        assert may == searched.may_fit(spec), spec
        if not may:
            continue
        before = (asked.misfits, searched.misfits)
        room, found = asked.has_room(spec), searched.candidates(spec)
        assert room == bool(found), (spec, found)
        assert (asked.misfits != before[0]) == (searched.misfits != before[1]), spec  # the same misfit noted
        rooms += room
        # What `may_fit` refuses from now on is what it refuses after the searches.
        assert [asked.may_fit(s) for s in specs] == [searched.may_fit(s) for s in specs]
        if room and rng.random() < 0.3:  # the plan goes on: both take the same placement
            placement = found[0]
            asked.take(spec, placement)
            searched.take(spec, placement)
    assert rooms or all(not asked.may_fit(s) for s in specs)  # (a case where nothing fits is a case too)



@pytest.mark.parametrize("seed", range(20))
def test_a_large_gangs_take_leaves_the_plan_as_the_loop_over_its_gpus(seed: int, monkeypatch: pytest.MonkeyPatch
                                                                       ) -> None:
    """`Planner.take` counts a gang of more than `_SCALAR_TAKE` whole GPUs over arrays: the free shares, memory, free
    GPUs per node and in all, and the free capacity come out bit for bit as the per-GPU loop leaves them, and so do the
    searches after it. Cases: the random partly busy clusters above, with 8-GPU nodes, gangs of 9 to 24 GPUs."""
    rng = random.Random(seed)
    view = _view(rng)
    while view.cluster.max_gpus_per_node != 8 or view.free_whole <= placement_module._SCALAR_TAKE:
        view = _view(rng)
    by_arrays, by_loop = Planner(view), Planner(view)
    gpus = [g for g in range(view.cluster.num_gpus) if by_arrays.free_share[g] >= 1.0]
    size = rng.randint(placement_module._SCALAR_TAKE + 1, min(len(gpus), 24))
    placement = Placement(tuple(sorted(rng.sample(gpus, size))))
    spec = JobSpec(name="gang", submit_s=0.0, model=rng.choice(MODELS[:2]), duration_s=3600.0, num_gpus=float(size))
    by_arrays.take(spec, placement)
    monkeypatch.setattr(placement_module, "_SCALAR_TAKE", 10**9)  # every GPU by the loop
    by_loop.take(spec, placement)
    for name in ("free_share", "used_mem", "node_free"):
        assert getattr(by_arrays, name).tobytes() == getattr(by_loop, name).tobytes(), name
    assert (by_arrays.free_whole, by_arrays.free_capacity) == (by_loop.free_whole, by_loop.free_capacity)
    assert by_arrays.free_whole == view.free_whole - size
    probe = [_spec(rng, view, i) for i in range(20)]
    assert [by_arrays.candidates(s) for s in probe] == [by_loop.candidates(s) for s in probe]

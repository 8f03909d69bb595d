"""Tiresias' victim search with its floors (`policies.victim_floors`) chooses what it chooses without them.

Random busy clusters of whole-GPU jobs and GPU shares (alone on a GPU, or two to four to a GPU), a starting job of 1
or 2 GPUs or a share, the victims in a random order: `pick_victims` with a `Bound` (step 2 passes over the victims
the floors rule out) must return the very list it returns without one (every victim read).
"""

from __future__ import annotations

import random

import pytest
from conftest import small_cluster, start_run

import policies.victim_floors as floors_module
from policies.placement import Planner
from policies.victim_choice import _room_model, pick_victims
from scheduler.core.contention import ContentionModel
from scheduler.core.model import JobSpec, Placement
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.victims import Bound
from scheduler.core.workloads import catalog

SHARE_SPLITS = [(1.0,), (0.5, 0.5), (0.25, 0.75), (0.25, 0.25, 0.5), (0.25,) * 4, (0.5,), (0.25,), (0.75,),
                (0.25, 0.5)]


def _spec(name: str, gpus: float) -> JobSpec:
    return JobSpec(name=name, submit_s=0.0, num_gpus=gpus, duration_s=1e6, model="ResNet-50-bs64")


def _busy_view(rng: random.Random, nodes: int, gpus: int) -> ClusterView:
    """Every GPU taken by a whole-GPU job (1, 2 or 4 GPUs on one node) or by GPU shares."""
    cluster = small_cluster(nodes=nodes, gpus=gpus, gpu="A100-80GB")
    state, model, jobs = ClusterState(cluster, catalog()), ContentionModel(cluster), {}

    def run(gpu_list: tuple[int, ...], share: float) -> None:
        start_run(state, model, jobs, gpu_list, share)

    for node in range(nodes):
        g, end = node * gpus, (node + 1) * gpus
        while g < end:
            kind = rng.random()
            if kind < 0.3 and g + 2 <= end:
                size = rng.choice([2, 4]) if g + 4 <= end else 2
                run(tuple(range(g, g + size)), 1.0)
                g += size
                continue
            for share in rng.choice(SHARE_SPLITS):
                run((g,), share)
            g += 1
    return ClusterView(state, model, jobs)


@pytest.mark.parametrize("seed", range(150))
def test_the_floors_leave_the_chosen_victims_as_they_were(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    view = _busy_view(rng, nodes=rng.choice([2, 3, 4]), gpus=rng.choice([4, 8]))
    passed_over = []
    original = floors_module.RoomFloors.passes_over

    def counting(self: floors_module.RoomFloors, p: Placement, freed: float, bound: float) -> bool:
        out = original(self, p, freed, bound)
        passed_over.append(out)
        return out

    monkeypatch.setattr(floors_module.RoomFloors, "passes_over", counting)
    for need in (1.0, 2.0, 0.25, 0.5, 0.75):
        victims = list(view.running.values())
        rng.shuffle(victims)
        new = _spec("new", need)
        without = pick_victims(view, Planner(view), new, victims)
        with_floors = pick_victims(view, Planner(view), new, victims, bound=Bound())
        assert [v.id for v in with_floors] == [v.id for v in without], (seed, need)
    if seed == 0:  # the floors are asked, and rule victims out, on these clusters
        assert passed_over


def test_the_floors_rule_out_victims_somewhere() -> None:
    skipped = 0
    for seed in range(40):
        rng = random.Random(seed)
        view = _busy_view(rng, nodes=4, gpus=8)
        planner = Planner(view)
        new = _spec("new", 1.0)
        lacking, _ = _room_model(view, planner, new)
        floors = floors_module.RoomFloors(view, planner, new, lacking)
        for job in view.running.values():
            skipped += floors.passes_over(view.placement(job.id), job.spec.gpu_demand, 0.25)
    assert skipped > 0

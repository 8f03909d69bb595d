"""`pick_victims`' step 1 over node buckets (`policies.victim_choice._first_on_nodes`) reads the victims themselves, with
no offer per victim; it must choose what the core's rule chooses from those offers (`choose_victims` over `Offer`s
whose gains `_Gains` computes), and read the victims exactly as far.

Random busy clusters: whole-GPU jobs on one node or across two, GPU shares (alone on a GPU or two to four to a GPU),
some GPUs free; a starting job of 1 to 8 GPUs (node buckets; a share and a gang larger than a node are checked too,
they take the plain path); the victims in a random order; a `fits` that refuses some sets; pending jobs that may or
may not take a surplus (so that step 2 runs); with a `Bound` and without one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator

import pytest
from conftest import small_cluster

from policies.placement import Planner
from policies.victim_choice import _bounded_offers, _Gains, _room_model, pick_victims
from policies.victim_floors import RoomFloors
from scheduler.core.contention import ContentionModel
from scheduler.core.model import Job, JobPhase, JobSpec, Placement
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.victims import Bound, Offer, PendingDemands, choose_victims
from scheduler.core.workloads import catalog

SPLITS = [(0.5, 0.5), (0.25, 0.75), (0.25, 0.25, 0.5), (0.25,) * 4, (0.5,), (0.75,), (0.25, 0.5)]


def _spec(name: str, gpus: float) -> JobSpec:
    return JobSpec(name=name, submit_s=0.0, num_gpus=gpus, duration_s=1e6, model="ResNet-50-bs64")


def _view(rng: random.Random, nodes: int, gpus: int) -> ClusterView:
    """GPUs taken by whole-GPU jobs (on one node, some across two) or GPU shares; a few left free."""
    cluster = small_cluster(nodes=nodes, gpus=gpus, gpu="A100-80GB")
    state, model = ClusterState(cluster, catalog()), ContentionModel(cluster)
    jobs: dict[int, Job] = {}

    def run(gpu_list: tuple[int, ...], share: float) -> None:
        s = _spec(f"j{len(jobs)}", share if share < 1 else float(len(gpu_list)))
        p = Placement(gpu_list, share)
        j = Job(100 + len(jobs), s, s.duration_s)
        state.allocate(j.id, s, p)
        model.add(j.id, s, p)
        j.state, j.placement, j.start_s = JobPhase.RUNNING, p, 0.0
        jobs[j.id] = j

    g, end = 0, nodes * gpus
    while g < end:
        kind = rng.random()
        if kind < 0.05:
            g += 1  # free
        elif kind < 0.45:
            size = min(rng.choice([1, 1, 2, 3, 4]), end - g)
            run(tuple(range(g, g + size)), 1.0)  # (across two nodes where it starts near a node's end)
            g += size
        else:
            for share in rng.choice(SPLITS):
                run((g,), share)
            g += 1
    return ClusterView(state, model, jobs)


def _plain(view: ClusterView, planner: Planner, spec: JobSpec, victims: Iterable[Job], others: PendingDemands,
           fits: Callable[[list[Job]], bool], bound: Bound | None) -> list[Job]:
    """`pick_victims` as the core's rule reads it: an offer per victim, every step in `choose_victims`."""
    lacking, gains = _room_model(view, planner, spec)
    if not lacking:
        return []
    if bound is None:
        offers: Iterable[Offer[Job, int]] = (
            Offer(v, _Gains(gains, view.placement(v.id)), v.spec.gpu_demand) for v in victims)
    else:
        offers = _bounded_offers(view, victims, gains, bound, RoomFloors(view, planner, spec, lacking, None, bound))
    return choose_victims(offers, lacking, fits, others.takers(spec.gpu_demand), bound)


def _counted(jobs: list[Job], read: list[int]) -> Iterator[Job]:
    for j in jobs:
        read[0] += 1
        yield j


def _refusing(planner: Planner, spec: JobSpec, seed: int) -> Callable[[list[Job]], bool]:
    """The plan's own test, refusing besides some sets (by their ids: the same answer for the same set)."""
    test = planner.fit_test(spec)
    return lambda victims: test(victims) and (seed == 0 or hash((seed, *(v.id for v in victims))) % 3 != 0)


@pytest.mark.parametrize("seed", range(120))
def test_the_fast_step_chooses_and_reads_what_the_rule_does(seed: int) -> None:
    rng = random.Random(seed)
    view = _view(rng, nodes=rng.choice([2, 3, 5]), gpus=rng.choice([4, 8]))
    fast_paths = 0
    for need in (1.0, 2.0, 3.0, 4.0, 8.0, 0.5, 12.0):
        victims = list(view.running.values())
        rng.shuffle(victims)
        demands = [rng.choice([1.0, 2.0, 4.0]) for _ in range(rng.randint(0, 3))]
        refuse = rng.choice([0, 0, seed + 1])
        spec = _spec("new", need)
        for with_bound in (False, True):
            answers, reads = [], []
            for pick in (pick_victims, _plain):
                planner, read = Planner(view), [0]
                others = PendingDemands(counts={d: demands.count(d) for d in demands})
                chosen = pick(view, planner, spec, _counted(victims, read), others,
                              _refusing(planner, spec, refuse), Bound() if with_bound else None)
                answers.append([v.id for v in chosen])
                reads.append(read[0])
            assert answers[0] == answers[1], (seed, need, with_bound)
            assert reads[0] == reads[1], (seed, need, with_bound)
            fast_paths += 1 <= need <= view.cluster.max_gpus_per_node and bool(answers[0])
    if seed < 10:  # the fast step is taken and chooses victims on these clusters
        assert fast_paths > 0

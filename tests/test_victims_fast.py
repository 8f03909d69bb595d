"""`pick_victims`' step 1 over node buckets (`policies.victim_choice._first_on_nodes`) reads the victims themselves, with
no offer per victim; it must choose what the core's rule chooses from those offers (`choose_victims` over `Offer`s
whose gains `_Gains` computes), and read the victims exactly as far.

Random busy clusters, some of two GPU sizes: whole-GPU jobs on one node or across two, GPU shares (alone on a GPU or two to four to a GPU),
some GPUs free; a starting job of 1 to 8 GPUs (node buckets; a share and a gang larger than a node are checked too,
they take the plain path); the victims in a random order; the plan's own `fits` or one that refuses some sets; pending jobs that may or
may not take a surplus (so that step 2 runs); with a `Bound` and without one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator

import pytest
from conftest import small_cluster, start_run

from policies.placement import Planner
from policies.victim_choice import _bounded_offers, _Gains, _room_model, pick_victims
from policies.victim_floors import RoomFloors
from scheduler.core.contention import ContentionModel
from scheduler.core.jobs import Job, JobPhase, Placement
from scheduler.core.model import ClusterSpec, JobSpec, NodeGroupSpec, NodeTypeSpec, build_cluster
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.victims import Bound, Offer, PendingDemands, choose_victims
from scheduler.core.workloads import catalog

SPLITS = [(0.5, 0.5), (0.25, 0.75), (0.25, 0.25, 0.5), (0.25,) * 4, (0.5,), (0.75,), (0.25, 0.5)]


def _spec(name: str, gpus: float, model: str = "ResNet-50-bs64") -> JobSpec:
    return JobSpec(name=name, submit_s=0.0, num_gpus=gpus, duration_s=1e6, model=model)


def _view(rng: random.Random, nodes: int, gpus: int, mixed: bool) -> ClusterView:
    """GPUs taken by whole-GPU jobs (on one node, some across two) or GPU shares; a few left free. `mixed`: half the
    nodes have 16 GB GPUs, which BERT-large (20 GB) may not use."""
    cluster = small_cluster(nodes=nodes, gpus=gpus, gpu="A100-80GB") if not mixed else build_cluster(ClusterSpec(
        name="mixed", nodes_per_rack=8, groups=[NodeGroupSpec(count=n, node=NodeTypeSpec(
            gpu=gpu, gpus_per_node=gpus, interconnect="nvlink", nic_gbps=100.0))
            for n, gpu in ((nodes // 2, "V100-16GB"), (nodes - nodes // 2, "A100-80GB"))]))
    state, model = ClusterState(cluster, catalog()), ContentionModel(cluster)
    jobs: dict[int, Job] = {}

    def run(gpu_list: tuple[int, ...], share: float) -> None:
        start_run(state, model, jobs, gpu_list, share)

    g, end = 0, nodes * gpus
    while g < end:
        kind = rng.random()
        if kind < 0.05:
            g += 1  # free
        elif kind < 0.45 or cluster.gpu_mem[g] < 32:  # (a 16 GB GPU's MPS cap holds no share of these models)
            size = min(rng.choice([1, 1, 2, 3, 4, 6]), end - g)
            run(tuple(range(g, g + size)), 1.0)  # (across two nodes where it starts near a node's end)
            g += size
        else:
            for share in rng.choice(SPLITS):
                run((g,), share)
            g += 1
    return ClusterView(state, model, jobs)


def _plain(view: ClusterView, planner: Planner, spec: JobSpec, victims: Iterable[Job], others: PendingDemands,
           fits: Callable[[list[Job]], bool] | None, bound: Bound | None) -> list[Job]:
    """`pick_victims` as the core's rule reads it: an offer per victim, every step in `choose_victims`."""
    lacking, gains = _room_model(view, planner, spec)
    if not lacking:
        return []
    if bound is None:
        offers: Iterable[Offer[Job, int]] = (
            Offer(v, _Gains(gains, view.placement(v.id)), v.spec.gpu_demand) for v in victims)
    else:
        offers = _bounded_offers(view, victims, gains, bound, RoomFloors(view, planner, spec, lacking, None, bound))
    return choose_victims(offers, lacking, fits or planner.fit_test(spec), others.takers(spec.gpu_demand), bound)


def _counted(jobs: list[Job], read: list[int]) -> Iterator[Job]:
    for j in jobs:
        read[0] += 1
        yield j


def _refusing(planner: Planner, spec: JobSpec, seed: int) -> Callable[[list[Job]], bool] | None:
    """None (the plan's own test, which a gang larger than a node counts as it reads: `_first_in_cluster`) for seed
    0, else the plan's test refusing besides some sets (by their ids: the same answer for the same set)."""
    if seed == 0:
        return None
    test = planner.fit_test(spec)
    return lambda victims: test(victims) and hash((seed, *(v.id for v in victims))) % 3 != 0


def _compare(seed: int) -> tuple[int, int]:
    """Both ways on one random cluster, every starting job; how many searches of whole GPUs chose victims, and how
    many of them for a gang larger than a node with the plan's own test."""
    rng = random.Random(seed)
    view = _view(rng, nodes=rng.choice([2, 3, 5]), gpus=rng.choice([4, 8]), mixed=seed % 2 == 1)
    fast_paths = gangs = 0
    for need in (1.0, 2.0, 3.0, 4.0, 8.0, 0.5, 12.0):
        victims = list(view.running.values())
        rng.shuffle(victims)
        demands = [rng.choice([1.0, 2.0, 4.0]) for _ in range(rng.randint(0, 3))]
        refuse = rng.choice([0, 0, seed + 1])
        spec = _spec("new", need, rng.choice(["ResNet-50-bs64", "BERT-large"]))
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
            fast_paths += need >= 1 and bool(answers[0])
            gangs += need > view.cluster.max_gpus_per_node and not refuse and bool(answers[0])
    return fast_paths, gangs


@pytest.mark.parametrize("seed", range(120))
def test_the_fast_steps_choose_and_read_what_the_rule_does(seed: int) -> None:
    _compare(seed)


def test_the_fast_steps_are_taken_and_choose_victims() -> None:
    fast_paths, gangs = map(sum, zip(*(_compare(seed) for seed in range(40)), strict=True))
    assert fast_paths > 100 and gangs > 5, (fast_paths, gangs)


def test_a_gang_counts_only_the_gpus_freed_where_it_may_run() -> None:
    """A gang of BERT-large (20 GB) may not use the 16 GB node: a victim's GPUs there, wholly freed, do not count
    toward the whole GPUs it lacks, while shares over-count its gains elsewhere (the plan's test must refuse)."""
    cluster = build_cluster(ClusterSpec(name="mixed", nodes_per_rack=8, groups=[NodeGroupSpec(count=n, node=NodeTypeSpec(
        gpu=gpu, gpus_per_node=4, interconnect="nvlink", nic_gbps=100.0))
        for n, gpu in ((1, "V100-16GB"), (2, "A100-80GB"))]))
    state, model = ClusterState(cluster, catalog()), ContentionModel(cluster)
    jobs: dict[int, Job] = {}
    for gpus, share in [((5,), 0.5), ((2, 3, 4), 1.0), ((6, 7), 1.0), ((8,), 0.5), ((8,), 0.5), ((5,), 0.5),
                        ((9, 10), 1.0), ((0, 1), 1.0)]:
        s = _spec(f"j{len(jobs)}", share if share < 1 else float(len(gpus)))
        j = Job(100 + len(jobs), s, s.duration_s)
        state.allocate(j.id, s, Placement(gpus, share))
        model.add(j.id, s, Placement(gpus, share))
        j.state, j.placement, j.start_s = JobPhase.RUNNING, Placement(gpus, share), 0.0
        jobs[j.id] = j
    view = ClusterView(state, model, jobs)
    spec = _spec("gang", 5.0, "BERT-large")  # GPU 11 free: it lacks 4 whole GPUs on the 80 GB nodes
    order = [jobs[i] for i in (100, 101, 102, 103, 104, 105, 106, 107)]
    takers = {1.0: 16}  # (they take any surplus: the set is step 1's, trimmed)
    fast = pick_victims(view, Planner(view), spec, order, PendingDemands(counts=takers))
    plain = _plain(view, Planner(view), spec, order, PendingDemands(counts=takers), None, None)
    assert [v.id for v in fast] == [v.id for v in plain] and plain, (fast, plain)

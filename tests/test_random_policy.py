"""`random`'s walk over a deep queue (`RandomPolicy.schedule`, `policies.queue_mirror`) decides what the plain walk
(`QueuePolicy.schedule` over a shuffled list) decides, from the same random draws, at every call of a replay."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import job, small_cluster

from policies.heuristics import QueuePolicy, RandomPolicy
from policies.placement import Planner
from policies.queue_mirror import QueueMirror, room
from scheduler.core.book import Queued
from scheduler.core.contention import ContentionModel
from scheduler.core.decisions import Decision, Place
from scheduler.core.model import Job, Placement
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.traces import synthetic
from scheduler.core.workloads import catalog


class Checked(RandomPolicy):
    """`random`, checked at each call against the plain walk of a twin with the same seed."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.twin = RandomPolicy(seed)
        self.calls = self.deep = self.placed = self.book_queue = self.builds = 0
        build = self._mirror._build

        def counted(mapping) -> None:  # the mirror built anew: it did not follow the queue
            self.builds += 1
            build(mapping)

        self._mirror._build = counted  # type: ignore[method-assign]

    def schedule(self, view: ClusterView, queue, now: float) -> list[Decision]:
        expected = QueuePolicy.schedule(self.twin, view, queue, now)  # `order`'s shuffle, every job weighed
        got = super().schedule(view, queue, now)
        assert got == expected, f"call {self.calls} at t={now}"
        assert self.rng.bit_generator.state == self.twin.rng.bit_generator.state
        planner = Planner(view)  # `room` holds for every job `may_fit` lets through
        fits = [planner.may_fit(j.spec) for j in queue]
        assert not any(fits) or room(np.array([j.spec.num_gpus for j in queue]), planner)[fits].all()
        if isinstance(queue, Queued):  # the mirror is the queue: the same jobs, in its order, and their sizes
            self.book_queue += 1
            assert self._mirror.jobs == list(queue) and all(a is b for a, b in zip(self._mirror.jobs, queue, strict=True))
            assert self._mirror.need.tolist() == [j.spec.num_gpus for j in queue]
            assert self._mirror.ids.tolist() == [j.id for j in queue]
        self.calls += 1
        self.deep += len(queue) >= 30
        self.placed += sum(isinstance(d, Place) for d in got)
        return got


@pytest.mark.parametrize("high", [0.0, 0.2], ids=["one-band", "bands"])
def test_random_decides_as_the_plain_walk_at_every_call_of_a_deep_queue(high: float) -> None:
    # Arrivals far faster than the cluster serves them: the queue grows to hundreds of jobs of every size and share.
    # With high-priority jobs, the queue comes in priority bands (lists, not the book's queue): the mirror lets go of
    # the book's mapping and takes it up again.
    trace = synthetic(600, seed=3, mean_interarrival_s=15, frac_share=0.3, inference_share=0.1,
                      high_priority_share=high).jobs
    policy = Checked(seed=4)
    Simulator(small_cluster(nodes=4, gpus=4), trace, policy).run()
    assert policy.deep > 200 and policy.placed > 500 and policy.book_queue > 100
    # Followed, not read again: built once, or (bands) again only after calls offered a band's list.
    assert policy.builds == 1 if not high else policy.builds < policy.book_queue / 5


def _jobs(n: int, first: int = 0) -> list[Job]:
    return [Job(first + i, job(f"j{first + i}", i, 1 + i % 3, 10), 1.0) for i in range(n)]


def test_the_mirror_follows_arrivals_starts_and_any_other_change() -> None:
    mirror = QueueMirror()
    pending = {j.id: j for j in _jobs(6)}

    def follows() -> None:
        jobs, need = mirror.follow(Queued(pending, 1))
        assert jobs == list(pending.values()) and need.tolist() == [j.spec.num_gpus for j in pending.values()]

    follows()
    built = mirror.jobs
    pending.update({j.id: j for j in _jobs(2, first=10)})  # arrivals, at the end
    follows()
    mirror.placed(pending[2])
    mirror.placed(pending[4])
    del pending[2]  # started; 4 was placed but its start refused: it stays queued
    follows()
    assert mirror.jobs is built  # followed, not built again
    del pending[5]  # left without the policy placing it (cancelled): the count shows it, the mirror is built again
    pending.update({j.id: j for j in _jobs(1, first=20)})
    follows()
    assert mirror.jobs is not built
    pending = {j.id: j for j in reversed(list(pending.values()))}  # a new mapping (the book put the queue in order)
    follows()
    band = list(pending.values())[:3]  # a band's list: read whole
    assert mirror.follow(band)[0] == band and mirror.mapping is None


def test_the_mirror_copes_with_an_empty_queue_and_sizes_of_shares() -> None:
    mirror = QueueMirror()
    pending: dict[int, Job] = {}
    jobs, need = mirror.follow(Queued(pending, 1))
    assert jobs == [] and need.shape == (0,)
    share = Job(7, job("s", 0, 0.25, 10), 1.0)
    pending[7] = share
    jobs, need = mirror.follow(Queued(pending, 1))
    assert jobs == [share] and need.dtype == np.float64 and need.tolist() == [0.25]
    assert mirror.follow([])[1].shape == (0,)


def test_room_lets_through_every_size_may_fit_does_rounding_included() -> None:
    cluster = small_cluster(nodes=1, gpus=2)
    state, model = ClusterState(cluster, catalog()), ContentionModel(cluster)
    for i, (gpu, share) in enumerate(((0, 0.3), (0, 0.45), (1, 1.0))):  # GPU 0: 1 - 0.3 - 0.45 < 0.25 free; 1: busy
        spec = job(f"b{i}", 0, share, 10)
        state.allocate(i, spec, Placement((gpu,), spec.share))
        model.add(i, spec, Placement((gpu,), spec.share))
    planner = Planner(ClusterView(state, model, {}))
    assert 0.25 - 1e-9 < planner.max_free_share < 0.25
    sizes = [0.2, 0.25, 0.3, 1, 2]
    assert room(np.array(sizes, dtype=float), planner).tolist() == [True, True, False, False, False]
    assert [planner.may_fit(job("x", 0, n, 10)) for n in sizes] == [True, True, False, False, False]

"""What the RL encoding keeps between decisions (`policies.rl_encoding`'s running index, its priority and
preemptibility columns, and `Priorities`' shortcut over them) equals what recomputing from the view gives, at every
decision of simulations where jobs arrive, start, end and are preempted: with every job at one priority and
preemptible (the shortcut's case) and with mixed priorities and pinned jobs (the full computation's)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import numpy as np
import pytest

from policies.rl import RLPolicy
from policies.rl_encoding import FINE_THRESHOLDS, Priorities
from policies.rl_running import running_index, running_service
from scheduler.core.model import Job, JobSpec, parse_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterView
from scheduler.core.traces import scale_to_load, synthetic

pytestmark = pytest.mark.slow  # simulations replayed decision by decision


def recomputed(view: ClusterView, queue: Collection[Job]) -> Priorities:
    """`Priorities` without the running index: arrays built from the view's running jobs, as before the index."""
    return Priorities(view, queue)


def check(view: ClusterView, queue: Collection[Job]) -> bool:
    """Compares the kept state with the recomputed one at this decision; True where the shortcut applied."""
    jobs, _, _ = running_service(view)
    index = running_index(view)
    live = np.flatnonzero(index.alive)
    assert sorted(j.id for j in jobs) == sorted(view.running)
    by_id = {j.id: j for j in view.running.values()}
    for k in live.tolist():
        spec = by_id[index.jobs[k].id].spec
        assert index.priority[k] == spec.priority and index.pinned[k] == (not spec.preemptible)
    kept = Priorities(view, queue, top=max(j.spec.priority for j in queue), index=index)
    fresh = recomputed(view, queue)
    assert kept.cluster() == fresh.cluster()
    for j in queue:
        assert kept.job(j.spec) == fresh.job(j.spec)
    return kept._one is not None


def run(specs: list[JobSpec]) -> tuple[int, int]:
    """(decisions checked, decisions where the shortcut applied) over a simulation driven by a fixed rule."""
    counts = [0, 0]
    policy = RLPolicy(None, "rule", explain=False)
    inner = policy.deliberate

    def checking(view, queue, now):  # type: ignore[no-untyped-def]
        if view.running and queue:
            counts[0] += 1
            counts[1] += check(view, queue)
        return (yield from inner(view, queue, now))

    policy.deliberate = checking  # type: ignore[method-assign]
    policy.act = lambda obs, mask: int(np.flatnonzero(mask)[counts[0] % int(mask.sum())])  # type: ignore[method-assign]
    c = parse_cluster("dgx-a100:4")
    Simulator(c, scale_to_load(specs, c.num_gpus, 1.8), policy).run()
    return counts[0], counts[1]


def test_one_priority_takes_the_shortcut_and_matches() -> None:
    checked, shortcut = run(synthetic(150, seed=3).jobs)
    assert checked > 50 and shortcut == checked


def test_mixed_priorities_and_pinned_jobs_match() -> None:
    rng = np.random.default_rng(4)
    specs = [dataclasses.replace(s, priority=int(rng.integers(-1, 2)), preemptible=bool(rng.random() > 0.2))
             for s in synthetic(150, seed=4).jobs]
    checked, shortcut = run(specs)
    assert checked > 50 and shortcut < checked  # the full computation ran, and agreed


def test_a_running_job_whose_priority_changes_in_place_is_read_again() -> None:
    """The API changes a running job's priority through `Book.respec` (the live controller's intake): the index's
    columns follow at the next decision, not only when the job restarts."""
    from scheduler.core.book import Book
    from scheduler.core.contention import ContentionModel
    from scheduler.core.model import Placement
    from scheduler.core.state import ClusterState
    from scheduler.core.workloads import catalog

    cluster = parse_cluster("dgx-a100:1")
    book = Book(ClusterState(cluster, catalog()), ContentionModel(cluster, catalog()))
    jobs = [Job(i, JobSpec(name=f"j{i}", submit_s=0.0, num_gpus=1, duration_s=600.0, model="ResNet-50-bs64"), 600.0)
            for i in range(2)]
    for i, job in enumerate(jobs):
        book.start(job, Placement((i,)), 0.0)
    view = book.view
    view.now = 10.0
    running_service(view)
    index = running_index(view)
    row = index.row[1]
    assert index.priority[row] == 0 and not index.pinned[row]
    book.respec(jobs[1], dataclasses.replace(jobs[1].spec, priority=7, preemptible=False))
    running_service(view)
    assert index.priority[row] == 7 and index.pinned[row]
    assert index.priority[index.row[0]] == 0 and not index.pinned[index.row[0]]


def test_a_wait_reads_the_running_jobs_the_decision_point_synced(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a decision point the policy's wait reads the running index as that point synced it (`synced`): at every
    such wait of a simulation with arrivals, ends and preemptions, the wake-up time equals the one a fresh sync gives."""
    import policies.rl as rl_module

    original = rl_module.next_demotion
    compared = [0]

    def both(view, now, thresholds=FINE_THRESHOLDS, synced=False):  # type: ignore[no-untyped-def]
        got = original(view, now, thresholds, synced=synced)
        if synced:
            compared[0] += 1
            assert got == original(view, now, thresholds)  # (this one syncs again)
        return got

    monkeypatch.setattr(rl_module, "next_demotion", both)
    run(synthetic(150, seed=5).jobs)
    assert compared[0] > 20

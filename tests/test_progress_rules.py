"""The rules the simulator and the controller share (scheduler.core.progress): progress rates, queue order and the
runs a lost node takes with it."""

from __future__ import annotations

import pytest
from conftest import job, small_cluster

from scheduler.core.model import Job, JobKind, Placement
from scheduler.core.progress import in_queue_order, progress_rate, runs_on_node


def test_training_slows_with_its_neighbours_and_a_service_runs_its_time() -> None:
    assert progress_rate(JobKind.TRAINING, 2.0) == 0.5
    assert progress_rate(JobKind.TRAINING, 1.0) == 1.0
    assert progress_rate(JobKind.INFERENCE, 3.0) == 1.0


def test_the_queue_is_in_submission_order_and_a_requeued_job_keeps_its_place() -> None:
    jobs = {i: Job(i, job(f"j{i}", submit, 1, 10), 10) for i, submit in [(3, 5.0), (1, 9.0), (2, 5.0), (0, 1.0)]}
    assert list(in_queue_order(jobs)) == [0, 2, 3, 1]  # by submission time, then id
    requeued = {**in_queue_order({i: j for i, j in jobs.items() if i != 2}), 2: jobs[2]}  # back at the end of the dict
    assert list(in_queue_order(requeued)) == [0, 2, 3, 1]


@pytest.mark.parametrize(("node", "expected"), [(0, [1, 2]), (1, [2, 3]), (2, [])])
def test_a_node_takes_the_runs_with_a_gpu_on_it(node: int, expected: list[int]) -> None:
    cluster = small_cluster(nodes=3, gpus=2)
    running = {1: Job(1, job("a", 0, 1, 10), 10), 2: Job(2, job("b", 0, 2, 10), 10), 3: Job(3, job("c", 0, 1, 10), 10),
               4: Job(4, job("d", 0, 1, 10), 10)}
    running[1].placement = Placement((0,))
    running[2].placement = Placement((1, 2))  # GPU 1 on node 0, GPU 2 on node 1: a spread job
    running[3].placement = Placement((3,))
    # job 4 has no placement (being set up): it is on no node
    assert runs_on_node(running, cluster, node) == expected

"""The `rl:` frame's queue rows kept across decisions (`policies.rl_rows`): every row is the one computing it anew
gives, whatever changed between two queues, and a job still queued as it was is not computed again."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from policies import rl_rows
from policies.gittins import default_sizes
from policies.rl_rows import QueueRows, row
from scheduler.core.model import Job, JobSpec


def _job(i: int, gpus: float = 1.0, model: str = "ResNet-18-bs32", user: str = "u") -> Job:
    return Job(i, JobSpec(f"j{i}", float(i), gpus, 100.0 * (i + 1), model, user=user), 100.0 * (i + 1))


def counted_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """`rl_rows.row` counted from now on: the list's one item is how many rows were computed."""
    computed = [0]
    compute = rl_rows.row

    def counted(*args):  # type: ignore[no-untyped-def]
        computed[0] += 1
        return compute(*args)

    monkeypatch.setattr(rl_rows, "row", counted)
    return computed


def _anew(jobs: list[Job]) -> np.ndarray:
    sizes = default_sizes()
    return np.array([row(sizes, j.spec, j.attained_gpu_s) for j in jobs])


def test_rows_kept_across_queues_are_the_rows_computed_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = default_sizes()
    rows = QueueRows()
    computed = counted_rows(monkeypatch)
    jobs = [_job(i, gpus=[0.5, 1.0, 2.0, 8.0][i % 4], user=f"u{i % 3}") for i in range(40)]
    assert rows.rows(sizes, jobs).tobytes() == _anew(jobs).tobytes()
    assert computed[0] == 40

    # One placed, two arrived: only the two are computed.
    computed[0] = 0
    jobs = jobs[:7] + jobs[8:] + [_job(40), _job(41, gpus=4.0)]
    assert rows.rows(sizes, jobs).tobytes() == _anew(jobs).tobytes()
    assert computed[0] == 2

    # A new spec (priority changed through the API) and a new service (preempted, queued again): those two again.
    computed[0] = 0
    jobs[3].spec = dataclasses.replace(jobs[3].spec, priority=5)
    jobs[5].attained_gpu_s = 1234.5
    assert rows.rows(sizes, jobs).tobytes() == _anew(jobs).tobytes()
    assert computed[0] == 2

    # The next simulation numbers its jobs from 0 again: other objects, computed anew whatever their ids.
    computed[0] = 0
    other = [_job(i, gpus=4.0, model="ResNet-50-bs64") for i in range(10)]
    assert rows.rows(sizes, other).tobytes() == _anew(other).tobytes()
    assert computed[0] == 10


def test_a_queue_that_only_grew_keeps_its_rows_without_reading_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last queue as the new one's start (arrivals only): its rows stand, but for a job whose spec or service
    changed in place; and the next queue that is not such (a job placed from the middle) is still matched by ids."""
    sizes = default_sizes()
    rows = QueueRows()
    computed = counted_rows(monkeypatch)
    jobs = [_job(i, gpus=[0.5, 1.0, 2.0][i % 3], user=f"u{i % 2}") for i in range(30)]
    rows.rows(sizes, jobs)
    computed[0] = 0
    jobs = jobs + [_job(30), _job(31, gpus=8.0)]
    assert rows.rows(sizes, jobs).tobytes() == _anew(jobs).tobytes()
    assert computed[0] == 2  # the arrivals
    for change in (lambda: setattr(jobs[9], "attained_gpu_s", 77.0),  # more service (the list comparisons pass)
                   lambda: setattr(jobs[4], "spec", dataclasses.replace(jobs[4].spec, priority=3))):  # (they fail)
        computed[0] = 0
        change()
        assert rows.rows(sizes, jobs).tobytes() == _anew(jobs).tobytes()
        assert computed[0] == 1  # that job alone
    computed[0] = 0
    jobs = jobs[:12] + jobs[13:] + [_job(32)]
    assert rows.rows(sizes, jobs).tobytes() == _anew(jobs).tobytes()
    assert computed[0] == 1  # matched by ids after the list comparisons: only the arrival

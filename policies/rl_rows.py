"""The pending jobs' rows the `rl:` frame orders its queue by (`policies.rl_encoding._orders`), kept from one decision
to the next.

A row is what the orders read of a pending job, as floats: attained service, Gittins index and expected remaining
GPU-seconds under a size distribution, GPU demand, GPUs, priority, its classes (`policies.rl_scan`'s, without and
with the user), and whether it is elastic. An elastic job's demand, GPUs and classes are those of its smallest size,
which the frame asks whether it fits at (`policies.rl_elastic.least`). It depends only on the job's spec and attained service (frozen while it is pending), so a job still
queued with the same spec and service keeps its row. Between two decisions the queue usually loses the job just placed
and gains the jobs just arrived: the rows are matched to the last queue's by the job objects themselves (their ids,
held so that no other object takes them), over arrays, instead of a Python loop over ~1,500 jobs per decision; where
the last queue is the new one's start (only arrivals since), two list comparisons stand for reading the ids. A job
given a new spec (`respec`: priority, time limit) or a new service (preempted and queued again) gets its row computed
again; so does every job the last queue did not hold.
"""

from __future__ import annotations

import operator

import numpy as np

from policies.gittins import SizeDistribution
from policies.rl_elastic import least
from scheduler.core.model import Job, JobSpec

COLUMNS = 9
_CLASSES: dict[tuple[object, ...], int] = {}  # what `_Frame.fits` reads of a job -> its class (never renumbered)
_SPEC = operator.attrgetter("spec")
_ATTAINED = operator.attrgetter("attained_gpu_s")


def _class(key: tuple[object, ...]) -> float:
    found = _CLASSES.get(key)
    if found is None:
        found = _CLASSES[key] = len(_CLASSES)
    return float(found)


def row(sizes: SizeDistribution, spec: JobSpec, attained: float) -> tuple[float, ...]:
    fit = least(spec)
    alike = (fit.model, fit.compression, fit.num_gpus, fit.workers, fit.share, fit.constraints)
    return (attained, sizes.index(attained, spec), sizes.expected_remaining(attained, spec), fit.gpu_demand,
            fit.num_gpus, spec.priority, _class(alike), _class((*alike, spec.user)), 1.0 if fit is not spec else 0.0)


class QueueRows:
    """The last queue's jobs and rows, under one size distribution."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        # Held, so that their ids (and their specs') name them until the next queue replaces them.
        self.jobs: list[Job] = []
        self.specs: list[JobSpec] = []
        self._ids: np.ndarray | None = np.empty(0, dtype=np.int64)  # of `jobs` and `specs`; None: not read yet
        self._spec_ids = np.empty(0, dtype=np.int64)
        self.table = np.empty((0, COLUMNS))

    def rows(self, sizes: SizeDistribution, jobs: list[Job]) -> np.ndarray:
        """Each job's row, [len(jobs), COLUMNS]: the very floats computing them one by one gives."""
        n, m = len(jobs), len(self.jobs)
        specs = list(map(_SPEC, jobs))
        attained = np.fromiter(map(_ATTAINED, jobs), dtype=float, count=n)
        table = np.empty((n, COLUMNS))
        # The last queue with arrivals after it (between two decisions that placed nothing, the usual step on a deep
        # queue): the same job objects first, with equal specs (a row reads only the spec's fields), compared by two
        # list comparisons instead of reading every job's id. Their rows stand where the service is as it was.
        if m and n >= m and jobs[:m] == self.jobs and specs[:m] == self.specs:
            table[:m] = self.table
            fresh = np.ones(n, dtype=bool)
            fresh[:m] = ~(self.table[:, 0] == attained[:m])
            ids = spec_ids = None
        else:
            ids = np.fromiter(map(id, jobs), dtype=np.int64, count=n)
            spec_ids = np.fromiter(map(id, specs), dtype=np.int64, count=n)
            fresh = self._match(ids, spec_ids, attained, table)
        for i in np.flatnonzero(fresh).tolist():
            table[i] = row(sizes, specs[i], jobs[i].attained_gpu_s)
        self.jobs, self.specs, self._ids, self.table = list(jobs), specs, ids, table
        if spec_ids is not None:
            self._spec_ids = spec_ids
        return table

    def _match(self, ids: np.ndarray, spec_ids: np.ndarray, attained: np.ndarray, table: np.ndarray) -> np.ndarray:
        """Fills `table` with the last queue's rows of the same job objects, with the same spec objects and the same
        service (`==`, as a float); returns which rows are left to compute."""
        if not self.jobs:
            return np.ones(len(ids), dtype=bool)
        if self._ids is None:  # (the last queue was matched by `rows`' list comparisons)
            self._ids = np.fromiter(map(id, self.jobs), dtype=np.int64, count=len(self.jobs))
            self._spec_ids = np.fromiter(map(id, self.specs), dtype=np.int64, count=len(self.specs))
        old = self._ids
        by_id = np.argsort(old, kind="stable")
        at = by_id[np.minimum(np.searchsorted(old, ids, sorter=by_id), by_id.size - 1)]
        kept = (old[at] == ids) & (self._spec_ids[at] == spec_ids) & (self.table[at, 0] == attained)
        table[kept] = self.table[at[kept]]
        return ~kept

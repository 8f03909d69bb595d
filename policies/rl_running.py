"""The running jobs as arrays, kept per cluster view and patched as jobs come and go between decisions; and their
priorities as one decision point reads them (`Priorities`).

The RL encoding (`policies.rl_encoding`) reads the running jobs at every decision: their attained service (the
victims' queues), arrival, Gittins queue, priority and preemptibility. On 2,048 GPUs rebuilding these from the view's
~1,200 running jobs at each of thousands of decisions was a large part of a decision's time, so `RunningIndex` keeps
them and `sync` patches only what changed: rows for jobs that left are marked dead (and compacted when most are),
rows for new jobs appended, rows of jobs restarted since (same id, new start) refreshed. A running job's spec changes
only through `Book.respec` (the API changed its priority), which the view counts (`ClusterView.respecs`): the
priority and preemptibility columns are read again when that count moves, so they stay exact
(tests/test_rl_incremental.py compares them with a recomputation at every decision of two simulations).
"""

from __future__ import annotations

import math
import operator
import weakref
from collections.abc import Collection, Sequence
from itertools import compress

import numpy as np

from policies.gittins import Gittins
from scheduler.core.model import Job, JobSpec
from scheduler.core.state import ClusterView

_START = operator.attrgetter("start_s")


class RunningIndex:
    """Running jobs as arrays (the job, its service when it started, start time, GPUs, arrival), kept per view and
    patched as jobs come and go instead of rebuilt: on 2,048 GPUs rebuilding them was most of a decision's time."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.jobs: list[Job | None] = []
        self.row: dict[int, int] = {}  # job id -> index into the arrays
        self.base = np.zeros(0)
        self.start = np.zeros(0)
        self.rate = np.zeros(0)
        self.submit = np.zeros(0)
        self.alive = np.zeros(0, dtype=bool)
        self.glevel = np.zeros(0, dtype=np.int64)  # Gittins queue, valid while attained < gnext
        self.gnext = np.zeros(0)  # attained service at which the Gittins queue changes (-inf: not computed)
        self.priority = np.zeros(0)
        self.pinned = np.zeros(0, dtype=bool)  # not preemptible
        self.respecs = -1  # the view's `respecs` the priority columns were read at (-1: a new index, rows just read)

    def gittins_levels(self, live: np.ndarray, attained: np.ndarray, queues: Gittins) -> np.ndarray:
        stale = live[self.gnext[live] <= attained]
        if stale.size:
            at = dict(zip(live.tolist(), attained.tolist(), strict=False))
            for k in stale.tolist():
                level, nxt = queues.level_and_next(self.jobs[k].spec, at[k])
                self.glevel[k], self.gnext[k] = level, (math.inf if nxt is None else nxt)
        return self.glevel[live]

    def _append(self, jobs: list[Job], now: float) -> None:
        for r in jobs:
            self.row[r.id] = len(self.jobs)
            self.jobs.append(r)
        self.base = np.concatenate([self.base, [r.attained_gpu_s for r in jobs]])
        self.start = np.concatenate([self.start, [r.start_s if r.start_s is not None else now for r in jobs]])
        self.rate = np.concatenate([self.rate, [r.spec.gpu_demand for r in jobs]])
        self.submit = np.concatenate([self.submit, [r.spec.submit_s for r in jobs]])
        self.alive = np.concatenate([self.alive, np.ones(len(jobs), dtype=bool)])
        self.glevel = np.concatenate([self.glevel, np.zeros(len(jobs), dtype=np.int64)])
        self.gnext = np.concatenate([self.gnext, np.full(len(jobs), -math.inf)])
        self.priority = np.concatenate([self.priority, [float(r.spec.priority) for r in jobs]])
        self.pinned = np.concatenate([self.pinned, np.array([not r.spec.preemptible for r in jobs], dtype=bool)])

    def sync(self, view: ClusterView) -> None:
        running = view.running
        gone = self.row.keys() - running.keys()
        for i in gone:
            k = self.row.pop(i)
            self.jobs[k] = None
            self.alive[k] = False
        if len(self.jobs) > 2 * len(running) + 64:  # mostly dead rows: compact
            keep = [r for r in self.jobs if r is not None]
            self.clear()
            self._append(keep, view.now)
        new = running.keys() - self.row.keys()
        if new:
            self._append([running[i] for i in new], view.now)
        # A job preempted and restarted between two calls keeps its id but has a new start: refresh those rows. (The
        # live rows' jobs in row order by `compress` over the mask as a list: indexing the list with numpy integers
        # cost twice as much.)
        live = np.flatnonzero(self.alive)
        starts = np.fromiter(map(_START, compress(self.jobs, self.alive.tolist())), float, len(live))
        for k in live[starts != self.start[live]]:
            r = self.jobs[k]
            self.base[k], self.start[k] = r.attained_gpu_s, r.start_s
            self.gnext[k] = -math.inf
        if self.respecs != view.respecs:  # a running job's priority changed in place: read the columns again
            if self.respecs >= 0:
                for k in live.tolist():
                    job = self.jobs[k]
                    assert job is not None  # (a live row's)
                    self.priority[k], self.pinned[k] = float(job.spec.priority), not job.spec.preemptible
            self.respecs = view.respecs


_SERVICE: weakref.WeakKeyDictionary[ClusterView, RunningIndex] = weakref.WeakKeyDictionary()


def running_index(view: ClusterView) -> RunningIndex:
    """The view's index as `running_service` last synced it (call that first, at the same instant)."""
    return _SERVICE[view]


def running_service(view: ClusterView) -> tuple[Sequence[Job], np.ndarray, np.ndarray]:
    """Running jobs with their attained service now and their arrival, as arrays.

    Evaluated for `now` with the very arithmetic of `ClusterView.attained_gpu_s` (service at start + (now - start) x
    GPUs): a job exactly at a queue threshold must land in the same queue here as there, or a pending job and the job
    it preempted can preempt each other back and forth at one instant (seen, when this was computed otherwise).
    """
    index = _SERVICE.get(view)
    if index is None:
        index = _SERVICE[view] = RunningIndex()
    index.sync(view)
    live, attained = _attained(index, view)
    return _Rows(index.jobs, live), attained, index.submit[live]


def synced_attained(view: ClusterView) -> np.ndarray:
    """`running_service`'s attained service, from the index as its last call synced it: for a caller that knows
    nothing changed since that call at this very instant (a sync reads every running job)."""
    return _attained(_SERVICE[view], view)[1]


def _attained(index: RunningIndex, view: ClusterView) -> tuple[np.ndarray, np.ndarray]:
    """The live rows and their attained service at the view's clock."""
    live = np.flatnonzero(index.alive)
    return live, index.base[live] + (view.now - index.start[live]) * index.rate[live]


def started_now(view: ClusterView) -> np.ndarray:
    """Which running jobs started at this very instant, in `running_service`'s order (call that first)."""
    index = _SERVICE[view]
    return index.start[np.flatnonzero(index.alive)] >= view.now


def gittins_levels(view: ClusterView, queues: Gittins) -> np.ndarray:
    """The Gittins queue of each running job, in `running_service`'s order (call that first, at the same instant)."""
    index = _SERVICE[view]
    live, attained = _attained(index, view)
    return index.gittins_levels(live, attained, queues)


class _Rows(Sequence[Job]):
    """`jobs[rows[i]]` without building the list: callers read a few of thousands."""

    def __init__(self, jobs: list[Job | None], rows: np.ndarray) -> None:
        self._jobs, self._rows = jobs, rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._jobs[k] for k in self._rows[i]]
        return self._jobs[self._rows[i]]


class Priorities:
    """The running jobs' priorities and preemptibility, read once per decision point (`scheduler.core.priorities`).
    With every job at one priority and preemptible, every feature it gives is 0: the observation is then encoding
    5's with zeros appended where these features sit."""

    def __init__(self, view: ClusterView, queue: Collection[Job], top: float | None = None,
                 index: RunningIndex | None = None) -> None:
        """`top`: the queue's highest priority, if the caller knows it (else read from `queue`); `index`: the view's
        running index (`running_service`), if synced with it at this very instant."""
        self.num_gpus = view.cluster.num_gpus
        if top is None:
            top = max((j.spec.priority for j in queue), default=0)
        # Every running job at one priority and preemptible (the common case, known from `running_service`'s index
        # without a loop over them): every sum below is over none of them or all of them, so only "all" is ever
        # summed, and only when asked, in the running jobs' order as before.
        self._one: float | None = None
        if view.running and index is not None:
            alive = index.alive
            prios = index.priority[alive]
            if prios.size and prios.min() == prios.max() and not index.pinned[alive].any():
                self._one = float(prios[0])
                self._view = view
                self._all: float | None = None
                self.pinned = 0.0
                self.above = self._sum_all() / self.num_gpus if self._one > top else 0.0
                return
        running = list(view.running.values())
        self.priority = np.array([j.spec.priority for j in running], dtype=np.float64)
        self.gpus = np.array([j.spec.gpu_demand for j in running], dtype=np.float64)
        self.pinned = float(sum(j.spec.gpu_demand for j in running if not j.spec.preemptible)) / self.num_gpus
        self.above = float(self.gpus[self.priority > top].sum()) / self.num_gpus if running else 0.0

    def _sum_all(self) -> float:
        """The running jobs' GPUs summed as `self.gpus[...].sum()` sums them (in the view's order), once."""
        if self._all is None:
            self._all = float(np.array([j.spec.gpu_demand for j in self._view.running.values()],
                                       dtype=np.float64).sum())
        return self._all

    def job(self, spec: JobSpec) -> tuple[float, float]:
        """The share of the cluster's GPUs held by running jobs of lower priority than `spec` (what it could take by
        rule 3), and 1 if `spec` is not preemptible."""
        if self._one is not None:
            lower = self._sum_all() / self.num_gpus if self._one < spec.priority else 0.0
            return lower, 0.0 if spec.preemptible else 1.0
        lower = float(self.gpus[self.priority < spec.priority].sum()) / self.num_gpus if len(self.gpus) else 0.0
        return lower, 0.0 if spec.preemptible else 1.0

    def cluster(self) -> tuple[float, float]:
        """The share of GPUs held by non-preemptible runs, and by runs of higher priority than any pending job."""
        return self.pinned, self.above

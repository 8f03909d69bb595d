"""The book's queue as a list in its order, with each job's GPUs as an array, followed from call to call.

The `random` policy (`policies.heuristics.RandomPolicy`) shuffles the queue at every call and walks it, placing the
jobs that fit. On a deep queue few jobs fit (the free GPUs are few), and the walk finds them with numpy over the jobs'
sizes (`room`). Reading every queued job's size at every call was then most of a call's cost: a 100,000-job replay
holds ~1,500 queued jobs for hours, spread over memory, each read a cache miss. So the sizes are kept, as the queue
changes, the way `policies.queue_scan.QueueIndex` follows it: the book appends arrivals at the end of the same mapping
and builds a new one whenever it puts a job anywhere else (`Book.sort_queue`); a job leaves it when it starts
(`Book.dequeue`, which keeps the order of the rest). So while the mapping is the same object, the mirror drops the
jobs the policy placed that left it, and appends the jobs at its end it does not hold (walking it backwards): O(new
jobs) per call, no job read twice. Any other change shows in the count and the mirror is built again (O(queue)).

Like `QueueIndex`, the mirror holds that a queued job's size does not change while it is queued in the same mapping
(its one caller, the API, gives `Book.respec` a new priority or time limit, never new GPUs), and that a job that left
the mapping comes back only in a new one (`Book.requeue`, `Book.enqueue`). Any queue other than the book's (a
priority band's list, a frame's) is read whole at each call.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from policies.placement import Planner
from policies.queue_scan import queue_mapping
from scheduler.core.model import Job
from scheduler.core.state import EPS


def sizes(jobs: Sequence[Job]) -> np.ndarray:
    """Each job's `num_gpus`, in order."""
    return np.array([j.spec.num_gpus for j in jobs], dtype=np.float64).reshape(len(jobs))


def room(need: np.ndarray, planner: Planner) -> np.ndarray:
    """Per size, whether a job of it may pass `Planner.may_fit` on `planner` as it stands or after more takes (a
    necessary condition: whole GPUs within the free whole ones, a share within the largest free share; both only
    shrink as a plan takes GPUs)."""
    return np.where(need >= 1.0, need <= planner.free_whole, need <= planner.max_free_share + EPS)


class QueueMirror:
    """The queue's jobs in its order and their sizes (`follow`), kept across calls for the book's queue."""

    def __init__(self) -> None:
        self.mapping: Mapping[int, Job] | None = None  # the book's mapping followed (None: none)
        self.jobs: list[Job] = []
        self.ids = np.zeros(0, dtype=np.int64)
        self.need = np.zeros(0, dtype=np.float64)
        self._known: set[int] = set()  # the ids in `jobs`
        self._placed: list[Job] = []  # placed since the last `follow`: they leave the mapping once they start

    def follow(self, queue: Collection[Job]) -> tuple[list[Job], np.ndarray]:
        """`list(queue)` and its jobs' sizes, in the queue's order. The list is the mirror's own: read it only."""
        mapping = queue_mapping(queue)
        if mapping is None:  # not the book's queue: read whole, and the next book's queue is read whole too
            self.mapping = None
            self._placed = []
            jobs = list(queue)
            return jobs, sizes(jobs)
        if mapping is not self.mapping or not self._sync(mapping):
            self._build(mapping)
        return self.jobs, self.need

    def placed(self, job: Job) -> None:
        """`job` (from the last `follow`) is offered a placement: it leaves the queue if its start is applied."""
        self._placed.append(job)

    def _build(self, mapping: Mapping[int, Job]) -> None:
        self.mapping = mapping
        self.jobs = list(mapping.values())
        self.ids = np.array([j.id for j in self.jobs], dtype=np.int64).reshape(len(self.jobs))
        self.need = sizes(self.jobs)
        self._known = set(self.ids.tolist())
        self._placed = []

    def _sync(self, mapping: Mapping[int, Job]) -> bool:
        """Drop the placed jobs that left `mapping`, append the jobs at its end the mirror lacks; False if it changed
        in any other way (the mirror no longer describes it)."""
        gone = [job.id for job in self._placed if mapping.get(job.id) is not job]
        self._placed = []
        if gone:  # (a few: `np.isin` and `np.delete` cost more than these, at each call)
            hit = self.ids == gone[0]
            for job_id in gone[1:]:
                hit |= self.ids == job_id
            at = np.flatnonzero(hit).tolist()
            if len(at) != len(gone):
                return False
            for i in reversed(at):
                del self.jobs[i]
            keep = ~hit
            self.ids = self.ids[keep]
            self.need = self.need[keep]
            self._known.difference_update(gone)
        new: list[Job] = []
        known = self._known
        for job in reversed(mapping.values()):  # type: ignore[call-overload]  # (the book's is a dict)
            if job.id in known:
                break
            new.append(job)
        if len(mapping) != len(self.jobs) + len(new):
            return False
        if new:
            new.reverse()
            self.jobs.extend(new)
            self.ids = np.concatenate((self.ids, np.array([j.id for j in new], dtype=np.int64)))
            self.need = np.concatenate((self.need, sizes(new)))
            known.update(j.id for j in new)
        return True

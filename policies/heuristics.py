"""Classic queue-order heuristics: fifo, fifo-backfill, sjf, consolidate, gandiva, random (and `policies.topology`).

Each one is a queue order, a placement rule and whether the first job that does not fit blocks the ones behind it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from typing import ClassVar, NamedTuple

import numpy as np

from policies.placement import Planner
from policies.queue_mirror import QueueMirror, room
from policies.registry import register
from scheduler.core.decisions import Decision, Place, Wait, WakeAt
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.state import ClusterView


def wait_reason(planner: Planner, spec: JobSpec) -> str:
    if spec.constraints is not None:
        where = f" on nodes matching {spec.constraints.words()}"
        if spec.num_gpus < 1:
            return f"waiting for a GPU with {spec.share:g} free share{where}"
        return f"waiting for {spec.workers} GPUs{where}"
    if spec.num_gpus < 1:
        return f"waiting for a GPU with {spec.share:g} free share and {planner.view.mem_need(spec):g} GB free"
    if planner.free_whole < spec.workers:
        return f"waiting for {spec.workers} GPUs ({planner.free_whole} free)"
    return f"waiting for {spec.workers} GPUs with {planner.view.mem_need(spec):g} GB each"


class QueuePolicy:
    """Walk the queue in `order`; place each job that fits with `place`; if `strict`, the first misfit blocks."""

    name: ClassVar[str]
    oracle: ClassVar[bool] = False
    strict: ClassVar[bool] = False

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def order(self, queue: Collection[Job], view: ClusterView) -> Iterable[Job]:
        return queue

    def place(self, planner: Planner, job: Job) -> Placement | None:
        return planner.best_fit(job.spec)

    def reason(self, planner: Planner, job: Job, placement: Placement) -> str:
        """Why this placement, for the job's explanation ('' : nothing beyond the policy's rule)."""
        return ""

    def hold(self, planner: Planner, job: Job, placement: Placement) -> Wait | None:
        """Why `job` stays queued although `placement` fits it now, and until when at most (`Wait.until`: the policy
        asks to be called again then); None: it starts. The jobs behind it go on."""
        return None

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        decisions: list[Decision] = []
        if not queue:
            return decisions
        wake = self.scan(Planner(view), self.order(queue, view), decisions, False).wake
        if wake < math.inf:
            decisions.append(WakeAt(wake))
        return decisions

    def scan(self, planner: Planner, jobs: Iterable[Job], decisions: list[Decision], blocked: bool) -> Scanned:
        """Walk `jobs` in order on `planner`, saying each decision into `decisions` (`blocked`: a job before them
        already waits for want of room, so no other such job is named)."""
        wake = math.inf
        # (read once: a deep queue's call passes hundreds of jobs, most of which wait; only a start makes the plan full)
        place, hold, may_fit, said = self.place, self.hold, planner.may_fit, decisions.append
        full = planner.full()
        placed = False
        for job in jobs:
            if full:
                break
            placement = place(planner, job) if may_fit(job.spec) else None
            if placement is None:
                if not blocked:
                    blocked = True
                    said(Wait(job.id, wait_reason(planner, job.spec)))
                if self.strict:
                    break
                continue
            held = hold(planner, job, placement)
            if held is not None:
                said(held)
                if held.until is not None and held.until < wake:
                    wake = held.until
                continue
            said(Place(job.id, placement, self.reason(planner, job, placement)))
            planner.take(job.spec, placement)
            full, placed = planner.full(), True
        return Scanned(blocked, wake, placed, full)


class Scanned(NamedTuple):
    """How `QueuePolicy.scan` left the queue: whether a job waits for want of room, the earliest hold's end (inf:
    none), whether it placed any job, and whether the plan is full."""

    blocked: bool
    wake: float
    placed: bool
    full: bool


@register
class Fifo(QueuePolicy):
    """Strict arrival order: the head waits until enough GPUs are free anywhere, then takes the fewest nodes."""

    name = "fifo"
    strict = True

    def place(self, planner: Planner, job: Job) -> Placement | None:
        return planner.first_fit(job.spec)


@register
class FifoBackfill(QueuePolicy):
    """Arrival order, but jobs behind a blocked head start if they fit now (backfill without reservations)."""

    name = "fifo-backfill"

    def place(self, planner: Planner, job: Job) -> Placement | None:
        return planner.first_fit(job.spec)


@register
class ShortestJobFirst(QueuePolicy):
    """Shortest isolated duration first, with backfill. An ORACLE: real schedulers do not know durations."""

    name = "sjf"
    oracle = True

    def order(self, queue: Collection[Job], view: ClusterView) -> Iterable[Job]:
        return sorted(queue, key=lambda j: (j.spec.duration_s, j.spec.submit_s))


@register
class Consolidate(QueuePolicy):
    """Slurm-like topology best fit: arrival order with backfill; the tightest node, else the best-fitting rack."""

    name = "consolidate"


@register
class Gandiva(QueuePolicy):
    """Gandiva-style packing with affinity: fractional jobs packed onto shared GPUs (best fit), whole-GPU jobs
    preferably on nodes already running jobs of the same size. Gandiva's time slicing and migration are not modelled.
    """

    name = "gandiva"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        # Job size -> node -> how many running jobs of that size it holds (a node is in the size's affinity while
        # one does), kept up to date from the running jobs' placements as they were read (`_sync`).
        self._affinity: dict[int, dict[int, int]] = {}
        self._read: dict[int, tuple[int, list[int]]] = {}  # job id -> (size, nodes) as counted
        self._seen: tuple[ClusterView, int] | None = None  # the view read last, and its `moves` then

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        if queue:
            self._sync(view)
        return super().schedule(view, queue, now)

    def _sync(self, view: ClusterView) -> None:
        """Count the running jobs' nodes by size, reading again only the jobs allocated or released since the last
        call (`ClusterView.moved_since`: starts, ends, resizes): the nodes of every running job, read at every call,
        were most of a 100,000-job replay's time (thousands run). Another view, or one whose record no longer reaches
        back, is read whole."""
        moved = view.moved_since(self._seen[1]) if self._seen is not None and self._seen[0] is view else None
        if moved is None:
            self._affinity, self._read = {}, {}
            moved = list(view.running)
        for job_id in dict.fromkeys(moved):  # (a job once, in order)
            seen = self._read.pop(job_id, None)
            if seen is not None:
                self._count(*seen, -1)
            job = view.running.get(job_id)
            if job is not None and job.placement is not None:
                self._read[job_id] = (job.spec.workers, job.placement.nodes(view.cluster))
                self._count(*self._read[job_id], 1)
        self._seen = (view, view.moves)

    def _count(self, size: int, nodes: list[int], by: int) -> None:
        counts = self._affinity.setdefault(size, {})
        for n in nodes:
            left = counts.get(n, 0) + by
            if left:
                counts[n] = left
            else:
                del counts[n]

    def place(self, planner: Planner, job: Job) -> Placement | None:
        spec = job.spec
        if spec.num_gpus < 1 or spec.workers > planner.cluster.max_gpus_per_node:
            return planner.best_fit(spec)
        nodes = [n for n in self._affinity.get(spec.workers, ()) if planner.node_free[n] >= spec.workers]
        if spec.constraints is not None:  # only the nodes its constraints allow
            usable = planner.usable_nodes(spec)
            nodes = [n for n in nodes if usable[n]]
        if nodes:
            node = min(nodes, key=lambda n: (planner.node_free[n], n))
            return Placement(tuple(planner.gpus_in_node(node, spec.workers)))
        return planner.best_fit(spec)


@register
class RandomPolicy(QueuePolicy):
    """Random queue order, random free GPUs: the floor any policy should beat."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._mirror = QueueMirror()

    def order(self, queue: Collection[Job], view: ClusterView) -> Iterable[Job]:
        jobs = list(queue)
        self.rng.shuffle(jobs)
        return jobs

    def place(self, planner: Planner, job: Job) -> Placement | None:
        if job.spec.num_gpus < 1:
            return planner.random_share(job.spec, self.rng)
        return planner.spread(job.spec, self.rng)

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        """`QueuePolicy.schedule` over `order`, the same decisions from the same draws, without reading a deep
        queue's jobs one by one: once a job is named as waiting, the walk visits only the jobs `room` says may fit
        as the plan stood at its last `take` (it only shrinks); any other would be passed over, or, the plan full,
        end the walk, as the next one visited does alike (nothing changes in between). The sizes come from the
        mirror of the queue (`policies.queue_mirror`), not read again at each call."""
        decisions: list[Decision] = []
        if not queue:
            return decisions
        jobs, sizes = self._mirror.follow(queue)
        order = self.rng.permutation(len(jobs))  # the very draws `rng.shuffle(list(queue))` makes (`order`)
        need = sizes[order]
        planner = Planner(view)
        blocked = False
        wake = math.inf
        nxt = 0  # the next position in `order` to weigh
        ahead: list[int] | None = None  # once blocked: the positions from `nxt` on that may fit, as the plan stands
        k = 0
        while True:
            if not blocked:
                if nxt == len(jobs):
                    break
                i = nxt
            else:
                if ahead is None:
                    ahead, k = (np.flatnonzero(room(need[nxt:], planner)) + nxt).tolist(), 0
                if k == len(ahead):
                    break
                i, k = ahead[k], k + 1
            nxt = i + 1
            job = jobs[order[i]]
            if planner.full():
                break
            placement = self.place(planner, job) if planner.may_fit(job.spec) else None
            if placement is None:
                if not blocked:
                    blocked = True
                    decisions.append(Wait(job.id, wait_reason(planner, job.spec)))
                continue
            held = self.hold(planner, job, placement)
            if held is not None:
                decisions.append(held)
                if held.until is not None and held.until < wake:
                    wake = held.until
                continue
            decisions.append(Place(job.id, placement, self.reason(planner, job, placement)))
            planner.take(job.spec, placement)
            self._mirror.placed(job)
            ahead = None
        if wake < math.inf:
            decisions.append(WakeAt(wake))
        return decisions

"""Classic queue-order heuristics: fifo, fifo-backfill, sjf, consolidate, topology, gandiva, random.

Each one is a queue order, a placement rule and whether the first job that does not fit blocks the ones behind it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import ClassVar

import numpy as np

from policies.placement import Planner
from policies.registry import register
from scheduler.core.decisions import Decision, Place, Wait
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.state import ClusterView


def wait_reason(planner: Planner, spec: JobSpec) -> str:
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

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        decisions: list[Decision] = []
        if not queue:
            return decisions
        planner = Planner(view)
        blocked: Job | None = None
        for job in self.order(queue, view):
            if planner.full():
                break
            placement = self.place(planner, job) if planner.may_fit(job.spec) else None
            if placement is None:
                if blocked is None:
                    blocked = job
                    decisions.append(Wait(job.id, wait_reason(planner, job.spec)))
                if self.strict:
                    break
                continue
            decisions.append(Place(job.id, placement, self.reason(planner, job, placement)))
            planner.take(job.spec, placement)
        return decisions


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
class Topology(QueuePolicy):
    """Topology-aware best fit (Slurm's topology/block, Kueue's TAS, KAI's and Volcano's topology-aware scheduling):
    arrival order with backfill; a gang on as few racks, then pods, then nodes as it fits, rail-aligned."""

    name = "topology"

    def place(self, planner: Planner, job: Job) -> Placement | None:
        if job.spec.num_gpus < 1:
            return planner.packed_share(job.spec)
        return planner.topology_fit(job.spec)

    def reason(self, planner: Planner, job: Job, placement: Placement) -> str:
        # What spanning costs, as the model predicts it with the jobs running now (this call's earlier placements
        # are not in the model yet: the words can only understate).
        return planner.view.fabric_words(job.spec, placement)


@register
class Gandiva(QueuePolicy):
    """Gandiva-style packing with affinity: fractional jobs packed onto shared GPUs (best fit), whole-GPU jobs
    preferably on nodes already running jobs of the same size. Gandiva's time slicing and migration are not modelled.
    """

    name = "gandiva"

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        self._affinity: dict[int, set[int]] = {}  # job size -> nodes running a job of that size
        if queue:
            for running in view.running.values():
                if running.placement is not None:
                    nodes = self._affinity.setdefault(running.spec.workers, set())
                    nodes.update(running.placement.nodes(view.cluster))
        return super().schedule(view, queue, now)

    def place(self, planner: Planner, job: Job) -> Placement | None:
        spec = job.spec
        if spec.num_gpus < 1 or spec.workers > planner.cluster.max_gpus_per_node:
            return planner.best_fit(spec)
        nodes = [n for n in self._affinity.get(spec.workers, ()) if planner.node_free[n] >= spec.workers]
        if nodes:
            node = min(nodes, key=lambda n: (planner.node_free[n], n))
            return Placement(tuple(planner.gpus_in_node(node, spec.workers)))
        return planner.best_fit(spec)


@register
class RandomPolicy(QueuePolicy):
    """Random queue order, random free GPUs: the floor any policy should beat."""

    name = "random"

    def order(self, queue: Collection[Job], view: ClusterView) -> Iterable[Job]:
        jobs = list(queue)
        self.rng.shuffle(jobs)
        return jobs

    def place(self, planner: Planner, job: Job) -> Placement | None:
        if job.spec.num_gpus < 1:
            return planner.random_share(job.spec, self.rng)
        return planner.spread(job.spec, self.rng)

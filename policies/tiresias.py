"""Tiresias (NSDI'19): discretised two-dimensional least-attained-service with preemption.

A job's attained service is GPUs x time it has run. Jobs sit in priority queues by attained service (thresholds in
GPU-seconds); inside a queue, arrival order. A pending job may preempt running jobs only from strictly lower-priority
queues, which is what keeps it from thrashing. With `starvation_factor` set (off by default: under
overload it turns LAS into round robin with a preemption per quantum), a job that has waited that many times as long as
it has run is promoted to the top queue, and its attained service counts from zero again (as in Tiresias' simulator), so it is
not demoted and preempted straight back. Placement is consolidated when possible (Tiresias consolidates communication-heavy jobs).
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence
from typing import ClassVar

from policies.base import Decision, Place, Preempt, Wait, WakeAt
from policies.heuristics import wait_reason
from policies.placement import Planner
from policies.registry import register
from scheduler.model import Job, JobSpec, Placement
from scheduler.state import ClusterView


@register
class Tiresias:
    name: ClassVar[str] = "tiresias"
    oracle: ClassVar[bool] = False

    def __init__(
        self, seed: int = 0, thresholds: Sequence[float] = (3600.0, 36000.0), starvation_factor: float | None = None
    ) -> None:
        self.thresholds = sorted(thresholds)
        self.starvation_factor = starvation_factor
        self._discount: dict[int, float] = {}  # attained service forgiven at promotion, by job id

    def attained(self, view: ClusterView, job: Job) -> float:
        return view.attained_gpu_s(job) - self._discount.get(job.id, 0.0)

    def queue_of(self, view: ClusterView, job: Job, now: float) -> int:
        attained = self.attained(view, job)
        if self.starvation_factor is not None and job.start_s is None and attained > 0:
            executed = attained / job.spec.gpu_demand
            if now - job.queued_since >= self.starvation_factor * executed:
                self._discount[job.id] = view.attained_gpu_s(job)
                return 0
        return bisect.bisect_right(self.thresholds, attained)

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        if not queue:  # demotions only matter when someone is waiting
            return []
        planner = Planner(view)
        # The queue arrives in arrival order, so bucketing it by level gives (level, arrival) order without a sort.
        buckets: list[list[Job]] = [[] for _ in range(len(self.thresholds) + 1)]
        if self.starvation_factor is None:  # hot path on deep queues: a pending job's service is frozen
            th = self.thresholds
            for job in queue:
                a = job.attained_gpu_s
                buckets[bisect.bisect_right(th, a) if a else 0].append(job)
        else:
            for job in queue:
                buckets[self.queue_of(view, job, now)].append(job)
        # Victims (lowest priority first: highest queue, then latest arrival) are worked out only when a job does not
        # fit: on a cluster with room, every call is then linear in the queue alone.
        victims: list[Job] | None = None
        run_level: dict[int, int] = {}
        decisions: list[Decision] = []
        blocked = False
        for level, jobs in enumerate(buckets):
            lower: list[Job] | None = None
            failed_workers = None  # a whole-GPU gang this size did not fit and nothing can be preempted for it
            for job in jobs:
                spec = job.spec
                if lower == [] and failed_workers is not None and spec.num_gpus >= failed_workers:
                    continue  # cheap skip: capacity only shrinks while no preemption happens
                placement = planner.best_fit(spec) if planner.may_fit(spec) else None
                if placement is None:
                    if victims is None:
                        running = list(view.running.values())
                        run_level = {j.id: self.queue_of(view, j, now) for j in running}
                        victims = sorted(running, key=lambda j: (run_level[j.id], j.spec.submit_s, j.id),
                                         reverse=True)
                    if lower is None:
                        lower = [v for v in victims if run_level[v.id] > level]
                    if lower:
                        placement = self._preempt_for(view, planner, spec, lower, decisions, f"queue {level}")
                        if placement is not None:
                            taken = {d.job_id for d in decisions if isinstance(d, Preempt)}
                            victims = [v for v in victims if v.id not in taken]
                if placement is None:
                    if not blocked:
                        decisions.append(Wait(job.id, wait_reason(planner, spec)))
                    blocked = True
                    if spec.num_gpus >= 1 and not lower:
                        failed_workers = min(failed_workers or spec.num_gpus, spec.num_gpus)
                    continue
                planner.take(spec, placement)
                decisions.append(Place(job.id, placement, f"queue {level}"))
        if blocked:
            wake = self._next_demotion(view, now)
            if wake is not None:
                decisions.append(WakeAt(wake))
        return decisions

    def _preempt_for(
        self, view: ClusterView, planner: Planner, spec: JobSpec, lower: list[Job], decisions: list[Decision],
        why: str,
    ) -> Placement | None:
        """Preempt the fewest lower-priority jobs that let `spec` fit; they leave `lower` (and are decided)."""
        chosen = self._victims(view, planner, spec, lower)
        if not chosen:
            return None
        for v in chosen:
            planner.give_back(v)
        placement = planner.best_fit(spec)
        if placement is None:  # fragmentation: preempting would not help; undo
            for v in chosen:
                planner.take(v.spec, view.placement(v.id))
            return None
        for v in chosen:
            lower.remove(v)
            decisions.append(Preempt(v.id, f"preempted by {spec.name} ({why})"))
        return placement

    def _victims(self, view: ClusterView, planner: Planner, spec: JobSpec, lower: list[Job]) -> list[Job]:
        """The fewest lower-priority GPUs to preempt so the job fits: on one node when the gang fits in a node (so
        we never free GPUs scattered where they cannot help), else lowest priority first across the cluster."""
        if not lower:
            return []
        cluster = view.cluster
        if spec.num_gpus >= 1 and spec.workers <= cluster.max_gpus_per_node:
            on_node: dict[int, list[Job]] = {}
            for v in lower:  # `lower` is lowest priority first
                for node in view.placement(v.id).nodes(cluster):
                    on_node.setdefault(node, []).append(v)
            best: tuple[float, list[Job]] | None = None
            for node, vs in on_node.items():
                if cluster.node_num_gpus[node] < spec.workers:
                    continue
                free = int(planner.node_free[node])
                chosen: list[Job] = []
                for v in vs:
                    if free >= spec.workers:
                        break
                    p = view.placement(v.id)
                    # A victim frees its GPUs on this node; shared GPUs free up only if it was their last tenant.
                    free += sum(1 for g in p.gpus if cluster.gpu_node[g] == node
                                and planner.free_share[g] + p.share >= 1.0 - 1e-9)
                    chosen.append(v)
                if free >= spec.workers:
                    cost = sum(v.spec.gpu_demand for v in chosen)
                    if best is None or cost < best[0]:
                        best = (cost, chosen)
            return best[1] if best else []
        need = spec.gpu_demand - planner.free_capacity
        chosen = []
        for v in lower:
            if need <= 0:
                break
            chosen.append(v)
            need -= v.spec.gpu_demand
        return chosen if need <= 0 else []

    def _next_demotion(self, view: ClusterView, now: float) -> float | None:
        """When the next running job crosses a queue threshold (it may then be preempted)."""
        soonest = None
        for job in view.running.values():
            attained = self.attained(view, job)
            i = bisect.bisect_right(self.thresholds, attained)
            if i < len(self.thresholds):
                t = now + (self.thresholds[i] - attained) / job.spec.gpu_demand
                soonest = t if soonest is None else min(soonest, t)
        return None if soonest is None else soonest + 1e-6

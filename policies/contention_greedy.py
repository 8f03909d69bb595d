"""contention-greedy: in arrival order with backfill, each job takes the candidate placement that adds the least
predicted slowdown, to itself and to the jobs it joins, weighted by the GPUs each holds.

It places one job per call so that every prediction sees the placements made before it (the caller asks again until
nothing more is placed); jobs found blocked at the same instant are remembered so the queue is not rescanned.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar

from policies.base import Decision, Place, Wait
from policies.heuristics import wait_reason
from policies.placement import Planner
from policies.registry import register
from scheduler.model import Job, JobSpec, Placement
from scheduler.state import ClusterView


@register
class ContentionGreedy:
    name: ClassVar[str] = "contention-greedy"
    oracle: ClassVar[bool] = False

    def __init__(self, seed: int = 0, fragmentation_weight: float = 0.25) -> None:
        # Cost of leaving a whole GPU partly used by a fractional job, in GPU-slowdown units: small enough that
        # isolation wins over a heavily contended GPU, large enough that a harmless co-location is preferred.
        self.fragmentation_weight = fragmentation_weight
        self._memo: tuple[float, float] | None = None  # (now, free capacity) the blocked set is valid for
        self._blocked: set[int] = set()

    def cost(self, view: ClusterView, spec: JobSpec, placement: Placement) -> float:
        pred = view.predict(spec, placement)
        cost = (pred.slowdown - 1.0) * spec.gpu_demand
        for j, after in pred.others_after.items():
            cost += (after - pred.others_before[j]) * view.running[j].spec.gpu_demand
        if spec.num_gpus < 1 and all(view.free_share[g] >= 1.0 - 1e-9 for g in placement.gpus):
            cost += self.fragmentation_weight * (1.0 - spec.share)
        return cost

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        # Within one instant capacity only shrinks as this policy places jobs, so a job blocked earlier stays blocked.
        if self._memo is None or self._memo[0] != now or view.free_capacity > self._memo[1] + 1e-9:
            self._blocked = set()
        self._memo = (now, view.free_capacity)
        planner = Planner(view)
        first_wait: Decision | None = None
        for job in queue:
            if job.id in self._blocked:
                continue
            spec = job.spec
            cands = planner.candidates(spec) if planner.may_fit(spec) else []
            if not cands:
                self._blocked.add(job.id)
                if first_wait is None:
                    first_wait = Wait(job.id, wait_reason(planner, spec))
                continue
            costs = [self.cost(view, spec, p) for p in cands]
            best = min(range(len(cands)), key=lambda i: (round(costs[i], 9), i))
            return [Place(job.id, cands[best], f"least added slowdown {costs[best]:.3f} of {len(cands)} candidates")]
        return [first_wait] if first_wait is not None else []

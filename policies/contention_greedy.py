"""contention-greedy: in arrival order with backfill, each job takes the candidate placement that adds the least
predicted slowdown, to itself and to the jobs it joins.

Cost of a candidate, in GPUs' worth of lost progress per second:

* (own predicted slowdown - 1) x its GPUs;
* for every training job it joins, (added slowdown) x that job's GPUs. An inference service stays up for its wall time
  whatever its speed, so a neighbouring service counts only if the placement pushes its latency over its SLO
  (`slo_penalty` GPUs' worth);
* a fractional job that takes a wholly free GPU pays `fragmentation_weight` x the share it strands, which no
  whole-GPU job can use until it ends. Measured on the Alibaba slice, a weight of 2 keeps packing as tight as best fit
  while steering each job to the least interfering tenant; at 1 or below, isolating fractional jobs strands enough
  GPUs that queueing grows more than contention shrinks.

Ties go to the first candidate, the best-fit one. Waiting for a better placement (holding a spread job back, or
reserving a node for it) was tried and lengthened average JCT on both real traces, so this policy never waits while a
candidate exists.

It places one job per call so that every prediction sees the placements made before it (the caller asks again until
nothing more is placed). The first job that fits is found by `policies.queue_scan.FirstFit`: jobs passed over at
this instant are not tried again, nor, across instants, jobs of a size known to fit nowhere while no GPU was freed,
so a call weighs one job per size rather than the whole queue (issue 48).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar

from policies.heuristics import wait_reason
from policies.placement import FitKey, Planner
from policies.queue_scan import FirstFit, whole_fit_key
from policies.registry import register
from scheduler.core.decisions import Candidate, Decision, Place, Wait
from scheduler.core.model import Job, JobKind, JobSpec, Placement
from scheduler.core.state import ClusterView


@register
class ContentionGreedy:
    name: ClassVar[str] = "contention-greedy"
    oracle: ClassVar[bool] = False

    def __init__(self, seed: int = 0, fragmentation_weight: float = 2.0, slo_penalty: float = 1.0) -> None:
        self.fragmentation_weight = fragmentation_weight
        self.slo_penalty = slo_penalty
        self._scan = FirstFit(_fit_key)

    def cost(self, view: ClusterView, spec: JobSpec, placement: Placement) -> float:
        """Predicted GPUs' worth of progress lost by placing `spec` on `placement` now."""
        pred = view.predict(spec, placement)
        cost = (pred.slowdown - 1.0) * spec.gpu_demand
        for j, after in pred.others_after.items():
            other = view.running[j].spec
            if other.kind is JobKind.INFERENCE:
                prof = view.profile(other)
                slo = other.slo_ms or prof.slo_ms
                if slo and prof.latency_ms * after > slo >= prof.latency_ms * pred.others_before[j]:
                    cost += self.slo_penalty * other.gpu_demand
            else:
                cost += (after - pred.others_before[j]) * other.gpu_demand
        if spec.num_gpus < 1 and view.free_share[placement.gpus[0]] >= 1.0 - 1e-9:
            cost += self.fragmentation_weight * (1.0 - spec.share)
        return cost

    @staticmethod
    def _weighed(view: ClusterView, spec: JobSpec, cands: list[Placement], costs: list[float],
                 keep: int = 6) -> tuple[Candidate, ...]:
        """The cheapest few candidates with their predictions, for the controller to explain the choice."""
        order = sorted(range(len(cands)), key=lambda i: (round(costs[i], 9), i))[:keep]
        return tuple(Candidate.scored(view, spec, cands[i]) for i in order)

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        planner = Planner(view)
        found: list[Placement] = []

        def fits(job: Job) -> bool:
            nonlocal found
            found = planner.candidates(job.spec) if planner.may_fit(job.spec) else []
            return bool(found)

        job, waiting = self._scan.first(view, queue, now, fits)
        if job is None:
            return [Wait(waiting.id, wait_reason(planner, waiting.spec))] if waiting is not None else []
        spec, cands = job.spec, found
        costs = [self.cost(view, spec, p) for p in cands]
        best = min(range(len(cands)), key=lambda i: (round(costs[i], 9), i))
        why = f"least added slowdown ({costs[best]:.3f} GPUs' worth) of {len(cands)} candidates"
        tiers = view.fabric_words(spec, cands[best])
        why += f"; {tiers}" if tiers else ""
        return [Place(job.id, cands[best], why, self._weighed(view, spec, cands, costs))]


def _fit_key(view: ClusterView, job: Job) -> FitKey:
    # (gangs of one size but many models fit or not together: the scan reads a group's head, not each model's; a
    # million-job replay's queue held ~280 fit keys, most of them models of 9 sizes)
    return whole_fit_key(view, job.spec)

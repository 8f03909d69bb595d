"""Sizing elastic jobs, for the policies that size them: which GPUs a grow adds (and, from the core, which a shrink
keeps: `kept_gpus`, the tenancy frame's too), how many more a
job may take under its team's standing, and `largest:POLICY`, the rigid baseline of issue 49 (any policy, its elastic
jobs started at the largest size that fits now and never resized).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from policies.placement import Planner
from policies.registry import UnknownPolicyError, make_policy, register_prefix
from scheduler.core.decisions import Decision, Place, Preempt, Resize
from scheduler.core.elastic import sizes_within
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.resizing import kept_gpus as kept_gpus
from scheduler.core.standing import TenancyStanding, growth_room
from scheduler.core.state import ClusterView


def extra_gpus(planner: Planner, gpus: Sequence[int], n: int, spec: JobSpec) -> list[int] | None:
    """`n` free whole GPUs to add to `spec`'s gang on `gpus`: on its own nodes first, then on the nodes with most free
    (of those its constraints allow)."""
    c = planner.cluster
    own = sorted({int(c.gpu_node[g]) for g in gpus}, key=lambda node: -int(planner.node_free[node]))
    usable = planner.usable_nodes(spec) if spec.constraints is not None else None
    others = sorted((node for node in range(c.num_nodes) if node not in own and (usable is None or usable[node])),
                    key=lambda node: -int(planner.node_free[node]))
    chosen: list[int] = []
    for node in [*own, *others]:
        if len(chosen) == n:
            break
        free = int(planner.node_free[node])
        if free:
            chosen += planner.gpus_in_node(node, min(free, n - len(chosen)))
    return chosen if len(chosen) == n else None


def room(told: TenancyStanding | None, job: Job, fresh: bool, held: int) -> int:
    """How many more GPUs `job` may take, holding (or planned on) `held`: up to its submitted size (`fresh`: a start)
    or its size now (running) freely, and beyond that what its team may grow by (`standing.growth_room`);
    unbounded without teams."""
    if told is None:
        return 1 << 30
    spec = job.submitted or job.spec
    base = spec.workers if fresh else job.spec.workers
    return max(0, base + int(growth_room(told.of(spec), told.lendable_gpus, spec.preemptible) + 1e-9) - held)


class LargestAtStart:
    """`POLICY`'s decisions, each of its starts of an elastic job made at the largest size it accepts that fits now
    (on GPUs none of the decisions take, beside the ones it was placed on, within its team's room); no resize ever.
    The sizing rule a scheduler without a sizing policy would use: the rigid baseline of issue 49."""

    oracle: bool

    def __init__(self, inner: Any) -> None:
        if getattr(inner, "time_sharing", False):
            # Its preemptions follow an order of the jobs at their sizes; jobs started larger than it planned make it
            # preempt again, and it never settled (gittins at one instant for 100,000 rounds).
            raise UnknownPolicyError(f"largest:{inner.name}: {inner.name} preempts to time-share its jobs, which "
                                     "starting them at other sizes would fight; use a policy that does not")
        self.inner = inner
        self.name = f"largest:{inner.name}"
        self.oracle = inner.oracle

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        decisions = self.inner.schedule(view, queue, now)
        elastic = {j.id: j for j in queue if j.spec.elastic}
        if not elastic or not any(isinstance(d, Place) and d.job_id in elastic for d in decisions):
            return decisions
        planner = Planner(view)
        by_id = {j.id: j for j in queue}
        for d in decisions:  # the plan the decisions leave
            if isinstance(d, Preempt) and d.job_id in view.running:
                planner.give_back(view.running[d.job_id])
            elif isinstance(d, Place) and d.job_id in by_id:
                planner.take(by_id[d.job_id].spec, d.placement)
        told = view.tenancy
        out: list[Decision] = []
        for d in decisions:
            job = elastic.get(d.job_id) if isinstance(d, Place) else None
            if job is None or not isinstance(d, Place):
                out.append(d)
                continue
            held = len(d.placement.gpus)
            may = min(planner.free_whole, room(told, job, True, held))
            larger = sizes_within(job.spec, held + 1, held + may)
            extra = extra_gpus(planner, d.placement.gpus, larger[-1] - held, job.spec) if larger else None
            if extra is None:
                out.append(d)
                continue
            planner.take(job.spec, Placement(tuple(extra)))
            if told is not None:
                told = told.grown(told.of(job.spec).name, max(0, held + len(extra) - job.spec.workers))
            out.append(Place(d.job_id, Placement(tuple(sorted([*d.placement.gpus, *extra]))),
                             f"{d.reason + '; ' if d.reason else ''}started at {held + len(extra)} GPUs, the most "
                             "that fit now"))
        return [d for d in out if not isinstance(d, Resize)]


register_prefix("largest", lambda arg, seed: LargestAtStart(make_policy(arg, seed=seed)), wraps=True)

"""Whether a job fits once some running jobs leave, and what each running job would free toward it: the room model
every preempting rule that takes victims for a job it does not place itself uses (the tenancy frame's reclaim, the
priority rule), with `scheduler.core.victims` choosing the set."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from scheduler.core.constraints import eligible_gpus
from scheduler.core.model import Job, JobSpec
from scheduler.core.state import ClusterView
from scheduler.core.victims import EPS, Offer


def room_model(view: ClusterView, spec: JobSpec) -> tuple[dict[int, float], Callable[[Job], Offer[Job, int]]]:
    """What `spec` lacks, as `has_room` counts room, and each candidate victim's offer toward it. A gang: whole GPUs
    over the cluster (one bucket, -1), each victim gaining from each of its GPUs the share of that GPU's tenants it
    is (so two halves free a GPU together; `has_room` has the last word). A GPU share: each GPU that lacks it."""
    free = view.free_share
    allowed = _allowed(view, spec)
    if spec.num_gpus >= 1:
        lacking = spec.workers - _free_whole(view, allowed)

        def whole(j: Job) -> Offer[Job, int]:
            p = view.placement(j.id)
            gained = sum(1.0 if 1.0 - free[g] <= p.share + EPS else p.share / (1.0 - free[g]) for g in p.gpus
                         if allowed is None or allowed[g])
            return Offer(j, {-1: gained}, j.spec.gpu_demand)

        return ({-1: float(lacking)} if lacking > 0 else {}), whole
    ok = view.share_mask(spec) if allowed is None else view.share_mask(spec) & allowed
    short = np.flatnonzero((free < spec.share - EPS) & ok)  # where CUDA MPS (and its constraints) could run it
    lacking_share = dict(zip(short.tolist(), (spec.share - free[short]).tolist(), strict=False))

    def share(j: Job) -> Offer[Job, int]:
        p = view.placement(j.id)
        return Offer(j, {g: p.share for g in p.gpus}, j.spec.gpu_demand)

    return lacking_share, share


def has_room(view: ClusterView, spec: JobSpec, victims: Iterable[Job] = ()) -> bool:
    """Would `spec` fit (by capacity; a gang by whole GPUs; a share where CUDA MPS could run it) once `victims` are off
    their GPUs?"""
    victims = list(victims)
    freed: dict[int, float] = {}
    for v in victims:
        p = view.placement(v.id)
        for g in p.gpus:
            freed[g] = freed.get(g, 0.0) + p.share
    free = view.free_share
    allowed = _allowed(view, spec)
    if spec.num_gpus >= 1:
        whole = _free_whole(view, allowed) + sum(1 for g, s in freed.items() if free[g] < 1.0 - EPS
                                                 and free[g] + s >= 1.0 - EPS and (allowed is None or allowed[g]))
        return whole >= spec.workers
    ok = view.share_mask(spec, [v.id for v in victims])
    if allowed is not None:
        ok &= allowed
    return bool(((free >= spec.share - EPS) & ok).any()) or any(ok[g] and free[g] + s >= spec.share - EPS
                                                                for g, s in freed.items())


def fits_open(view: ClusterView, spec: JobSpec) -> bool:
    """Whether `spec` could be placed now on the GPUs that take jobs (a closed GPU looks full,
    `ClusterState.set_closed`): a gang on as many whole free GPUs with memory enough as its constraints allow; a share
    on a GPU with that share and memory free where CUDA MPS could run it. A job that does not fit so waits for GPUs
    that are closed (and a policy's order may keep others behind it); a run that ends on an idle cluster with every
    queued job fitting so was stranded by its policy (`scheduler.live.whatif`). An elastic job is asked at its
    submitted size: a policy that does not size jobs starts it at that size or not at all."""
    mem = view.mem_need(spec)
    ok = view.cluster.gpu_mem - np.asarray(view.used_mem) >= mem - EPS
    allowed = _allowed(view, spec)
    if allowed is not None:
        ok &= allowed
    free = np.asarray(view.free_share)
    if spec.num_gpus >= 1:
        return int(np.count_nonzero(ok & (free >= 1.0 - EPS))) >= spec.workers
    return bool((ok & view.share_mask(spec) & (free >= spec.share - EPS)).any())


def _allowed(view: ClusterView, spec: JobSpec) -> np.ndarray | None:
    """Per GPU, whether `spec`'s constraints allow it (`scheduler.core.constraints`); None: every GPU."""
    return None if spec.constraints is None else eligible_gpus(view.cluster, spec.constraints)


def _free_whole(view: ClusterView, allowed: np.ndarray | None) -> int:
    """Wholly free GPUs, among those `allowed`."""
    if allowed is None:
        return view.free_whole
    return int(np.count_nonzero((view.free_share >= 1.0 - EPS) & allowed))

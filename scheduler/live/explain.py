"""Why a job waits, and roughly when it may start: the words and figures the API and dashboard show.

Two pieces, both cheap enough to run on every controller pass or API request:

* `capacity_reason`: what the cluster lacks for a pending job right now ("waiting for 8 GPUs (3 free)"), or, if the
  job would fit, that the policy chose to wait. Policies that say why they wait (`Wait` decisions) are quoted as they
  are; this covers the ones that do not (the RL agent waits by choosing the wait action).
* `start_estimate`: when enough GPUs may be free for a job, replaying the running jobs' predicted ends and the jobs
  ahead of it in submission order on aggregate GPU capacity. It ignores topology and the policy's own order, so it
  is an estimate to show as "about", not a promise; `POST /api/v1/whatif` runs the full simulator when that matters.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.core.model import JobSpec
from scheduler.core.state import EPS, ClusterView


def capacity_reason(view: ClusterView, spec: JobSpec, policy: str) -> str:
    """What keeps `spec` from starting now, in a user's words."""
    mem = view.mem_need(spec)
    gpu_mem = view.cluster.gpu_mem
    if spec.num_gpus < 1:
        fits = (view.free_share >= spec.share - EPS) & (view.used_mem + mem <= gpu_mem + EPS)
        if fits.any():
            return f"fits now: {policy} chose to wait"
        return f"waiting for a GPU with a {spec.share:g} share and {mem:g} GB free"
    k = spec.workers
    whole = (view.free_share >= 1.0 - EPS) & (mem <= gpu_mem + EPS)
    free = int(whole.sum())
    if free < k:
        return f"waiting for {k} GPUs ({free} free)"
    per_node = np.bincount(view.cluster.gpu_node[whole], minlength=view.cluster.num_nodes)
    most = int(per_node.max())
    if k <= view.cluster.max_gpus_per_node and most < k:
        return f"fits only spread over nodes (at most {most} free on one): {policy} chose to wait for {k} on one node"
    return f"fits now: {policy} chose to wait"


@dataclass(frozen=True, slots=True)
class Demand:
    gpus: float  # GPUs it holds (a share counts as its fraction)
    seconds: float  # how long it holds them: the time left for a running job, the expected run for a queued one


def start_estimates(total_gpus: float, running: Sequence[Demand], queue: Sequence[Demand]) -> list[float | None]:
    """Seconds until each job of `queue` (first come, first served on aggregate capacity) may start, in one pass:
    entry i is None if job i can never fit."""
    free = total_gpus - sum(d.gpus for d in running)
    ends = [(d.seconds, d.gpus) for d in running]
    heapq.heapify(ends)
    now = 0.0
    out: list[float | None] = []
    for job in queue:
        if job.gpus > total_gpus + EPS:
            out.append(None)
            continue  # it can never start; it does not hold anyone up
        while free < job.gpus - EPS and ends:
            now, gpus = heapq.heappop(ends)
            free += gpus
        if free < job.gpus - EPS:  # nothing will free capacity: neither this job nor any behind it starts
            out.extend([None] * (len(queue) - len(out)))
            return out
        out.append(now)
        if job.seconds > 0:
            free -= job.gpus
            heapq.heappush(ends, (now + job.seconds, job.gpus))
    return out


def start_estimate(total_gpus: float, running: Sequence[Demand], ahead: Sequence[Demand], need: float) -> float | None:
    """Seconds until `need` GPUs may be free for a job behind `ahead` (first come, first served on aggregate
    capacity), or None if it can never fit."""
    return start_estimates(total_gpus, running, [*ahead, Demand(need, 0.0)])[-1]

"""The store's figures over time, for the API and the dashboard: job completion time, queueing delay, queue length and
GPU share allocated over a window; each team's quota, holdings and fair-share usage; and the NICs' and rack uplinks'
load now, as the contention model sees the running placements.

All are computed from the store alone (jobs' timestamps and allocation intervals, the running placements), so they
answer while the controller is down and need no bookkeeping of their own.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from collections import defaultdict
from typing import Any

from sqlalchemy import func, or_, select

from scheduler.core.contention import ContentionModel
from scheduler.core.generic import known_profiles
from scheduler.core.model import JobSpec, Placement
from scheduler.live import whatif
from scheduler.live.store import JobState, Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Allocation, Gpu, Job, StoreIdentity, Team
from scheduler.live.team_usage import Held, history_start, usage_over_quota, usage_series


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping [start, end) intervals merged (a job's GPUs share one run's interval)."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def compute_stats(store: Store, window_s: float, bucket_s: float, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    n = max(1, math.ceil(window_s / bucket_s - 1e-9))
    t0 = now - n * bucket_s
    edges = [t0 + i * bucket_s for i in range(n + 1)]
    with store.session() as s:
        gpus = s.scalar(select(func.count()).select_from(Gpu)) or 0
        # When the service began: utilisation is averaged over the time it existed, not over the window before it
        # (a 24-hour window of a store an hour old is not 4% used). Its oldest job counts too: a store upgraded
        # to ids (migration 0019) got its id later than its first jobs.
        began = min((t for t in (s.scalar(select(StoreIdentity.created_at)),
                                 s.scalar(select(func.min(Job.submitted_at)))) if t is not None), default=t0)
        jobs = s.execute(
            select(Job.id, Job.state, Job.submitted_at, Job.first_started_at, Job.finished_at)
            .where(Job.submitted_at <= now, or_(Job.finished_at.is_(None), Job.finished_at >= t0))
        ).all()
        allocs = s.execute(
            select(Allocation.job_id, Allocation.gpu, Allocation.share, Allocation.allocated_at, Allocation.released_at)
            .where(Allocation.allocated_at <= now, or_(Allocation.released_at.is_(None), Allocation.released_at >= t0))
        ).all()

    def bucket_of(t: float) -> int | None:
        if t < t0 or t > now:
            return None
        return min(n - 1, int((t - t0) // bucket_s))

    jct: list[list[float]] = [[] for _ in range(n)]
    queue: list[list[float]] = [[] for _ in range(n)]
    finished = [0] * n
    succeeded = [0] * n
    for job in jobs:
        if job.finished_at is not None and (b := bucket_of(job.finished_at)) is not None:
            finished[b] += 1
            if job.state == JobState.SUCCEEDED:
                succeeded[b] += 1
                jct[b].append(job.finished_at - job.submitted_at)
        if job.first_started_at is not None and (b := bucket_of(job.first_started_at)) is not None:
            queue[b].append(max(0.0, job.first_started_at - job.submitted_at))

    # Who holds GPUs when, and how much share is allocated in each bucket (time-weighted).
    share = [0.0] * n
    held: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for a in allocs:
        start, end = a.allocated_at, a.released_at if a.released_at is not None else math.inf
        held[a.job_id].append((start, end))
        lo, hi = max(start, t0), min(end, now)
        if hi <= lo:
            continue
        for b in range(max(0, int((lo - t0) // bucket_s)), min(n, int((hi - t0) // bucket_s) + 1)):
            overlap = min(hi, edges[b + 1]) - max(lo, edges[b])
            if overlap > 0:
                share[b] += a.share * overlap / bucket_s

    # Jobs alive (submitted, not finished) and jobs holding GPUs at each bucket's end, by counting interval ends.
    submits = sorted(job.submitted_at for job in jobs)
    finishes = sorted(job.finished_at for job in jobs if job.finished_at is not None)
    run_starts: list[float] = []
    run_ends: list[float] = []
    for spans in held.values():
        for start, end in _merge(spans):
            run_starts.append(start)
            run_ends.append(end)
    run_starts.sort()
    run_ends.sort()
    pending = [0] * n
    running = [0] * n
    for b in range(n):
        t = min(edges[b + 1], now)
        alive = bisect_right(submits, t) - bisect_right(finishes, t)
        running[b] = bisect_right(run_starts, t) - bisect_right(run_ends, t)
        pending[b] = max(0, alive - running[b])  # alive and holding no GPU: queued (first time or requeued)

    # Each bucket's seconds in which the service existed; its utilisation is over those (None: none).
    existed = [max(0.0, min(edges[b + 1], now) - max(edges[b], began)) for b in range(n)]
    buckets = [{
        "start": edges[b], "end": edges[b + 1], "finished": finished[b], "succeeded": succeeded[b],
        "avg_jct_s": _mean(jct[b]), "max_jct_s": max(jct[b]) if jct[b] else None, "started": len(queue[b]),
        "avg_queue_s": _mean(queue[b]), "pending": pending[b], "running": running[b],
        "share_allocated": round(share[b], 6),
        "utilisation": round(share[b] * bucket_s / (gpus * existed[b]), 6) if gpus and existed[b] > 0 else None,
    } for b in range(n)]
    all_jct = [x for xs in jct for x in xs]
    all_queue = [x for xs in queue for x in xs]
    summary = {
        "finished": sum(finished), "succeeded": sum(succeeded), "avg_jct_s": _mean(all_jct),
        "avg_queue_s": _mean(all_queue), "started": len(all_queue),
        "avg_utilisation": (sum(share) * bucket_s / (gpus * sum(existed))) if gpus and sum(existed) > 0 else None,
        "since": max(t0, began),  # the span the averages cover: from here to `now`
        "pending_now": pending[-1], "running_now": running[-1],
    }
    return {"now": now, "window_s": n * bucket_s, "bucket_s": bucket_s, "gpus": gpus, "buckets": buckets,
            "summary": summary}


def _r(x: float) -> float:
    return round(x, 6)


def compute_team_stats(store: Store, window_s: float, points: int, half_life_s: float, now: float | None = None
                       ) -> dict[str, Any]:
    """Every team's figures now (`queries.team_usage`) and its series over the window, from the allocation history
    (an allocation's share counts for the team its job ran under)."""
    now = time.time() if now is None else now
    since = history_start(now, window_s, half_life_s)
    with store.session() as s:
        teams = q.list_teams(s)
        now_usage = q.team_usage(s)
        gpus = q.cluster_gpus(s)
        rows = q.held_intervals(s, since, now)
    series = usage_series((Held(team, share, start, end) for team, share, start, end in rows),
                          [t.name for t in teams], now=now, window_s=window_s, points=points, half_life_s=half_life_s)
    out = []
    for t in teams:
        u, ts = now_usage[t.name], series.teams[t.name]
        out.append({
            "name": t.name, "quota_gpus": t.quota_gpus, "borrow_limit_gpus": t.borrow_limit_gpus,
            "in_use_gpus": _r(u["in_use_gpus"]), "borrowed_gpus": _r(u["borrowed_gpus"]),
            "lent_gpus": _r(u["lent_gpus"]), "pending_jobs": int(u["pending_jobs"]),
            "running_jobs": int(u["running_jobs"]), "priority_ceiling": _ceiling(t), "usage_gpu_s": _r(ts.usage_now),
            "usage_ratio": _ratio(ts.usage_now, t.quota_gpus),
            "series": {"gpus_in_use": [_r(x) for x in ts.gpus_in_use],
                       "usage_ratio": [_ratio(x, t.quota_gpus) for x in ts.usage]},
        })
    return {"now": now, "window_s": window_s, "step_s": series.step_s, "half_life_s": half_life_s, "gpus": gpus,
            "times": series.times, "teams": out}


def _ceiling(team: Team) -> dict[str, Any]:
    """What the team's members may rank (where they have no setting of their own): the dashboard's team page."""
    c = q.team_ceiling(team)
    return {"max_priority": c.max_priority, "allow_nonpreemptible": c.allow_nonpreemptible,
            "priority_classes": list(c.priority_classes)}


def _ratio(usage: float, quota: float) -> float | None:
    r = usage_over_quota(usage, quota)
    return None if r is None else _r(r)


NETWORK_METHOD = (
    "the contention model's own link loads (the one the controller places with): every running job's placement is "
    "added to a ContentionModel of the live cluster, and each NIC's and rack uplink's load is the sum of the duty "
    "cycles of the jobs whose all-reduce crosses it (1.0: busy all the time at line rate; above 1 the jobs contend); "
    "on a fabric, a rack's load is its leaf switches' busiest port up or down"
)


def network_load(store: Store) -> dict[str, Any]:
    """NIC and rack-uplink load now, from the contention model rebuilt from the store's running placements."""
    snap = whatif.snapshot(store)
    if not snap.nodes:
        return {"approximate": False, "method": NETWORK_METHOD, "nodes": [], "uplinks": [], "fabric": snap.fabric}
    cluster = snap.cluster()
    # The store numbers GPUs cluster-wide over every node it recorded; the model numbers its nodes' GPUs in order.
    to_model = snap.model_gpus(cluster)
    down = snap.down_gpus()  # a run still recorded on a node that is down moves no traffic
    model = ContentionModel(cluster, known_profiles())
    for job in snap.running:
        placed = job.gpus and all(g in to_model for g in job.gpus) and down.isdisjoint(job.gpus)
        if job.model in model.profiles and placed:
            spec = JobSpec(job.name, 0.0, job.num_gpus, max(job.work_left, 1.0), job.model)
            model.add(job.id, spec, Placement(tuple(to_model[g] for g in job.gpus), job.share))
    load = model.link_load
    nodes = []
    for i, n in enumerate(snap.nodes):
        nics = cluster.nic_link[cluster.nic_node == i].tolist()  # an HGX server has one per GPU
        gbps = [float(cluster.link_capacity[nic]) * 8.0 for nic in nics]  # link capacities are GB/s
        demand = sum(float(load[nic]) * g for nic, g in zip(nics, gbps, strict=False))
        jobs = sorted({j for nic in nics for j in model.link_jobs(nic)})
        nodes.append({"node": n.name, "preset": n.preset, "nic_gbps": sum(gbps),
                      "load": round(demand / sum(gbps), 6), "demand_gbps": round(demand, 3), "jobs": jobs})
    uplinks = []
    for r in range(cluster.num_racks):  # with a fabric, a rack's busiest switch port up or down
        links = cluster.rack_links(r).tolist()
        uplinks.append({"rack": r, "name": cluster.rack_names[r], "load": round(max(float(load[k]) for k in links), 6),
                        "jobs": sorted({j for k in links for j in model.link_jobs(k)})})
    return {"approximate": False, "method": NETWORK_METHOD, "nodes": nodes, "uplinks": uplinks,
            "fabric": snap.fabric}

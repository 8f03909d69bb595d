"""Why a job waits: the words and figures the API and dashboard show.

Two pieces, both cheap enough to run on every controller pass or API request:

* `capacity_reason`: what the cluster lacks for a pending job right now ("waiting for 8 GPUs (3 free)"), or, if the
  job would fit, that the policy chose to wait. Policies that say why they wait (`Wait` decisions) are quoted as they
  are; this covers the ones that do not (the RL agent waits by choosing the wait action).
* `start_estimates`: the old start estimate, kept only as the baseline `benchmarks/estimates.py` measures the live
  estimates against ("today's"): the running jobs' predicted ends and the queue in submission order, GPU by GPU,
  with each team's ceiling and the policy's holds, but not the policy's own order. The live service's estimates are
  `scheduler.live.estimates`' (the store's present replayed under the active policy by the core's replay).

And what a job's page shows besides: what a job's progress is where it is known (`known_progress`), and where a job
that holds no GPU now last ran and why it stopped (`last_placement`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.core.colocation import share_fits
from scheduler.core.constraints import eligible_gpus, eligible_nodes
from scheduler.core.model import DEFAULT_TEAM, JobSpec
from scheduler.core.reasons import Code, Reason
from scheduler.core.state import EPS, ClusterView
from scheduler.live.job_states import JobState, JobType
from scheduler.live.store.models import Allocation, Gpu, JobEvent, Node
from scheduler.live.store.models import Job as JobRow
from scheduler.live.words import gpus_text


def capacity_reason(view: ClusterView, spec: JobSpec, policy: str) -> Reason:
    """What keeps `spec` from starting now (`.text`: in a user's words)."""
    mem = view.mem_need(spec)
    gpu_mem = view.cluster.gpu_mem
    if spec.constraints is not None:
        unmet = _unmet_constraints(view, spec, mem)
        if unmet is not None:
            return unmet
    if spec.num_gpus < 1:
        free_here = (view.free_share >= spec.share - EPS) & (view.used_mem + mem <= gpu_mem + EPS)
        if (free_here & view.share_mask(spec)).any():
            return Reason(Code.FITS_NOW, {"policy": policy})
        if (free_here & share_fits(mem, spec.share, gpu_mem)).any():  # only the one-user MPS rule keeps it out
            lack = "mps_user"
        elif free_here.any():
            lack = "mps_memory"  # the GPUs with the share free are too small for its memory under MPS
        else:
            lack = "room"
        return Reason(Code.SHARE_CAPACITY, {"share": float(spec.share), "mem_gb": float(mem), "lack": lack})
    k = spec.workers
    whole = (view.free_share >= 1.0 - EPS) & (mem <= gpu_mem + EPS)
    free = int(whole.sum())
    if free < k:
        return Reason(Code.CAPACITY, {"gpus": k, "free": free})
    per_node = np.sort(np.bincount(view.cluster.gpu_node[whole], minlength=view.cluster.num_nodes))
    fewest = view.cluster.fewest_nodes(k)
    room = int(per_node[-fewest:].sum())  # the whole free GPUs of the fewest servers with the most
    if room < k:
        # It would start spread over more servers than it needs: policies that hold jobs for compact room
        # (policies.compactness) do so, and say why where they looked at the job; this covers the rest.
        return Reason(Code.FITS_SPREAD, {"policy": policy, "gpus": k, "nodes": int(fewest), "room": room})
    return Reason(Code.FITS_NOW, {"policy": policy})


def _unmet_constraints(view: ClusterView, spec: JobSpec, mem: float) -> Reason | None:
    """The reason naming `spec`'s constraints when the nodes they allow lack what it needs now (None: they have it,
    and the capacity's reasons say the rest)."""
    assert spec.constraints is not None
    c = view.cluster
    allowed = eligible_gpus(c, spec.constraints)
    if spec.num_gpus < 1:
        room = (view.free_share >= spec.share - EPS) & (view.used_mem + mem <= c.gpu_mem + EPS) & view.share_mask(spec)
        free, need, elsewhere = int(np.count_nonzero(room & allowed)), 1, bool(room.any())
    else:
        whole = (view.free_share >= 1.0 - EPS) & (mem <= c.gpu_mem + EPS)
        free, need, elsewhere = int(np.count_nonzero(whole & allowed)), spec.workers, int(whole.sum()) >= spec.workers
    if free >= need:
        return None
    return Reason(Code.CONSTRAINED, {
        "constraints": spec.constraints.words(), "nodes": int(eligible_nodes(c, spec.constraints).sum()),
        "gpus": None if spec.num_gpus < 1 else spec.workers, "share": float(spec.share) if spec.num_gpus < 1 else None,
        "free": free, "elsewhere": elsewhere})


# ---- start estimates --------------------------------------------------------------------------------------------

# A run past its predicted end ends some time: it counts as ending this long from now, at every look, so an overrun
# moves the estimates later instead of pinning them at "now" (the live replay's rule too: `scheduler.live.estimates`).
OVERDUE_FLOOR_S = 60.0


@dataclass(frozen=True, slots=True)
class Running:
    """A running job as the estimate replays it."""

    gpus: Mapping[int, float]  # cluster-wide GPU -> the share of it the job holds
    seconds: float  # predicted time left (at least OVERDUE_FLOOR_S for a run past its predicted end)
    team: str = DEFAULT_TEAM


@dataclass(frozen=True, slots=True)
class Queued:
    """A pending job as the estimate replays it."""

    gpus: float  # num_gpus: whole GPUs (a gang), or a share of one
    seconds: float  # how long it will hold them once started
    team: str = DEFAULT_TEAM
    mem_gb: float = 0.0  # per GPU: a gang's GPUs must have this much


@dataclass
class _Replay:
    free: dict[int, float]  # usable GPU -> free share
    gpu_mem: Mapping[int, float]
    ceilings: Mapping[str, float]
    team_use: dict[str, float] = field(default_factory=dict)
    ends: list[tuple[float, int, Mapping[int, float], str, float]] = field(default_factory=list)
    seq: int = 0

    def hold(self, at: float, gpus: Mapping[int, float], team: str, demand: float) -> None:
        for g, share in gpus.items():
            if g in self.free:
                self.free[g] -= share
        self.team_use[team] = self.team_use.get(team, 0.0) + demand
        self.seq += 1
        heapq.heappush(self.ends, (at, self.seq, gpus, team, demand))

    def release(self) -> float:
        at, _, gpus, team, demand = heapq.heappop(self.ends)
        for g, share in gpus.items():
            if g in self.free:
                self.free[g] += share
        self.team_use[team] -= demand
        return at

    def take(self, job: Queued) -> dict[int, float] | None:
        """The GPUs `job` would get now (the first whole free ones with its memory; the fullest GPU with its share
        free), or None if it does not fit now, GPUs or its team's ceiling."""
        if self.team_use.get(job.team, 0.0) + job.gpus > self.ceilings.get(job.team, math.inf) + EPS:
            return None
        if job.gpus >= 1:
            k = int(job.gpus)
            whole = [g for g, f in self.free.items() if f >= 1 - EPS and self.gpu_mem.get(g, math.inf) >= job.mem_gb]
            return {g: 1.0 for g in whole[:k]} if len(whole) >= k else None
        fits = [g for g, f in self.free.items() if f >= job.gpus - EPS]
        return {min(fits, key=lambda g: (self.free[g], g)): job.gpus} if fits else None


def start_estimates(usable: Iterable[int], running: Sequence[Running], queue: Sequence[Queued], *,
                    gpu_mem: Mapping[int, float] | None = None,
                    ceilings: Mapping[str, float] | None = None,
                    not_before: Sequence[float] | None = None) -> list[float | None]:
    """The old estimate, kept for `benchmarks/estimates.py` alone (its "today's" column; the live service replays the
    active policy instead: `scheduler.live.estimates`). Seconds until each job of `queue` may start, the queue taken
    in order (no one overtakes), on the `usable`
    GPUs: entry i is None if job i can never start (more GPUs than are usable, or nothing running would free enough).
    A job that does not fit now gets at least the earliest predicted end among the running jobs: never 0.

    `not_before[i]` (seconds from now; 0: none) holds job i back until then, as the policy holds a job for compact
    room (`topology`: it starts spread when its hold ends, at the latest): it takes no GPUs before, and the jobs behind
    it are replayed meanwhile as if it were not there (the policy lets them start); from then on it is back in its
    place in the queue, ahead of the jobs behind it that have not started."""
    usable = sorted(set(usable))
    mem = gpu_mem or {}
    if not_before is not None and len(not_before) != len(queue):
        raise ValueError(f"not_before has {len(not_before)} entries for {len(queue)} queued jobs")
    r = _Replay({g: 1.0 for g in usable}, mem, ceilings or {})
    for held in running:
        r.hold(held.seconds, held.gpus, held.team, sum(held.gpus.values()))
    out: list[float | None] = [None] * len(queue)
    waiting: list[int] = []  # jobs free to start, by their place in the queue (a heap: the first goes first)
    holds: list[tuple[float, int]] = []  # jobs held back: (until, place in the queue)
    for i, job in enumerate(queue):
        possible = [g for g in usable if mem.get(g, math.inf) >= job.mem_gb]
        if (len(possible) < job.gpus - EPS if job.gpus >= 1 else not possible) or \
                job.gpus > r.ceilings.get(job.team, math.inf) + EPS:
            continue  # it can never start here (None); it does not hold anyone up
        until = not_before[i] if not_before is not None else 0.0
        if until > 0:
            holds.append((until, i))
        else:
            waiting.append(i)  # in order: already a heap
    heapq.heapify(holds)
    now = 0.0
    while waiting or holds:
        while holds and holds[0][0] <= now:  # a hold ended: the job is back in its place in the queue
            heapq.heappush(waiting, heapq.heappop(holds)[1])
        if waiting:
            job = queue[waiting[0]]
            got = r.take(job)
            if got is not None:
                out[heapq.heappop(waiting)] = now
                if job.seconds > 0:
                    r.hold(now + job.seconds, got, job.team, job.gpus)
                continue
        # The first job free to start does not fit now (or none is free to): on to the next hold's end or run's end.
        if holds and (not r.ends or holds[0][0] <= r.ends[0][0]):
            now = max(now, holds[0][0])
        elif r.ends:
            now = max(now, r.release())
        else:  # nothing will free enough: neither the first waiting job nor any behind it starts (None)
            break
    return out


def known_progress(kind: str, state: str, progress: float | None) -> float | None:
    """A job's progress where it is known, else None: an emulated job's workers report it; a command job reports none
    (its `progress` stays 0 until it succeeds), so it has one only once it succeeded or if it ever reported one."""
    if progress is None:
        return None
    if kind == JobType.EMULATED or state == JobState.SUCCEEDED or progress > 0:
        return progress
    return None


# ---- where a job is, was, and what it chose between ---------------------------------------------------------------


def gpu_names(s: Session) -> dict[int, tuple[str, int]]:
    """Every GPU's cluster-wide index -> (its node, its index on the node)."""
    return {index: (node, local) for index, node, local in
            s.execute(select(Gpu.index, Node.name, Gpu.local_index).join(Node, Gpu.node_id == Node.id))}


def where_text(gpus: Iterable[int], names: Mapping[int, tuple[str, int]], share: float | None = None) -> str:
    """Cluster-wide GPU indices in the one numbering every view uses: "node2: GPU 0-7 (cluster GPUs 16-23)"."""
    return gpus_text(((*names.get(g, ("?", g)), g) for g in gpus), share, cluster_ids=True)


def allocation_text(allocs: Iterable[Allocation]) -> str:
    """A run's allocations as the job list shows them: "node2: GPU 0-7 (cluster GPUs 16-23)"."""
    rows = list(allocs)
    return gpus_text(((a.node, a.local_gpu, a.gpu) for a in rows), rows[0].share if rows else None, cluster_ids=True)


ENDED_BY = ("preempted", "lost")


def last_placement(s: Session, job: JobRow) -> dict[str, Any] | None:
    """Where a job that holds no GPU now last ran (its latest attempt's allocations, all released) and what ended that
    run: the last "preempted" or "lost" event since it was placed (None: it ended otherwise, e.g. it finished).
    None if it never held a GPU."""
    latest = s.scalar(select(Allocation.attempt).where(Allocation.job_id == job.id, Allocation.released_at.is_not(None))
                      .order_by(Allocation.attempt.desc()).limit(1))
    if latest is None:
        return None
    rows = s.scalars(select(Allocation).where(Allocation.job_id == job.id, Allocation.attempt == latest)
                     .order_by(Allocation.rank, Allocation.gpu)).all()
    if any(a.released_at is None for a in rows):
        return None  # it still holds them: that is its placement, not its last one
    placed_at = min(a.allocated_at for a in rows)
    released_at = max(a.released_at or 0.0 for a in rows)
    event = s.scalars(select(JobEvent).where(JobEvent.job_id == job.id, JobEvent.kind.in_(ENDED_BY),
                                             JobEvent.at >= placed_at).order_by(JobEvent.id.desc()).limit(1)).first()
    ended = None if event is None else {"kind": event.kind, "at": event.at, "reason": event.message}
    nodes = list(dict.fromkeys(a.node for a in rows))
    return {"attempt": latest, "nodes": nodes, "gpus": [a.gpu for a in rows], "local_gpus": [a.local_gpu for a in rows],
            "share": rows[0].share, "placed_at": placed_at, "released_at": released_at,
            "where": allocation_text(rows), "ended_by": ended}

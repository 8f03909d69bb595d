"""The one encoding shared by the RL environment and the RL policy: observation, action mask, action -> decisions.

Decisions are made inside Tiresias' frame: pending jobs are visited in two-dimensional least-attained-service order
(queue by attained GPU-seconds, then arrival), and a job that fits nowhere may preempt running jobs of strictly
lower-priority queues, chosen by Tiresias' rule. For each job that can start (with or without preemption) the agent
picks one of up to `MAX_CANDIDATES` candidate placements (the generators of `policies.placement.Planner.candidates`:
best fit, worst fit, least-loaded NICs for gangs; packed, alone, or beside each of the least-loaded tenants for GPU
shares) or waits (the job is passed over until something changes; a preemption it would have needed does not
happen). Jobs that cannot start at all are passed over without asking. The order is LAS because on the Philly and
Alibaba traces queue order decides average JCT far more than placement does (Tiresias beats every arrival-order
policy 2-3x under load); the agent's levers are where each job goes, whether it waits, and whether to preempt.

Observation (`OBS_SIZE` floats, independent of the cluster's size):
* per candidate slot (`CANDIDATE_FEATURES`): valid, log of its own predicted slowdown, slowdown it adds to the jobs it
  joins (per GPU of the job), nodes beyond the fewest possible, busiest NIC load among its nodes, whether it breaks
  into a wholly free node, the GPU share it strands, tenants already on its GPUs;
* the job (`JOB_FEATURES`): gang size, GPU share, inference or not, gradient volume, time waited, attained service,
  LAS queue, GPUs it would preempt (per GPU it asks for) and the service those victims have attained;
* the cluster and queue (`CLUSTER_FEATURES`): free whole GPUs, free capacity, wholly free nodes, queue length, GPUs
  the queue asks for, GPUs shared through MPS.

Bump `ENCODING_VERSION` whenever any of this changes: trained agents record it and refuse to load across versions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from policies.base import Decision, Place, Preempt
from policies.placement import Planner
from policies.tiresias import DEFAULT_THRESHOLDS, las_level, pick_victims
from scheduler.model import Job, JobKind, Placement
from scheduler.state import EPS, ClusterView

ENCODING_VERSION = 2
MAX_CANDIDATES = 6
WAIT = MAX_CANDIDATES  # the last action
N_ACTIONS = MAX_CANDIDATES + 1
CANDIDATE_FEATURES = 8
JOB_FEATURES = 9
CLUSTER_FEATURES = 6
OBS_SIZE = MAX_CANDIDATES * CANDIDATE_FEATURES + JOB_FEATURES + CLUSTER_FEATURES
OBS_LOW, OBS_HIGH = 0.0, 8.0  # every feature is clipped into this range
THRESHOLDS = DEFAULT_THRESHOLDS


@dataclass(frozen=True)
class DecisionPoint:
    job: Job
    candidates: list[Placement]
    obs: np.ndarray  # float32 [OBS_SIZE]
    mask: np.ndarray  # bool [N_ACTIONS]
    level: int = 0  # the job's LAS queue
    victims: tuple[int, ...] = ()  # running jobs to preempt before any candidate can start

    def placement(self, action: int) -> Placement | None:
        """The placement an action stands for; None for wait. Invalid actions are the caller's to refuse."""
        if action == WAIT:
            return None
        return self.candidates[action]

    def decisions(self, action: int, reason: str) -> list[Decision]:
        """What taking `action` means for the simulator or the controller (empty for wait)."""
        placement = self.placement(action)
        if placement is None:
            return []
        why = f"preempted for {self.job.spec.name} (queue {self.level})"
        return [*(Preempt(v, why) for v in self.victims), Place(self.job.id, placement, reason)]


def queue_summary(view: ClusterView, queue: Collection[Job]) -> tuple[int, float]:
    """(jobs queued, GPUs they ask for): computed once per instant, shared by every decision in it."""
    return len(queue), float(sum(j.spec.gpu_demand for j in queue))


def las_order(queue: Collection[Job], thresholds: Sequence[float] = THRESHOLDS) -> Iterator[tuple[int, Job]]:
    """(queue level, job) in 2D-LAS order. A pending job's attained service is frozen, so bucketing the arrival-
    ordered queue by level gives (level, arrival) order without a sort."""
    buckets: list[list[Job]] = [[] for _ in range(len(thresholds) + 1)]
    for job in queue:
        buckets[las_level(job.attained_gpu_s, thresholds)].append(job)
    for level, jobs in enumerate(buckets):
        for job in jobs:
            yield level, job


def cluster_features(view: ClusterView, queued: tuple[int, float]) -> np.ndarray:
    c = view.cluster
    free = np.asarray(view.free_share)
    shared = float(np.count_nonzero((free > EPS) & (free < 1.0 - EPS))) / c.num_gpus
    whole_nodes = float(np.count_nonzero(np.asarray(view.node_free) == c.node_num_gpus)) / c.num_nodes
    return np.array([
        view.free_whole / c.num_gpus,
        view.free_capacity / c.num_gpus,
        whole_nodes,
        math.log1p(queued[0]) / 4.0,
        queued[1] / c.num_gpus,
        shared,
    ], dtype=np.float32)


def job_features(view: ClusterView, job: Job, now: float, level: int, victims: Sequence[Job]) -> np.ndarray:
    spec = job.spec
    prof = view.profile(spec)
    victim_gpus = sum(v.spec.gpu_demand for v in victims)
    victim_service = sum(view.attained_gpu_s(v) for v in victims)
    return np.array([
        math.log2(spec.workers) / 4.0,
        spec.share,
        1.0 if spec.kind is JobKind.INFERENCE else 0.0,
        math.log10(1.0 + prof.grad_mb * spec.compression) / 2.0,
        math.log1p(max(0.0, now - job.queued_since) / 60.0) / 4.0,
        math.log1p(view.attained_gpu_s(job) / 3600.0) / 4.0,
        level / 2.0,
        victim_gpus / spec.gpu_demand,
        math.log1p(victim_service / 3600.0) / 4.0,
    ], dtype=np.float32)


def candidate_features(view: ClusterView, job: Job, placement: Placement, partial_fit: bool) -> np.ndarray:
    """`partial_fit`: some partly used node could hold the whole gang (so breaking into a free node is a choice)."""
    spec = job.spec
    c = view.cluster
    pred = view.predict(spec, placement)
    added = sum(after - pred.others_before[j] for j, after in pred.others_after.items())
    nodes = placement.nodes(c)
    fewest = -(-spec.workers // c.max_gpus_per_node)
    nic_load = float(np.max(np.asarray(view.link_load)[c.node_nic[nodes]]))
    breaks_node = partial_fit and any(view.node_free[n] == c.node_num_gpus[n] for n in nodes)
    first = placement.gpus[0]
    stranded = (1.0 - spec.share) if spec.num_gpus < 1 and view.free_share[first] >= 1.0 - EPS else 0.0
    tenants = sum(len(view.tenants(g)) for g in placement.gpus) / len(placement.gpus)
    return np.array([
        1.0,
        math.log(max(pred.slowdown, 1e-3)) + 1.0,
        added / spec.gpu_demand,
        (len(nodes) - fewest) / 4.0,
        nic_load,
        1.0 if breaks_node else 0.0,
        stranded,
        tenants / 4.0,
    ], dtype=np.float32)


def encode(
    view: ClusterView, planner: Planner, job: Job, now: float, queued: tuple[int, float], wait_allowed: bool = True,
    level: int = 0, victims: Sequence[Job] = (),
) -> DecisionPoint | None:
    """The decision for `job` against the planner's free capacity, or None if it has no candidate placement.

    With `victims`, the planner already counts their GPUs as free (their predicted contention is still counted: the
    view does not know they are leaving, which errs on the side of caution).
    """
    cands = planner.candidates(job.spec)[:MAX_CANDIDATES] if planner.may_fit(job.spec) else []
    if not cands:
        return None
    c = view.cluster
    node_free = planner.node_free
    partial_fit = job.spec.num_gpus >= 1 and bool(
        np.any((node_free >= job.spec.workers) & (node_free < c.node_num_gpus)))
    obs = np.zeros(OBS_SIZE, dtype=np.float32)
    for i, p in enumerate(cands):
        obs[i * CANDIDATE_FEATURES:(i + 1) * CANDIDATE_FEATURES] = candidate_features(view, job, p, partial_fit)
    base = MAX_CANDIDATES * CANDIDATE_FEATURES
    obs[base:base + JOB_FEATURES] = job_features(view, job, now, level, victims)
    obs[base + JOB_FEATURES:] = cluster_features(view, queued)
    np.clip(obs, OBS_LOW, OBS_HIGH, out=obs)
    mask = np.zeros(N_ACTIONS, dtype=bool)
    mask[: len(cands)] = True
    mask[WAIT] = wait_allowed
    return DecisionPoint(job, cands, obs, mask, level, tuple(v.id for v in victims))


def decision_points(
    view: ClusterView, queue: Collection[Job], now: float, passed: set[int], preempt: bool = True
) -> Iterator[DecisionPoint]:
    """The pending jobs, in LAS order, that can start now (preempting if they must) and were not passed over at
    this instant.

    Points are encoded against the state when the generator started: after acting on one, start a new one. Waiting
    is not offered on an idle cluster: nothing would ever change.
    """
    queued = queue_summary(view, queue)
    planner = Planner(view)
    wait_allowed = bool(view.running)
    running: list[tuple[int, float, int]] | None = None  # (level, submit, id), lowest priority first
    no_victims_from: dict[int, float] = {}  # per level, the smallest demand preemption could not serve
    for level, job in las_order(queue):
        if job.id in passed:
            continue
        point = encode(view, planner, job, now, queued, wait_allowed, level)
        if point is None and preempt and view.running and job.spec.num_gpus < no_victims_from.get(level, math.inf):
            if running is None:
                running = sorted(((las_level(view.attained_gpu_s(r), THRESHOLDS), r.spec.submit_s, r.id)
                                  for r in view.running.values()), reverse=True)
            below = (view.running[i] for lv, _, i in itertools.takewhile(lambda e, lv=level: e[0] > lv, running))
            victims = pick_victims(view, planner, job.spec, below)
            if not victims:
                no_victims_from[level] = job.spec.num_gpus
                continue
            for v in victims:
                planner.give_back(v)
            point = encode(view, planner, job, now, queued, wait_allowed, level, victims)
            if point is None:  # fragmentation: preempting would not help
                for v in victims:
                    planner.take(v.spec, view.placement(v.id))
                continue
            yield point
            for v in victims:  # passed over: the victims keep running
                planner.take(v.spec, view.placement(v.id))
            continue
        if point is not None:
            yield point


def next_demotion(view: ClusterView, now: float, thresholds: Sequence[float] = THRESHOLDS) -> float | None:
    """When the next running job crosses into a lower-priority queue (and may become a victim): a wake-up time."""
    best = math.inf
    for r in view.running.values():
        attained = view.attained_gpu_s(r)
        level = las_level(attained, thresholds)
        if level < len(thresholds):
            best = min(best, now + (thresholds[level] - attained) / r.spec.gpu_demand)
    # At least a second ahead: a job a rounding error short of its threshold would otherwise ask for wake-ups a
    # microsecond apart, forever.
    return max(best, now + 1.0) if best < math.inf else None

"""The one encoding shared by the RL environment and the RL policy: observation, action mask, action -> placement.

A decision is made for one pending job at a time, in arrival order: place it on one of up to `MAX_CANDIDATES`
candidate placements (the generators of `policies.placement.Planner.candidates`: best fit, worst fit, least-loaded
NICs for gangs; packed, alone, or beside each of the least-loaded tenants for GPU shares), or wait (the job is passed
over until something changes). Jobs that cannot be placed anywhere are passed over without asking.

Observation (`OBS_SIZE` floats, independent of the cluster's size):
* per candidate slot (`CANDIDATE_FEATURES`): valid, log of its own predicted slowdown, slowdown it adds to the jobs it
  joins (per GPU of the job), nodes beyond the fewest possible, busiest NIC load among its nodes, whether it breaks
  into a wholly free node, the GPU share it strands, tenants already on its GPUs;
* the job (`JOB_FEATURES`): gang size, GPU share, inference or not, gradient volume, time waited, attained service;
* the cluster and queue (`CLUSTER_FEATURES`): free whole GPUs, free capacity, wholly free nodes, queue length, GPUs
  the queue asks for, GPUs shared through MPS.

Bump `ENCODING_VERSION` whenever any of this changes: trained agents record it and refuse to load across versions.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass

import numpy as np

from policies.placement import Planner
from scheduler.model import Job, JobKind, Placement
from scheduler.state import EPS, ClusterView

ENCODING_VERSION = 1
MAX_CANDIDATES = 6
WAIT = MAX_CANDIDATES  # the last action
N_ACTIONS = MAX_CANDIDATES + 1
CANDIDATE_FEATURES = 8
JOB_FEATURES = 6
CLUSTER_FEATURES = 6
OBS_SIZE = MAX_CANDIDATES * CANDIDATE_FEATURES + JOB_FEATURES + CLUSTER_FEATURES
OBS_LOW, OBS_HIGH = 0.0, 8.0  # every feature is clipped into this range


@dataclass(frozen=True)
class DecisionPoint:
    job: Job
    candidates: list[Placement]
    obs: np.ndarray  # float32 [OBS_SIZE]
    mask: np.ndarray  # bool [N_ACTIONS]

    def placement(self, action: int) -> Placement | None:
        """The placement an action stands for; None for wait. Invalid actions are the caller's to refuse."""
        if action == WAIT:
            return None
        return self.candidates[action]


def queue_summary(view: ClusterView, queue: Collection[Job]) -> tuple[int, float]:
    """(jobs queued, GPUs they ask for): computed once per instant, shared by every decision in it."""
    return len(queue), float(sum(j.spec.gpu_demand for j in queue))


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


def job_features(view: ClusterView, job: Job, now: float) -> np.ndarray:
    spec = job.spec
    prof = view.profile(spec)
    return np.array([
        math.log2(spec.workers) / 4.0,
        spec.share,
        1.0 if spec.kind is JobKind.INFERENCE else 0.0,
        math.log10(1.0 + prof.grad_mb * spec.compression) / 2.0,
        math.log1p(max(0.0, now - job.queued_since) / 60.0) / 4.0,
        math.log1p(view.attained_gpu_s(job) / 3600.0) / 4.0,
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
    view: ClusterView, planner: Planner, job: Job, now: float, queued: tuple[int, float], wait_allowed: bool = True
) -> DecisionPoint | None:
    """The decision for `job`, or None if it has no candidate placement right now."""
    cands = planner.candidates(job.spec)[:MAX_CANDIDATES] if planner.may_fit(job.spec) else []
    if not cands:
        return None
    c = view.cluster
    node_free = np.asarray(view.node_free)
    partial_fit = job.spec.num_gpus >= 1 and bool(
        np.any((node_free >= job.spec.workers) & (node_free < c.node_num_gpus)))
    obs = np.zeros(OBS_SIZE, dtype=np.float32)
    for i, p in enumerate(cands):
        obs[i * CANDIDATE_FEATURES:(i + 1) * CANDIDATE_FEATURES] = candidate_features(view, job, p, partial_fit)
    base = MAX_CANDIDATES * CANDIDATE_FEATURES
    obs[base:base + JOB_FEATURES] = job_features(view, job, now)
    obs[base + JOB_FEATURES:] = cluster_features(view, queued)
    np.clip(obs, OBS_LOW, OBS_HIGH, out=obs)
    mask = np.zeros(N_ACTIONS, dtype=bool)
    mask[: len(cands)] = True
    mask[WAIT] = wait_allowed
    return DecisionPoint(job, cands, obs, mask)


def decision_points(
    view: ClusterView, queue: Collection[Job], now: float, passed: set[int]
) -> Iterator[DecisionPoint]:
    """The pending jobs, in arrival order, that can be placed now and were not passed over at this instant.

    Points are encoded against the state when the generator started: after placing a job, start a new one. Waiting
    is not offered on an idle cluster: nothing would ever change.
    """
    queued = queue_summary(view, queue)
    planner = Planner(view)
    wait_allowed = bool(view.running)
    for job in queue:
        if job.id in passed:
            continue
        point = encode(view, planner, job, now, queued, wait_allowed)
        if point is not None:
            yield point

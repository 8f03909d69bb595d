"""DeepShare's RL formulation (ICPADS'23), reproduced as a baseline for Corral's own agent: `deepshare:NAME`.

DeepShare sees the cluster as a fixed grid of GPUs and places each job on a pair of nodes; it is trained with plain
PPO (no action masks), so invalid actions must be learnt away through a penalty. This module holds the encoding
(shared by `agents.deepshare_env.DeepShareEnv` and `DeepSharePolicy`, so a trained agent acts identically in both)
and the `deepshare:` loader.

Decisions: pending jobs are visited in arrival order; each one that fits somewhere now (`Planner.may_fit` and a best
fit exists) gets one decision. A job told to wait, or given an action that does not fit, is passed over until the
clock moves or capacity frees up (`PassedOver`). On an idle cluster waiting would never end, so there a wait or an
invalid action falls back to the Planner's best fit (Corral's agent has wait masked there for the same reason).

Actions: `Discrete(N_ACTIONS)` = `N_PAIRS` (136) node pairs (i, j), i <= j < `MAX_NODES`, then `WAIT`.
* whole-GPU gang of w workers, i == j: all w on node i;
* i != j: split as evenly as the two nodes' free GPUs allow, the larger half on the node with fewer free GPUs (best
  fit: the emptier node keeps room for large gangs); one worker goes wholly onto that fuller node;
* inside each node the GPUs are picked by `Planner.gpus_in_node` (fewest PCIe switches, best fit);
* fractional job (num_gpus < 1): node j is ignored; the job goes on the GPU of node i (the lower-numbered of the pair)
  with the least free share that still holds it (packing, as `Planner.packed_share` does cluster-wide);
* a pair naming an absent node, or a node without enough free GPUs (or GPU memory), is invalid: the job waits.
Limitation of the formulation: a gang larger than the two largest nodes can hold cannot be expressed as a pair; such
jobs are placed by the Planner's best fit without asking the agent (and the agent never sees them decided).

Observation (`OBS_SIZE` = 661 floats, clipped into [`OBS_LOW`, `OBS_HIGH`]), zeros wherever a node or GPU is absent:
* the GPU grid [`MAX_NODES` x `MAX_GPUS_PER_NODE` x `GPU_FEATURES`], node-major, node n's GPUs in slots 0..k-1:
  present (1), free share, fraction of its memory in use, tenants / 4, mean predicted slowdown of its tenants - 1;
* per node (`MAX_NODES`): its NIC's load (sum of the duty cycles of the jobs crossing it);
* the job (`JOB_FEATURES`): log2 gang size / 4, share of each GPU, log10(1 + gradient MB sent) / 2,
  log1p(minutes waited) / 4, GPU memory it needs over the cluster's largest GPU's.
The grid is fixed, so clusters beyond `MAX_NODES` nodes or `MAX_GPUS_PER_NODE` GPUs per node are refused
(`SpecError`); Corral's own `rl:` encoding does not depend on the cluster's size.

Bump `DEEPSHARE_VERSION` whenever any of this changes: trained agents record it and refuse to load across versions.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from policies.placement import Planner
from policies.registry import register_prefix
from policies.trained import AgentFormat, load, safe_objects
from scheduler.core.constraints import eligible_gpus, eligible_nodes
from scheduler.core.decisions import Decision, Deliberation, Place
from scheduler.core.model import Cluster, Job, JobSpec, Placement, SpecError
from scheduler.core.runner import answered
from scheduler.core.state import EPS, ClusterView

DEEPSHARE_VERSION = 1
FORMULATION = "deepshare"
MAX_NODES = 16
MAX_GPUS_PER_NODE = 8
PAIRS: tuple[tuple[int, int], ...] = tuple((i, j) for i in range(MAX_NODES) for j in range(i, MAX_NODES))
N_PAIRS = len(PAIRS)  # 136
WAIT = N_PAIRS  # the last action
N_ACTIONS = N_PAIRS + 1
GPU_FEATURES = 5
JOB_FEATURES = 5
GRID_SHAPE = (MAX_NODES, MAX_GPUS_PER_NODE, GPU_FEATURES)
GRID_SIZE = MAX_NODES * MAX_GPUS_PER_NODE * GPU_FEATURES
OBS_SIZE = GRID_SIZE + MAX_NODES + JOB_FEATURES
OBS_LOW, OBS_HIGH = 0.0, 8.0

RETRAIN = "retrain it with `corral train --formulation deepshare --out PATH.zip`"

_PAIR_INDEX = {pair: k for k, pair in enumerate(PAIRS)}


class PassedOver:
    """Jobs a policy passed over (could not or chose not to place) at the current instant.

    Within one instant free capacity only shrinks as the policy places jobs, so a job passed over stays passed over;
    the set empties when the clock moves or capacity frees up. Policies that place one job per call use it so the
    caller's repeated calls do not rescan the queue.
    """

    def __init__(self) -> None:
        self._key: tuple[float, float] | None = None  # (now, free capacity) the set is valid for
        self.ids: set[int] = set()

    def refresh(self, view: ClusterView, now: float) -> set[int]:
        if self._key is None or self._key[0] != now or view.free_capacity > self._key[1] + 1e-9:
            self.ids = set()
        self._key = (now, view.free_capacity)
        return self.ids


# ---- the grid's limits ----------------------------------------------------------------------------------------------


def grid_problem(cluster: Cluster) -> str | None:
    """Why DeepShare's fixed grid cannot describe `cluster`, or None if it can."""
    if cluster.num_nodes > MAX_NODES:
        return f"{cluster.num_nodes} nodes, its grid holds at most {MAX_NODES}"
    if cluster.max_gpus_per_node > MAX_GPUS_PER_NODE:
        return f"{cluster.max_gpus_per_node} GPUs in a node, its grid holds at most {MAX_GPUS_PER_NODE}"
    return None


def check_cluster(cluster: Cluster) -> None:
    problem = grid_problem(cluster)
    if problem is not None:
        raise SpecError(
            f"cluster {cluster.name!r} has {problem}: DeepShare's formulation has a fixed per-GPU grid "
            f"({MAX_NODES} nodes x {MAX_GPUS_PER_NODE} GPUs) and cannot schedule it; use rl:default, whose encoding "
            "does not depend on the cluster's size"
        )


# ---- actions --------------------------------------------------------------------------------------------------------


def pair_action(i: int, j: int) -> int:
    """The action for the node pair {i, j} (order does not matter)."""
    return _PAIR_INDEX[(min(i, j), max(i, j))]


def node_pair(action: int) -> tuple[int, int] | None:
    """The node pair an action names; None for wait or an action out of range."""
    return PAIRS[action] if 0 <= action < N_PAIRS else None


def pair_capacity(cluster: Cluster) -> int:
    """The largest gang a node pair can hold: the two largest nodes' GPUs."""
    sizes = np.sort(cluster.node_num_gpus)[::-1]
    return int(sizes[:2].sum())


def split_workers(workers: int, free_i: int, free_j: int) -> tuple[int, int] | None:
    """Workers on (i, j): as even as the free GPUs allow, the larger half on the fuller node; None if they cannot."""
    if free_i + free_j < workers:
        return None
    target = -(-workers // 2) if free_i <= free_j else workers // 2
    on_i = min(max(target, workers - free_j), free_i)
    return on_i, workers - on_i


def _node_mem(cluster: Cluster, node: int) -> float:
    return float(cluster.gpu_mem[cluster.node_first_gpu[node]])  # a node holds GPUs of one type


def whole_gpus_on_pair(planner: Planner, spec: JobSpec, i: int, j: int) -> Placement | None:
    c = planner.cluster
    mem = planner.view.mem_need(spec)
    if i == j:
        counts = {i: spec.workers}
    else:
        split = split_workers(spec.workers, int(planner.node_free[i]), int(planner.node_free[j]))
        if split is None:
            return None
        counts = {i: split[0], j: split[1]}
    gpus: list[int] = []
    for node, k in counts.items():
        if k == 0:
            continue
        if planner.node_free[node] < k or _node_mem(c, node) < mem - EPS:
            return None
        if spec.constraints is not None and not eligible_nodes(c, spec.constraints)[node]:
            return None
        gpus.extend(planner.gpus_in_node(node, k))
    return Placement(tuple(gpus))


def share_on_node(planner: Planner, spec: JobSpec, node: int) -> Placement | None:
    """A fractional job on the GPU of `node` with the least free share that still holds it (packing)."""
    c = planner.cluster
    gpus = np.arange(int(c.node_first_gpu[node]), int(c.node_first_gpu[node] + c.node_num_gpus[node]))
    mem = planner.view.mem_need(spec)
    ok = (planner.free_share[gpus] >= spec.share - EPS) & (c.gpu_mem[gpus] - planner.used_mem[gpus] >= mem - EPS)
    ok &= planner.share_ok(spec)[gpus]  # what CUDA MPS allows there (its memory cap, the one-user rule)
    if spec.constraints is not None:
        ok &= eligible_gpus(c, spec.constraints)[gpus]
    fits = gpus[ok]
    if not fits.size:
        return None
    return Placement((int(fits[np.argmin(planner.free_share[fits])]),), spec.share)


def action_placement(planner: Planner, spec: JobSpec, action: int) -> Placement | None:
    """What an action means for `spec` against the planner's free capacity; None for wait or if it does not fit."""
    pair = node_pair(action)
    if pair is None or pair[1] >= planner.cluster.num_nodes:
        return None
    i, j = pair
    if spec.num_gpus < 1:
        return share_on_node(planner, spec, i)
    return whole_gpus_on_pair(planner, spec, i, j)


# ---- observation ----------------------------------------------------------------------------------------------------


def gpu_grid(view: ClusterView) -> np.ndarray:
    """The per-GPU grid [MAX_NODES, MAX_GPUS_PER_NODE, GPU_FEATURES]; zeros for absent nodes and GPUs."""
    c = view.cluster
    tenants = np.zeros(c.num_gpus)
    slow_sum = np.zeros(c.num_gpus)
    for job_id in view.running:
        slow = view.slowdown(job_id)
        for g in view.placement(job_id).gpus:
            tenants[g] += 1
            slow_sum[g] += slow
    mean_slow = np.divide(slow_sum, tenants, out=np.ones(c.num_gpus), where=tenants > 0)
    node = c.gpu_node
    slot = np.arange(c.num_gpus) - c.node_first_gpu[node]
    grid = np.zeros(GRID_SHAPE, dtype=np.float32)
    grid[node, slot, 0] = 1.0
    grid[node, slot, 1] = view.free_share
    grid[node, slot, 2] = np.asarray(view.used_mem) / c.gpu_mem
    grid[node, slot, 3] = tenants / 4.0
    grid[node, slot, 4] = mean_slow - 1.0
    return grid


def nic_loads(view: ClusterView) -> np.ndarray:
    c = view.cluster
    out = np.zeros(MAX_NODES, dtype=np.float32)
    out[: c.num_nodes] = np.asarray(view.link_load)[c.node_nic]
    return out


def job_features(view: ClusterView, job: Job, now: float) -> np.ndarray:
    spec = job.spec
    prof = view.profile(spec)
    return np.array([
        math.log2(spec.workers) / 4.0,
        spec.share,
        math.log10(1.0 + prof.grad_mb * spec.compression) / 2.0,
        math.log1p(max(0.0, now - job.queued_since) / 60.0) / 4.0,
        view.mem_need(spec) / float(view.cluster.gpu_mem.max()),
    ], dtype=np.float32)


def cluster_features(view: ClusterView) -> np.ndarray:
    """The job-independent part of the observation (grid then NIC loads), computed once per state."""
    return np.concatenate([gpu_grid(view).ravel(), nic_loads(view)])


def encode(view: ClusterView, job: Job, now: float, cluster_part: np.ndarray | None = None) -> np.ndarray:
    """The observation for deciding `job` (float32 [OBS_SIZE]); pass `cluster_part` to reuse it across jobs."""
    if cluster_part is None:
        cluster_part = cluster_features(view)
    obs = np.concatenate([cluster_part, job_features(view, job, now)])
    np.clip(obs, OBS_LOW, OBS_HIGH, out=obs)
    return obs


# ---- decisions ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeepSharePoint:
    """One job to decide. `obs` is None when the job is placed without asking (a gang too large for a pair)."""

    job: Job
    planner: Planner  # the free capacity the point was encoded against
    fallback: Placement  # the Planner's best fit
    obs: np.ndarray | None

    def outcome(self, action: int, idle: bool) -> tuple[Placement | None, bool]:
        """(placement to take or None to wait, whether `action` was invalid). On an idle cluster a wait or an invalid
        action takes the best fit instead: nothing would ever change while the job waited."""
        placement = action_placement(self.planner, self.job.spec, action)
        invalid = placement is None and action != WAIT
        if placement is None and idle:
            placement = self.fallback
        return placement, invalid


def decision_points(
    view: ClusterView, queue: Collection[Job], now: float, passed: Collection[int]
) -> Iterator[DeepSharePoint]:
    """The pending jobs, in arrival order, that fit somewhere now and were not passed over at this instant.

    Points are encoded against the state when the generator started: after acting on one, start a new one.
    """
    check_cluster(view.cluster)
    planner = Planner(view)
    largest = pair_capacity(view.cluster)
    cluster_part: np.ndarray | None = None  # the state does not change while the caller only passes jobs over
    for job in queue:
        if job.id in passed or not planner.may_fit(job.spec):
            continue
        best = planner.best_fit(job.spec)
        if best is None:
            continue
        if job.spec.workers > largest:
            yield DeepSharePoint(job, planner, best, None)
            continue
        if cluster_part is None:
            cluster_part = cluster_features(view)
        yield DeepSharePoint(job, planner, best, encode(view, job, now, cluster_part))


# ---- the policy and its loader --------------------------------------------------------------------------------------


class DeepSharePolicy:
    """Visits pending jobs in arrival order; a PPO agent picks each one's node pair, or wait."""

    name: ClassVar[str] = FORMULATION
    oracle: ClassVar[bool] = False

    def __init__(self, model: Any, label: str) -> None:
        self.model = model
        self.label = label
        self._passed = PassedOver()

    def act(self, obs: np.ndarray) -> int:
        action, _ = self.model.predict(obs, deterministic=True)
        return int(action)

    def answer(self, point: DeepSharePoint) -> int:
        """The agent's action for this job (in training, the environment answers in its place)."""
        assert point.obs is not None
        return self.act(point.obs)

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        return answered(self.deliberate(view, queue, now), self.answer)

    def deliberate(self, view: ClusterView, queue: Collection[Job], now: float) -> Deliberation:
        """Yields each job's decision point in turn and takes the agent's action back (`scheduler.core.runner`), until
        one starts. A job told to wait is passed over until the clock moves (or capacity frees up)."""
        passed = self._passed.refresh(view, now)
        idle = not view.running
        for point in decision_points(view, queue, now, passed):
            job = point.job
            if point.obs is None:
                return [Place(job.id, point.fallback, f"deepshare:{self.label}: best fit (gang beyond a node pair)")]
            action = yield point
            placement, invalid = point.outcome(action, idle)
            if placement is not None:
                why = "best fit on an idle cluster" if invalid or action == WAIT else f"node pair {PAIRS[action]}"
                return [Place(job.id, placement, f"deepshare:{self.label}: {why}")]
            passed.add(job.id)
        return []


FORMAT = AgentFormat(FORMULATION, DEEPSHARE_VERSION, OBS_SIZE, N_ACTIONS, RETRAIN, version_label="DeepShare ")


def load_deepshare_agent(arg: str) -> tuple[Any, dict[str, Any]]:
    """The PPO model and its metadata, or AgentLoadError saying what is wrong and how to fix it."""

    def load_model(path: Path) -> Any:
        from stable_baselines3 import PPO
        from stable_baselines3.common.buffers import RolloutBuffer
        from stable_baselines3.common.policies import ActorCriticPolicy

        return PPO.load(path, device="cpu", custom_objects=safe_objects(FORMAT, ActorCriticPolicy, RolloutBuffer))

    return load(FORMAT, arg, load_model)


def make_deepshare_policy(arg: str, seed: int = 0) -> DeepSharePolicy:
    model, _ = load_deepshare_agent(arg)
    policy = DeepSharePolicy(model, arg)
    policy.name = f"deepshare:{arg}"  # type: ignore[misc]  # instances report the name they were asked for
    return policy


register_prefix(FORMULATION, make_deepshare_policy)

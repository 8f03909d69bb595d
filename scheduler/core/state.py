"""Who holds which GPU share, and the read-only view of it that policies decide from.

`ClusterState` is the single bookkeeping of allocations used by the simulator and the live controller. It enforces the
invariants every placement must keep: a gang gets all its GPUs at once, shares on a GPU sum to at most 1, the
tenants' memory fits the GPU, and a share of a GPU is one CUDA MPS can run (`scheduler.core.colocation`: its memory
cap holds the model; with `mps_one_user`, its node's MPS daemon serves no other user's shares). `ClusterView` is
what a policy sees: the same arrays, read-only, plus the contention model's predictions.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import islice
from types import MappingProxyType

import numpy as np

from scheduler.core.colocation import MpsUsers, cap_words, holds, share_mask
from scheduler.core.constraints import eligible_gpus
from scheduler.core.contention import ContentionModel, Prediction
from scheduler.core.elastic import RESIZE_INTERVAL_S, resize_pause_s, speedup
from scheduler.core.model import Cluster, Job, JobSpec, Placement
from scheduler.core.standing import TenancyStanding
from scheduler.core.workloads import ModelProfile

EPS = 1e-9


class PlacementError(ValueError):
    """A decision that would break an invariant (a policy bug, or a stale decision in the live controller)."""


def _readonly(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


MOVES_KEPT = 65_536  # the latest allocations and releases `ClusterView.moved_since` can report


class ClusterState:
    def __init__(self, cluster: Cluster, profiles: Mapping[str, ModelProfile], *, mps_one_user: bool = False) -> None:
        """`mps_one_user`: the shares of one node go to one user's jobs at a time (one MPS daemon per node serves one
        OS user at a time: on when jobs run as per-user accounts; `scheduler.core.colocation`)."""
        self.cluster = cluster
        self.profiles = profiles
        self.mps = MpsUsers(cluster.num_nodes, mps_one_user)  # whose shares each node holds
        self.free_share = np.ones(cluster.num_gpus)  # 1.0: the GPU is wholly free
        self.used_mem = np.zeros(cluster.num_gpus)  # GB held by tenants
        self.node_free = cluster.node_num_gpus.astype(np.int64)  # wholly free GPUs per node
        self.free_whole = cluster.num_gpus
        self.allocated_share = 0.0  # sum over GPUs of (1 - free_share)
        self.tenants: dict[int, list[int]] = {}
        self.placements: dict[int, Placement] = {}
        self._mem: dict[int, float] = {}
        self._user: dict[int, str] = {}  # fractional job -> its user (the MPS rule's)
        self.closed: dict[int, str] = {}  # GPU -> why no new job may start on it (`set_closed`)
        self._hidden: dict[int, float] = {}  # a closed GPU's true free share
        # Releases and reopenings so far: while it stands still, free capacity has only shrunk (per GPU: share,
        # memory, the MPS users' room), so a job that fitted nowhere still fits nowhere (`ClusterView.frees`).
        self.frees = 0
        # Allocations and releases so far, and the latest ones' job ids (`ClusterView.moved_since`): what a policy
        # keeps of the running jobs' placements is patched from them, not read again from each of thousands.
        self.moves = 0
        self._moved: deque[int] = deque(maxlen=MOVES_KEPT)
        # Every change to free capacity (allocations, releases, closings, reopenings): while it stands still a search
        # of the free GPUs finds what it found before (`ClusterView.changes`).
        self.changes = 0

    def mem_need(self, spec: JobSpec) -> float:
        return self.profiles[spec.model].mem_gb

    def share_mask(self, spec: JobSpec, leaving: Sequence[int] = ()) -> np.ndarray:
        """Per GPU, whether CUDA MPS can run `spec`'s share there (`colocation.share_mask`), once the running jobs
        `leaving` have left."""
        gone = [(int(self.cluster.gpu_node[self.placements[j].gpus[0]]), self._user[j]) for j in leaving
                if j in self._user]
        return share_mask(self.cluster.gpu_mem, self.cluster.gpu_node, self.mem_need(spec), spec.share, spec.user,
                          self.mps, gone)

    def check(self, spec: JobSpec, placement: Placement, *, adopt: bool = False) -> str | None:
        """Why `placement` is invalid for `spec` right now, or None if it is valid. `adopt`: a run that exists already
        (the controller's recovery, a simulation's initial runs) is taken as it is by the MPS rules, which decide
        new placements only: it may predate them or a change of job accounts."""
        gpus = placement.gpus
        if len(gpus) != spec.workers:
            return f"gang of {spec.workers} needs {spec.workers} GPUs, got {len(gpus)}"
        if len(set(gpus)) != len(gpus):
            return "a GPU appears twice"
        if abs(placement.share - spec.share) > EPS:
            return f"share {placement.share} differs from the job's {spec.share}"
        # (A run that exists already is taken where it is: its node's labels may have changed since it started.)
        off = None if adopt else self._off_limits(spec, gpus)
        if off is not None:
            return off
        mem = self.mem_need(spec)
        for g in gpus:
            if not 0 <= g < self.cluster.num_gpus:
                return f"GPU {g} does not exist"
            if self.free_share[g] < placement.share - EPS:
                return f"GPU {g} has {self.free_share[g]:.3f} free, needs {placement.share:.3f}"
            if self.used_mem[g] + mem > self.cluster.gpu_mem[g] + EPS:
                return f"GPU {g} has {self.cluster.gpu_mem[g] - self.used_mem[g]:.1f} GB free, needs {mem:.1f} GB"
        if placement.share < 1.0 and not adopt:
            g = gpus[0]
            if not holds(mem, placement.share, float(self.cluster.gpu_mem[g])):
                return f"GPU {g}: {cap_words(placement.share, float(self.cluster.gpu_mem[g]))}, needs {mem:g} GB"
            closed = self.mps.closed_to(spec.user)
            if closed is not None and closed[self.cluster.gpu_node[g]]:
                return f"GPU {g}: its node's MPS daemon serves another user's shares"
        return None

    def _off_limits(self, spec: JobSpec, gpus: Sequence[int]) -> str | None:
        """Why `gpus` are not all on nodes `spec`'s constraints allow (`scheduler.core.constraints`), or None."""
        if spec.constraints is None:
            return None
        allowed = eligible_gpus(self.cluster, spec.constraints)
        for g in gpus:
            if 0 <= g < self.cluster.num_gpus and not allowed[g]:
                node = self.cluster.node_names[int(self.cluster.gpu_node[g])]
                return f"GPU {g} is on {node}, which its constraints ({spec.constraints.words()}) rule out"
        return None

    def allocate(self, job_id: int, spec: JobSpec, placement: Placement, *, adopt: bool = False) -> None:
        problem = self.check(spec, placement, adopt=adopt)
        if problem is not None:
            raise PlacementError(f"job {spec.name}: {problem}")
        mem = self.mem_need(spec)
        if placement.share < 1.0:
            self._user[job_id] = spec.user
            for g in placement.gpus:
                self.mps.add(int(self.cluster.gpu_node[g]), spec.user)
        for g in placement.gpus:
            if self.free_share[g] >= 1.0 - EPS:
                node = self.cluster.gpu_node[g]
                self.node_free[node] -= 1
                self.free_whole -= 1
            self.free_share[g] -= placement.share
            self.used_mem[g] += mem
            self.tenants.setdefault(g, []).append(job_id)
        self.allocated_share += placement.share * len(placement.gpus)
        self.placements[job_id] = placement
        self._mem[job_id] = mem
        self.moves += 1
        self.changes += 1
        self._moved.append(job_id)

    def resize_check(self, job_id: int, spec: JobSpec, placement: Placement) -> str | None:
        """Why running job `job_id` (whole GPUs) cannot move to `placement` at `spec`'s size, or None if it can: each
        GPU there is one it holds or one wholly free, and open (a resize starts a run, so a draining GPU takes none).
        Checked before anything is released: a refused resize leaves the job where it is."""
        gpus = placement.gpus
        if len(gpus) != spec.workers or len(set(gpus)) != len(gpus) or placement.share != 1.0:
            return f"a resize to {spec.workers} GPUs needs {spec.workers} distinct whole GPUs, got {list(gpus)}"
        off = self._off_limits(spec, gpus)
        if off is not None:
            return off
        held = set(self.placements[job_id].gpus)
        mem = self.mem_need(spec)
        for g in gpus:
            if not 0 <= g < self.cluster.num_gpus:
                return f"GPU {g} does not exist"
            if g in self.closed:
                return f"GPU {g} is closed: {self.closed[g]}"
            if g not in held and self.free_share[g] < 1.0 - EPS:
                return f"GPU {g} is not free"
            if mem > self.cluster.gpu_mem[g] + EPS:
                return f"GPU {g} has {self.cluster.gpu_mem[g]:.1f} GB, needs {mem:.1f} GB"
        return None

    def release(self, job_id: int) -> Placement:
        placement = self.placements.pop(job_id)
        self.frees += 1
        self.moves += 1
        self.changes += 1
        self._moved.append(job_id)
        mem = self._mem.pop(job_id)
        user = self._user.pop(job_id, None)
        if user is not None:
            for g in placement.gpus:
                self.mps.remove(int(self.cluster.gpu_node[g]), user)
        for g in placement.gpus:
            closed = g in self.closed
            if closed:  # account the release on its true free share, then close the GPU again
                self._show(g)
            tenants = self.tenants[g]
            tenants.remove(job_id)
            if tenants:
                self.free_share[g] += placement.share
                self.used_mem[g] -= mem
            else:  # exact reset: no float drift on idle GPUs
                del self.tenants[g]
                self.free_share[g] = 1.0
                self.used_mem[g] = 0.0
            if self.free_share[g] >= 1.0 - EPS:
                self.node_free[self.cluster.gpu_node[g]] += 1
                self.free_whole += 1
            if closed:
                self._hide(g)
        self.allocated_share -= placement.share * len(placement.gpus)
        return placement

    def set_closed(self, closed: Mapping[int, str]) -> None:
        """Close exactly these GPUs to new placements (GPU -> why: `scheduler.core.outages.closed_gpus`), reopening
        the others. A closed GPU looks full to every policy (no free share, not wholly free) while its tenants, if
        any, keep it as they are; the capacity they leave when they end stays closed until the GPU reopens."""
        for g in [g for g in self.closed if g not in closed]:
            self._show(g)
            del self.closed[g]
        for g, why in closed.items():
            if g not in self.closed:
                self._hide(g)
            self.closed[g] = why

    def _hide(self, g: int) -> None:
        free = float(self.free_share[g])
        if free >= 1.0 - EPS:
            self.node_free[self.cluster.gpu_node[g]] -= 1
            self.free_whole -= 1
        self._hidden[g] = free
        self.changes += 1
        self.free_share[g] = 0.0
        self.allocated_share += free

    def _show(self, g: int) -> None:
        free = self._hidden.pop(g)
        self.frees += 1
        self.changes += 1
        self.free_share[g] = free
        self.allocated_share -= free
        if free >= 1.0 - EPS:
            self.node_free[self.cluster.gpu_node[g]] += 1
            self.free_whole += 1


class ClusterView:
    """What a policy may read: allocations, running jobs and contention predictions. A policy never changes it.

    Three attributes are set from outside, by the code that owns the view, never by a policy: `resize_interval_s`
    (the cluster's resize rule), `now` (the runner, each instant) and `tenancy` (the tenancy frame, for exactly the
    length of its call to the policy it wraps, restored afterwards even if that policy raises). The frame sets it on
    this view rather than handing over a copy because policies index what they have seen per view (Tiresias' attained
    service, the RL encoding's caches): a new view at every call would rebuild those each time."""

    _max_free_share: tuple[int, float] | None = None  # (`changes` then, `max_free_share`)

    def __init__(self, state: ClusterState, contention: ContentionModel, running: Mapping[int, Job],
                 lowest_preemptible: Callable[[], float] | None = None, elastic: Mapping[int, Job] | None = None
                 ) -> None:
        """`lowest_preemptible`: the book's index of the running jobs' priorities (`Book.lowest_preemptible`), kept as
        runs start and stop; None: `lowest_preemptible` looks at every running job (a view over a plain map).
        `elastic`: the book's map of the running elastic jobs; None: the running jobs' elastic ones, read each time."""
        self.cluster = state.cluster
        self._elastic = elastic
        self._lowest = lowest_preemptible
        self._state = state
        self._contention = contention
        self.running: Mapping[int, Job] = MappingProxyType(running)
        self.free_share = _readonly(state.free_share)
        self.used_mem = _readonly(state.used_mem)
        self.node_free = _readonly(state.node_free)
        self.now = 0.0
        # How many times a running job's spec changed in place (`Book.respec`: the API changed its priority or time
        # limit): what a policy keeps about the running jobs between calls (the RL encoding's running index) is
        # read again when it moves.
        self.respecs = 0
        # Set by the tenancy frame while it asks the policy it wraps (`scheduler.core.standing`); None without teams.
        self.tenancy: TenancyStanding | None = None
        # The least time between two resizes of a job (`scheduler.core.resizing`, rule 3): the cluster's setting, set
        # by the view's owner (the simulator's `resize_interval_s`, `corral serve --resize-interval`).
        self.resize_interval_s = RESIZE_INTERVAL_S

    @property
    def free_whole(self) -> int:
        return self._state.free_whole

    @property
    def elastic(self) -> Mapping[int, Job]:
        """The running elastic jobs (`JobSpec.elastic`, as submitted), which a policy may resize."""
        if self._elastic is not None:
            return MappingProxyType(self._elastic)
        return {j: job for j, job in self.running.items() if (job.submitted or job.spec).elastic}

    @property
    def growable(self) -> bool:
        """Whether a running elastic job could take a GPU now (one runs, and a whole GPU is free): the policy is asked
        at an instant with an empty queue only then (`scheduler.core.runner`)."""
        return self._state.free_whole > 0 and bool(self.elastic)

    def speedup(self, spec: JobSpec, k: int) -> float:
        """How many times as fast as at its submitted size `spec` works at `k` GPUs, alone and packed
        (`scheduler.core.elastic.speedup`)."""
        return speedup(self._contention, spec, k)

    def resize_pause_s(self, spec: JobSpec) -> float:
        """Seconds a resize stops `spec` for (`scheduler.core.elastic.resize_pause_s`)."""
        return resize_pause_s(spec, self._state.profiles)

    @property
    def free_capacity(self) -> float:
        """Free GPU share summed over the cluster."""
        return self.cluster.num_gpus - self._state.allocated_share

    @property
    def frees(self) -> int:
        """How many times GPUs were freed or reopened (`ClusterState.frees`): while it stands still nothing on the
        cluster gained free share, memory or room for a user's shares, so what fitted nowhere still fits nowhere."""
        return self._state.frees

    @property
    def moves(self) -> int:
        """How many allocations and releases there were (`ClusterState.moves`): a mark for `moved_since`."""
        return self._state.moves

    @property
    def changes(self) -> int:
        """How many times free capacity changed (`ClusterState.changes`): while it stands still, a placement search
        on a plan of this view that has taken nothing yet finds what it found before."""
        return self._state.changes

    def moved_since(self, mark: int) -> list[int] | None:
        """The ids of the jobs allocated or released since `moves` read `mark` (a job may repeat: a resize is both),
        oldest first; None when the record no longer reaches back that far (read every running job again then)."""
        state = self._state
        n = state.moves - mark
        if n < 0 or n > len(state._moved):
            return None
        return list(islice(reversed(state._moved), n))[::-1]  # from the newest end: a few of 65,536 read

    @property
    def link_load(self) -> np.ndarray:
        return self._contention.link_load

    @property
    def closed(self) -> Mapping[int, str]:
        """GPUs closed to new placements (drained, faulty, or held for a reservation), with why."""
        return MappingProxyType(self._state.closed)

    @contextmanager
    def holding(self, gpus: Mapping[int, str]) -> Iterator[None]:
        """Close `gpus` too for the length of the block, then exactly what was closed before (whatever the block
        raised). For the frames around a policy (the reservation rule), never for a policy."""
        before = dict(self._state.closed)
        self._state.set_closed({**gpus, **before})
        try:
            yield
        finally:
            self._state.set_closed(before)

    def tenants(self, gpu: int) -> tuple[int, ...]:
        return tuple(self._state.tenants.get(gpu, ()))

    def placement(self, job_id: int) -> Placement:
        return self._state.placements[job_id]

    @property
    def max_free_share(self) -> float:
        """The largest free share of any GPU, kept until free capacity changes (`changes`): a plan asks it of every
        call (`Planner.full`), and many calls follow only arrivals."""
        kept = self._max_free_share
        changes = self._state.changes
        if kept is None or kept[0] != changes:
            kept = self._max_free_share = (changes, float(self._state.free_share.max()))
        return kept[1]

    @property
    def placements(self) -> Mapping[int, Placement]:
        """Every running job's placement by id, read only: for a loop over many jobs (`placement` is a call each)."""
        return MappingProxyType(self._state.placements)

    def mem_need(self, spec: JobSpec) -> float:
        return self._state.mem_need(spec)

    @property
    def mps_users(self) -> MpsUsers:
        """Whose shares each node holds (`colocation.MpsUsers`; a planner copies it before planning)."""
        return self._state.mps

    def share_mask(self, spec: JobSpec, leaving: Sequence[int] = ()) -> np.ndarray:
        """Per GPU, whether CUDA MPS can run `spec`'s share there once the running jobs `leaving` have left (the
        memory cap and the one-user rule: `colocation.share_mask`), whatever the free capacity."""
        return self._state.share_mask(spec, leaving)

    def profile(self, spec: JobSpec) -> ModelProfile:
        return self._state.profiles[spec.model]

    def slowdown(self, job_id: int) -> float:
        return self._contention.slowdown(job_id)

    def predict(self, spec: JobSpec, placement: Placement) -> Prediction:
        return self._contention.predict(spec, placement)

    def fabric_words(self, spec: JobSpec, placement: Placement) -> str:
        """What the fabric's tiers would cost `spec` there, naming the tier ('' without a fabric)."""
        return self._contention.fabric_words(spec, placement)

    def predict_later(self, spec: JobSpec, placement: Placement) -> Callable[[], Prediction]:
        """`predict`'s result, computed when called (before anything changes; `ContentionModel.predict_later`)."""
        return self._contention.predict_later(spec, placement)

    def lowest_preemptible(self) -> float:
        """The lowest priority of a running, preemptible job (inf: none is); `scheduler.core.priorities` states
        the rule that reads it. O(distinct priorities) with the book's index, O(running jobs) without."""
        if self._lowest is not None:
            return self._lowest()
        return min((r.spec.priority for r in self.running.values() if r.spec.preemptible), default=math.inf)

    def attained_gpu_s(self, job: Job) -> float:
        """GPU-seconds of service a job has had up to now (Tiresias' 2D attained service)."""
        since = job.sized_since
        extra = (self.now - since) * job.spec.gpu_demand if since is not None else 0.0
        return job.attained_gpu_s + extra

"""The share searches of `policies.placement.Planner` that its index of free GPUs answers (`policies.free_index`):
`Planner.packed_share` and `Planner.empty_gpu_share` ask these first, and scan every GPU only where they say None.

Each finds the GPU the scan would (the same ties: the lowest-numbered), looking at one GPU or one node: the lowest of
the least free share that holds the job, or of the node with fewest whole free GPUs. Where that one fails the rest of
the test (memory, the MPS cap, another user's daemon on its node) another may pass, so they leave it to the scan.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Protocol

import numpy as np

from policies.free_index import FreeIndex
from scheduler.core.colocation import MpsUsers
from scheduler.core.model import Cluster, JobSpec
from scheduler.core.state import EPS, ClusterView


class Plan(Protocol):
    """What these searches read of a plan: `policies.placement.Planner`'s (which calls them, so they do not import it)."""

    view: ClusterView
    cluster: Cluster
    free_share: np.ndarray
    used_mem: np.ndarray
    mps: MpsUsers

    @property
    def index(self) -> FreeIndex | None: ...

    def cap_ok(self, spec: JobSpec) -> np.ndarray: ...

    def _free_in_node(self, node: int) -> list[int]: ...


def share_room(planner: Plan, spec: JobSpec) -> Callable[[int], bool] | None:
    """Whether a GPU takes a share of `spec` by all but its free share (memory, what CUDA MPS allows: the rest of
    `Planner._share_candidates`' test, for one GPU), where the index may answer for it: None where it may not (a share
    too small to tell a full GPU from one with room, constraints, a scratch plan)."""
    if spec.share <= EPS or spec.constraints is not None or planner.index is None:
        return None
    mem, cap, gpu_mem, used, gpu_node = (planner.view.mem_need(spec), planner.cap_ok(spec), planner.cluster.gpu_mem,
                                         planner.used_mem, planner.cluster.gpu_node)
    mps, user = planner.mps, spec.user
    return lambda g: bool(gpu_mem[g] - used[g] >= mem - EPS and cap[g] and mps.open_to(int(gpu_node[g]), user))


def packed_gpu(planner: Plan, spec: JobSpec) -> int | None:
    """`packed_share`'s GPU: a partly used GPU with room has less free than any other, so the lowest-numbered of the
    least free share that holds the job; else the lowest-numbered GPU with exactly all of it free (a whole free GPU's
    share may have been rounded above 1: more, so it comes after). None: the scan answers."""
    room, index = share_room(planner, spec), planner.index
    if room is None or index is None:
        return None
    at = bisect.bisect_left(index.shares, spec.share - EPS)
    if at < len(index.shares):
        g = index.lowest_with_share(index.shares[at])
        return g if room(g) else None
    node = index.first(1)
    if node < 0:
        return None
    first = int(planner.cluster.node_first_gpu[node])
    shares = planner.free_share[first:first + int(planner.cluster.node_num_gpus[node])].tolist()
    return next((first + k for k, s in enumerate(shares) if s == 1.0 and room(first + k)), None)


def empty_gpu(planner: Plan, spec: JobSpec) -> int | None:
    """`empty_gpu_share`'s GPU: the lowest-numbered one of the lowest-numbered node of those with fewest whole free
    GPUs, if it takes the job; -1 where no GPU is whole free and a partly used one takes the job (none, and no misfit
    to note). None: the scan answers."""
    room, index = share_room(planner, spec), planner.index
    if room is None or index is None:
        return None
    k = next((k for k in range(1, len(index.counts)) if index.counts[k]), 0)
    if not k:
        return -1 if packed_gpu(planner, spec) is not None else None
    return next((g for g in planner._free_in_node(index.lowest(k)) if room(g)), None)

"""What CUDA MPS lets a share of a GPU do: the rules of co-location, written once.

- **Memory**: a fractional job (share < 1) runs as an MPS client capped at `mem_cap_mb(share, GPU memory)`
  (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, set by the live worker from this very function): a model that needs more runs
  out of memory. So a share holds a model only on a GPU whose cap holds it (`share_fits`): admission refuses a job
  no GPU of the cluster gives enough (`least_share` says what to ask for), and placements skip GPUs too small for it.
- **One OS user per MPS daemon**: an MPS control daemon serves one Linux user at a time (a client of another user
  waits until the first user's clients have all exited), and Corral's node agent runs one daemon per node
  (`scheduler.live.node.mps`). With per-user job accounts the fractional jobs of one node must then belong to one
  user at a time, or they would wait for each other while the scheduler predicts them running. `MpsUsers` tracks whose
  fractional jobs each node holds; with `one_user` on, a node holding one user's shares is closed to other users'
  shares. Whole-GPU jobs never use MPS, so neither rule concerns them.

The cluster state (`scheduler.core.state`) checks every placement against `share_mask`; the planner every policy
searches with (`policies.placement`) and the room model of the preempting rules (`scheduler.core.room`) ask it too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

MIB_PER_GB = 1024  # the catalog's GB are GiB: the MPS limit is written in MiB
_ROUND = 1e-6  # float noise below a MiB (0.19 * 80 * 1024 = 15564.799999...) never moves the cap


def mem_cap_mb(share: float, gpu_mem_gb: float) -> int:
    """The GPU memory (MiB) a `share` of a GPU of `gpu_mem_gb` GB gets under MPS: what the live worker writes in
    `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`."""
    return math.floor(gpu_mem_gb * share * MIB_PER_GB + _ROUND)


def holds(mem_gb: float, share: float, gpu_mem_gb: float) -> bool:
    """Whether a job needing `mem_gb` fits in a `share` of one GPU of `gpu_mem_gb` GB (`share_fits` for one GPU)."""
    if share >= 1.0:
        return gpu_mem_gb >= mem_gb - _ROUND
    return mem_cap_mb(share, gpu_mem_gb) >= mem_gb * MIB_PER_GB - _ROUND


def share_fits(mem_gb: float, share: float, gpu_mem_gb: np.ndarray | float) -> np.ndarray:
    """Per GPU (memory sizes `gpu_mem_gb`), whether a job needing `mem_gb` fits in a `share` of it: under its MPS cap
    for a share, in the whole GPU's memory otherwise."""
    gpu_mem = np.asarray(gpu_mem_gb, dtype=np.float64)
    if share >= 1.0:
        return gpu_mem >= mem_gb - _ROUND
    cap = np.floor(gpu_mem * share * MIB_PER_GB + _ROUND)
    return cap >= mem_gb * MIB_PER_GB - _ROUND


def least_share(mem_gb: float, gpu_mem_gb: float) -> float:
    """The smallest share (in hundredths, as `num_gpus` takes them) of a GPU of `gpu_mem_gb` GB whose MPS cap holds
    `mem_gb`; 1.0 when no share below a whole GPU does."""
    for hundredths in range(max(1, math.floor(mem_gb / gpu_mem_gb * 100)), 100):
        share = hundredths / 100
        if holds(mem_gb, share, gpu_mem_gb):
            return share
    return 1.0


def cap_words(share: float, gpu_mem_gb: float) -> str:
    """'0.05 of a 80 GB GPU gives 4 GB under MPS'."""
    return f"{share:g} of a {gpu_mem_gb:g} GB GPU gives {round(mem_cap_mb(share, gpu_mem_gb) / MIB_PER_GB, 1):g} GB " \
           "under MPS"


class MpsUsers:
    """Whose fractional jobs each node holds, when one MPS daemon per node serves one user at a time (`one_user`).

    Without the rule nothing is tracked and `closed_to` is None. With it, `owner[node]` is the id of the one user whose
    shares the node holds (-1: none; -2: several, which only runs adopted from before the rule can make: closed to
    everyone until they end)."""

    __slots__ = ("_counts", "_ids", "one_user", "owner")

    def __init__(self, num_nodes: int, one_user: bool) -> None:
        self.one_user = one_user
        self.owner = np.full(num_nodes if one_user else 0, -1, dtype=np.int64)
        self._counts: dict[tuple[int, int], int] = {}  # (node, user id) -> fractional jobs
        self._ids: dict[str, int] = {}

    def copy(self) -> MpsUsers:
        if not self.one_user:  # nothing tracked, nothing to change: one object serves every plan
            return self
        other = MpsUsers.__new__(MpsUsers)
        other.one_user, other.owner, other._counts, other._ids = (
            self.one_user, self.owner.copy(), dict(self._counts), self._ids)  # ids only grow: shared is fine
        return other

    def _id(self, user: str) -> int:
        return self._ids.setdefault(user, len(self._ids))

    def add(self, node: int, user: str) -> None:
        if self.one_user:
            key = (node, self._id(user))
            self._counts[key] = self._counts.get(key, 0) + 1
            self._settle(node)

    def remove(self, node: int, user: str) -> None:
        if self.one_user:
            key = (node, self._id(user))
            left = self._counts[key] - 1
            if left:
                self._counts[key] = left
            else:
                del self._counts[key]
            self._settle(node)

    def _settle(self, node: int) -> None:
        users = [u for (n, u) in self._counts if n == node]
        self.owner[node] = users[0] if len(users) == 1 else (-1 if not users else -2)

    def open_to(self, node: int, user: str) -> bool:
        """Whether `node`'s daemon may serve `user`'s shares now: `closed_to`'s answer for one node, negated."""
        if not self.one_user:
            return True
        owner = int(self.owner[node])
        return owner == -1 or owner == self._ids.get(user, -3)

    def closed_to(self, user: str, leaving: Iterable[tuple[int, str]] = ()) -> np.ndarray | None:
        """Per node, whether its MPS daemon serves another user's shares now (once the fractional jobs `leaving`, as
        (node, user), have left); None when the rule is off."""
        if not self.one_user:
            return None
        leaving = list(leaving)
        if not leaving:
            return (self.owner != -1) & (self.owner != self._ids.get(user, -3))
        scratch = self.copy()
        for node, who in leaving:
            scratch.remove(node, who)
        return scratch.closed_to(user)


def share_mask(gpu_mem_gb: np.ndarray, gpu_node: np.ndarray, mem_gb: float, share: float, user: str,
               users: MpsUsers, leaving: Iterable[tuple[int, str]] = (), fits: np.ndarray | None = None) -> np.ndarray:
    """Per GPU, whether CUDA MPS lets a `share` of it run a job needing `mem_gb` run as `user` (whatever the free
    capacity): its memory cap holds the job, and its node's daemon serves no other user (`MpsUsers`). A whole GPU
    (share 1) only needs the memory. `fits`: `share_fits` of these figures, when the caller keeps it (then, without the
    one-user rule, it is what comes back: read it, never write it)."""
    ok = share_fits(mem_gb, share, gpu_mem_gb) if fits is None else fits
    if share < 1.0:
        closed = users.closed_to(user, leaving)
        if closed is not None:
            ok = ok & ~closed[gpu_node]
    return ok

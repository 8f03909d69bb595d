"""Where a plan's free GPUs are, kept as the plan changes (`policies.placement.Planner`), so that a placement search on
a datacentre (4,096 nodes, 32,768 GPUs) need not scan every node or GPU for each job.

`FreeIndex` answers the questions the searches ask most, exactly as the scans over every node or GPU answer them:

- the nodes with `k` whole free GPUs, lowest-numbered first (one heap per count; an entry whose node has since moved
  to another count is dropped when it comes to the top): the best, worst and first node holding a gang
  (`Planner.consolidated`), the node with fewest whole free GPUs a share may open (`Planner.empty_gpu_share`);
- the whole free GPUs per rack (`Planner._multi_node`, `policies.placement_topology`);
- the partly used GPUs by their exact free share, each value's GPUs lowest-numbered first (lazy heaps again): the
  packing share search (`Planner.packed_share`).

It is built on a plan's first search that reads it (two passes over the nodes and one over the GPUs) and told of
every change after (`moved`, `share_changed`). A scratch plan (`Planner.without`) has none: it is asked a few questions
of a few victim sets, and the scans answer those.
"""

from __future__ import annotations

import bisect
import heapq

import numpy as np

from scheduler.core.state import EPS


class FreeIndex:
    def __init__(self, node_free: np.ndarray, free_share: np.ndarray, node_rack: np.ndarray, num_racks: int,
                 max_per_node: int) -> None:
        self.free: list[int] = node_free.tolist()  # per node, its whole free GPUs (the plan's `node_free`)
        self.rack_of: list[int] = node_rack.tolist()
        self._node_rack = node_rack
        self._rack_nodes: dict[int, np.ndarray] = {}
        # Where each rack's nodes start, where they are numbered rack by rack, every rack with some (else None).
        contiguous = bool(np.all(np.diff(node_rack) >= 0)) and bool(np.all(np.bincount(node_rack, minlength=num_racks)))
        self.rack_starts = np.searchsorted(node_rack, np.arange(num_racks)) if contiguous else None
        self.rack_free = np.bincount(node_rack, weights=node_free, minlength=num_racks).astype(np.int64)
        self.counts = [0] * (max_per_node + 1)  # nodes per count of whole free GPUs
        self._nodes: list[list[int]] = [[] for _ in range(max_per_node + 1)]  # (count 0 is never searched)
        for k in range(1, max_per_node + 1):
            self._nodes[k] = np.flatnonzero(node_free == k).tolist()  # ascending: a heap already
            self.counts[k] = len(self._nodes[k])
        self.counts[0] = len(self.free) - sum(self.counts)
        self._share = free_share  # the plan's own array: read, never written
        # Partly used GPUs (0 < free share < 1, exactly) by free share; the distinct values, ascending.
        partly = np.flatnonzero((free_share > 0.0) & (free_share < 1.0))
        self._by_share: dict[float, list[int]] = {}
        self._share_count: dict[float, int] = {}
        for g, s in zip(partly.tolist(), free_share[partly].tolist(), strict=True):
            self._by_share.setdefault(s, []).append(g)  # ascending: a heap already
            self._share_count[s] = self._share_count.get(s, 0) + 1
        self.shares = sorted(self._share_count)
        # The GPUs a rounding left above all of their share free, and the partly used ones counted whole free (a
        # rounding left them a hair below it): with the whole free GPUs, the largest free share (`max_share`).
        self.near_one = sum(count for s, count in self._share_count.items() if s >= 1.0 - EPS)
        above = np.flatnonzero(free_share > 1.0)
        self.above: dict[int, float] = dict(zip(above.tolist(), free_share[above].tolist(), strict=True))

    # ---- changes ---------------------------------------------------------------------------------------------------

    def moved(self, node: int, free: int) -> None:
        """`node` has `free` whole free GPUs now."""
        old = self.free[node]
        if old == free:
            return
        self.free[node] = free
        self.counts[old] -= 1
        self.counts[free] += 1
        if free:
            heapq.heappush(self._nodes[free], node)
        self.rack_free[self.rack_of[node]] += free - old

    def share_changed(self, gpu: int, before: float, after: float) -> None:
        """GPU `gpu`'s free share went from `before` to `after` (the plan's array holds `after` already). A caller
        may skip a change between exactly 1 and at most 0, either way: nothing here counts those."""
        if before == after:
            return
        if before > 1.0:
            del self.above[gpu]
        if after > 1.0:
            self.above[gpu] = after
        if 0.0 < before < 1.0:
            self.near_one -= before >= 1.0 - EPS
            left = self._share_count[before] - 1
            if left:
                self._share_count[before] = left
            else:
                del self._share_count[before], self._by_share[before]
                self.shares.pop(bisect.bisect_left(self.shares, before))
        if 0.0 < after < 1.0:
            self.near_one += after >= 1.0 - EPS
            count = self._share_count.get(after, 0)
            self._share_count[after] = count + 1
            if count:
                heapq.heappush(self._by_share[after], gpu)
            else:
                self._by_share[after] = [gpu]
                bisect.insort(self.shares, after)

    # ---- questions -------------------------------------------------------------------------------------------------

    def lowest(self, k: int) -> int:
        """The lowest-numbered node with exactly `k` > 0 whole free GPUs (one must have them: `counts[k]`)."""
        heap, free = self._nodes[k], self.free
        while free[heap[0]] != k:
            heapq.heappop(heap)
        return heap[0]

    def best(self, w: int) -> int:
        """The node with fewest whole free GPUs of those with at least `w` (`w` >= 1), lowest-numbered first; -1: none."""
        for k in range(w, len(self.counts)):
            if self.counts[k]:
                return self.lowest(k)
        return -1

    def worst(self, w: int) -> int:
        """The node with most whole free GPUs, if at least `w`, lowest-numbered first; -1: none."""
        for k in range(len(self.counts) - 1, w - 1, -1):
            if self.counts[k]:
                return self.lowest(k)
        return -1

    def first(self, w: int) -> int:
        """The lowest-numbered node with at least `w` whole free GPUs; -1: none."""
        found = [self.lowest(k) for k in range(w, len(self.counts)) if self.counts[k]]
        return min(found) if found else -1

    def max_share(self, free_whole: int) -> float | None:
        """The largest free share of any GPU, exactly, given the plan's whole free GPUs (those above, exactly 1 and
        partly used a hair below it); None where no GPU has any (at most 0: the scan answers)."""
        if self.above:
            return max(self.above.values())
        if free_whole > self.near_one:
            return 1.0
        return self.shares[-1] if self.shares else None

    def rack_nodes(self, rack: int) -> np.ndarray:
        """A rack's nodes, in order."""
        found = self._rack_nodes.get(rack)
        if found is None:
            found = self._rack_nodes[rack] = np.flatnonzero(self._node_rack == rack)
        return found

    def lowest_with_share(self, share: float) -> int:
        """The lowest-numbered GPU with exactly `share` free (one must have it: a value of `shares`)."""
        heap, free = self._by_share[share], self._share
        while free[heap[0]] != share:
            heapq.heappop(heap)
        return heap[0]

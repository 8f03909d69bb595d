"""The victim search's exact test for a whole-GPU job (`Planner.fit_test`), kept per prefix of the victims asked."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from scheduler.core.model import Job, Placement
from scheduler.core.state import EPS


class WholeFits:
    """`Planner.fit_test` for a whole-GPU job that lacks `need` whole GPUs: whether victims leave as many GPUs wholly
    free (on nodes with memory enough) as it lacks, their shares added to each GPU's free share in the order
    `give_back` adds them (the same floats).

    The victim search asks it of hundreds of sets for a gang larger than a node, each the set of an earlier question
    and a victim or a few more (its sets grow along the policy's order): so what each set's victims leave is kept per
    prefix of victims (by their job ids), and a set is counted from its longest prefix asked before, adding only the
    victims after it. The sums are the ones adding them all would make: each GPU's shares in the victims' order. (What
    is kept are two maps of tuples of numbers and of dicts of numbers, which the garbage collector does not track: a
    tree of nodes made its young objects live long and ran ~25 times as many full collections in a replay.)"""

    __slots__ = ("_after", "_eligible", "_free", "_freed", "_need", "_placement")

    def __init__(self, free: np.ndarray, eligible: np.ndarray, placement: Callable[[int], Placement],
                 need: int) -> None:
        self._free, self._eligible, self._placement, self._need = free, eligible, placement, need
        # Per prefix (its victims' ids): GPUs it leaves wholly free that were not; per GPU it holds, that GPU's free
        # share plus the prefix's shares
        self._freed: dict[tuple[int, ...], int] = {(): 0}
        self._after: dict[tuple[int, ...], dict[int, float]] = {(): {}}

    def __call__(self, victims: Sequence[Job]) -> bool:
        ids = tuple([v.id for v in victims])
        known = self._freed
        freed = known.get(ids)
        if freed is None:
            cut = len(ids) - 1
            while ids[:cut] not in known:
                cut -= 1
            for k in range(cut, len(ids)):
                self._then(ids[:k], ids[:k + 1], self._placement(ids[k]))
            freed = known[ids]
        return freed >= self._need

    def _then(self, prefix: tuple[int, ...], ids: tuple[int, ...], p: Placement) -> None:
        """Counts and keeps what the victims `ids` leave: those of `prefix` and one more, on `p`."""
        free, eligible, share = self._free, self._eligible, p.share
        freed, after = self._freed[prefix], self._after[prefix].copy()
        for g in p.gpus:
            before = after.get(g)
            now = after[g] = (float(free[g]) if before is None else before) + share
            if now >= 1.0 - EPS and (before is None or before < 1.0 - EPS) and free[g] < 1.0 - EPS and eligible[g]:
                freed += 1  # (a GPU once wholly free stays so: shares only add)
        self._freed[ids], self._after[ids] = freed, after

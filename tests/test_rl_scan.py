"""The preemption orders' scan (`policies.rl_scan`) asks jobs alike once per class while the plan's misfits stay as
they are; every decision must be the one asking each job it passes gives. Whole simulations of the `rl:` decision path
(driven by the fixed rule of `test_rl_latency_equivalence`), with the scan's answers per class and the frame's per
plan, against the same with both off."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_rl_latency_equivalence import CASES, decision_digest

from policies.rl_encoding import _Frame
from policies.rl_scan import Scan

pytestmark = pytest.mark.slow  # whole simulations replayed decision by decision


def _asking_each(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Turn both answers per class off: every job the scan passes is asked (`_Frame.fits`) and searched. Returns a
    counter of the scan's questions."""
    asked = [0]
    init, passing, fits = Scan.__init__, _Frame._passing, _Frame.fits

    def alone(self: Scan, frame: _Frame, jobs: list[Any], known: np.ndarray, classes: np.ndarray,
              each: np.ndarray, swap_call: bool) -> None:
        init(self, frame, jobs, known, classes, np.ones_like(each), swap_call)

    def counted(self: _Frame, job: Any, predict: bool = True) -> Any:
        asked[0] += not predict
        return fits(self, job, predict)

    monkeypatch.setattr(Scan, "__init__", alone)
    monkeypatch.setattr(_Frame, "_passing", lambda self, s: self._passed.clear() or passing(self, s))
    monkeypatch.setattr(_Frame, "fits", counted)
    return asked


@pytest.mark.parametrize("name", ["fractional", "multinode"])
def test_the_scan_decides_what_asking_each_job_decides(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, mix, n_jobs, load, seed, _ = CASES[name]
    from policies import rl_scan

    monkeypatch.setattr(rl_scan, "_LOOP", 0)  # these queues are short: the arrays' scan even so
    fast = decision_digest(cluster, mix, n_jobs, load, seed)
    fits = _Frame.fits
    once = [0]

    def counted(self: _Frame, job: Any, predict: bool = True) -> Any:
        once[0] += not predict
        return fits(self, job, predict)

    monkeypatch.setattr(_Frame, "fits", counted)
    assert decision_digest(cluster, mix, n_jobs, load, seed) == fast
    monkeypatch.undo()  # (the short queues' loop again: it asks each job, as the frame did)
    assert decision_digest(cluster, mix, n_jobs, load, seed) == fast
    each = _asking_each(monkeypatch)
    slow = decision_digest(cluster, mix, n_jobs, load, seed)
    assert slow == fast
    assert each[0] > once[0] > 0  # the scan asked fewer questions, and the comparison is not empty

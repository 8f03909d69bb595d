"""The preemption orders' scan (`policies.rl_scan`) asks jobs alike once per class while the plan's misfits stay as
they are, and does not ask for victims for jobs no running job ranks below; every decision must be the one asking
each job it passes gives. Whole simulations of the `rl:` decision path (driven by the fixed rule of
`test_rl_latency_equivalence`), with the scan's answers per class, the frame's per plan and the hopeless jobs passed
over, against the same with all three off."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_rl_latency_equivalence import CASES, decision_digest

from policies.rl_encoding import _Frame
from policies.rl_scan import Scan

pytestmark = pytest.mark.slow  # whole simulations replayed decision by decision


def _asking_each(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """Turn the answers per class and the hopeless jobs off: every job the scan passes is asked (`_Frame.fits`) and
    searched, and every one that does not fit is asked for victims (`_Frame.preempting`). Returns counters of the
    scan's two questions."""
    asked, victims = [0], [0]
    init, passing, fits, preempting = Scan.__init__, _Frame._passing, _Frame.fits, _Frame.preempting

    def alone(self: Scan, frame: _Frame, jobs: list[Any], known: np.ndarray, classes: np.ndarray,
              each: np.ndarray, *rest: Any) -> None:
        init(self, frame, jobs, known, classes, np.ones_like(each), *rest)

    def counted(self: _Frame, job: Any, predict: bool = True) -> Any:
        asked[0] += not predict
        return fits(self, job, predict)

    def tried(self: _Frame, job: Any, ladder: Any) -> Any:
        victims[0] += 1
        return preempting(self, job, ladder)

    monkeypatch.setattr(Scan, "__init__", alone)
    monkeypatch.setattr(Scan, "_hopeless", lambda self, ladder: [])
    monkeypatch.setattr(_Frame, "_passing", lambda self, s: self._passed.clear() or passing(self, s))
    monkeypatch.setattr(_Frame, "fits", counted)
    monkeypatch.setattr(_Frame, "preempting", tried)
    return asked, victims


@pytest.mark.parametrize("name", ["fractional", "multinode"])
def test_the_scan_decides_what_asking_each_job_decides(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, mix, n_jobs, load, seed, _ = CASES[name]
    from policies import rl_scan

    monkeypatch.setattr(rl_scan, "_LOOP", 0)  # these queues are short: the arrays' scan even so
    fast = decision_digest(cluster, mix, n_jobs, load, seed)
    fits, preempting = _Frame.fits, _Frame.preempting
    once, victims = [0], [0]

    def counted(self: _Frame, job: Any, predict: bool = True) -> Any:
        once[0] += not predict
        return fits(self, job, predict)

    def tried(self: _Frame, job: Any, ladder: Any) -> Any:
        victims[0] += 1
        return preempting(self, job, ladder)

    monkeypatch.setattr(_Frame, "fits", counted)
    monkeypatch.setattr(_Frame, "preempting", tried)
    assert decision_digest(cluster, mix, n_jobs, load, seed) == fast
    monkeypatch.undo()  # (the short queues' loop again: it asks each job, as the frame did)
    assert decision_digest(cluster, mix, n_jobs, load, seed) == fast
    each, each_victims = _asking_each(monkeypatch)
    slow = decision_digest(cluster, mix, n_jobs, load, seed)
    assert slow == fast
    # The scan asked fewer questions of both kinds, and the comparison is not empty.
    assert each[0] > once[0] > 0 and each_victims[0] > victims[0] > 0

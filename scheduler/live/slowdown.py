"""The slowdown the contention model predicted for each running job, integrated over the time its workers ran.

A job's predicted slowdown changes whenever a neighbour arrives or leaves. When the run ends, the controller stores
the time-weighted mean (`predicted_slowdown_avg`) beside what was observed, which is what calibration compares.
"""

from __future__ import annotations


class SlowdownLedger:
    """Per running job: (integral of slowdown x seconds so far, the slowdown now, integrated up to when)."""

    def __init__(self) -> None:
        self._track: dict[int, tuple[float, float, float]] = {}

    def resume(self, job_id: int, slowdown: float, since: float) -> None:
        """A run adopted after a restart: what ran before the crash is counted at the slowdown last recorded."""
        self._track[job_id] = (0.0, slowdown, since)

    def started(self, job_id: int, at: float) -> None:
        """The run's workers are up: integrate from `at`."""
        integral, slow, _ = self._track.get(job_id, (0.0, 1.0, at))
        self._track[job_id] = (integral, slow, at)

    def advance(self, job_id: int, now: float, ran_from: float | None) -> float:
        """Integrate up to `now`; `ran_from` is when its workers started (None: not yet, nothing to count)."""
        integral, slow, since = self._track.get(job_id, (0.0, 1.0, now))
        if ran_from is not None:
            integral += slow * max(0.0, now - max(since, ran_from))
        self._track[job_id] = (integral, slow, now)
        return integral

    def set(self, job_id: int, slowdown: float, now: float, ran_from: float | None) -> None:
        """The prediction changed at `now`: what ran before counts at the old value."""
        self._track[job_id] = (self.advance(job_id, now, ran_from), slowdown, now)

    def close(self, job_id: int, now: float, ran_from: float | None) -> float:
        """The run ended at `now`: its whole integral, and the job leaves the ledger."""
        integral = self.advance(job_id, now, ran_from)
        del self._track[job_id]
        return integral

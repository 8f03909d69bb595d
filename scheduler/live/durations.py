"""The live service's durations: a command job that gives no `duration_s` gets the median run time of similar jobs
that ended (`scheduler.core.durations`, the one predictor), with what it rests on, instead of a flat default.

What is learned: the command jobs that succeeded, their isolated run time (the wall time their workers ran over the
slowdown the model predicted for it: `run_s / predicted_slowdown_avg`, so a job slowed by its neighbours does not teach
that its kind is slow), by their submitter, name pattern, model and size. A failed, cancelled or timed-out run says
only that the job would have run longer (a censored time); it is left out rather than taken for a run time.

Bounded: the predictor is rebuilt from the latest `MAX_HISTORY` such jobs, at most every `REFRESH_S` per store, so a
burst of submissions costs one query, not one each; between rebuilds the jobs that end are learned at the next one.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.core.durations import DurationEstimate, DurationPredictor, name_pattern
from scheduler.core.reasons import duration_words
from scheduler.live.store import JobType
from scheduler.live.store.models import Job, JobState, User

REFRESH_S = 30.0
MAX_HISTORY = 20_000
MAX_STORES = 8  # predictors kept per process (one per database; tests open many)


def job_traits(user: str, name: str, model: str, num_gpus: float) -> dict[str, str]:
    """What the predictor reads of a live job (`scheduler.core.durations.traits`): every command job names its user,
    name and model, and its size."""
    return {"user": user, "pattern": name_pattern(name), "model": model, "gpus": f"{num_gpus:g}"}


_HISTORY = (select(User.name, Job.name, Job.model, Job.num_gpus, Job.run_s, Job.predicted_slowdown_avg)
            .join(User, User.id == Job.user_id)
            .where(Job.kind == JobType.COMMAND, Job.state == JobState.SUCCEEDED, Job.run_s > 0)
            .order_by(Job.finished_at.desc(), Job.id.desc()).limit(MAX_HISTORY))


class StoreDurations:
    """Each store's predictor, rebuilt from its history when older than `REFRESH_S`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: dict[str, tuple[float, DurationPredictor]] = {}

    def predictor(self, s: Session, now: float | None = None) -> DurationPredictor:
        now = time.time() if now is None else now
        key = str(s.get_bind().engine.url)
        with self._lock:
            built = self._built.get(key)
            if built is not None and now - built[0] < REFRESH_S:
                return built[1]
        predictor = DurationPredictor()
        for user, name, model, gpus, run_s, slowdown in reversed(s.execute(_HISTORY).all()):  # oldest first
            predictor.observe(job_traits(user, name, model, gpus), run_s / max(1.0, slowdown or 1.0))
        with self._lock:
            if len(self._built) >= MAX_STORES and key not in self._built:
                self._built.pop(next(iter(self._built)))
            self._built[key] = (now, predictor)
        return predictor

    def predict(self, s: Session, traits: dict[str, str]) -> DurationEstimate | None:
        """The store's estimate for a job of these traits; under the lock (a prediction reorders the predictor's
        groups, and Flask serves submissions from several threads)."""
        predictor = self.predictor(s)
        with self._lock:
            return predictor.predict(traits)

    def forget(self) -> None:
        """Drop every store's predictor: the next estimate reads the history again."""
        with self._lock:
            self._built.clear()


STORE_DURATIONS = StoreDurations()


def estimated(e: DurationEstimate | None, default_s: float) -> tuple[float, dict[str, Any]]:
    """The duration a job that gave none gets, and the record of what it rests on (`Job.duration_estimate`)."""
    if e is None:
        return default_s, {"text": f"no similar job has ended yet: the default, {duration_words(default_s)}",
                           "n": 0, "basis": None, "quantiles_s": None}
    return e.median_s, {"text": e.text(), "n": e.n, "basis": list(e.basis), "quantiles_s": list(e.quantiles_s)}


def estimate(s: Session, user: str, name: str, model: str, num_gpus: float, default_s: float) -> tuple[float,
                                                                                                      dict[str, Any]]:
    """A command job's duration from the store's history (the default where nothing similar has ended)."""
    return estimated(STORE_DURATIONS.predict(s, job_traits(user, name, model, num_gpus)), default_s)

"""An inference job's latency SLO against the latency the contention model predicts for it: the model's isolated
latency (the catalog profile's `latency_ms`) times the job's predicted slowdown, the simulator's rule for an SLO
violation (`scheduler.core.simulator`). The API serves it with every job (`slo`), so the dashboard only shows it."""

from __future__ import annotations

from typing import TypedDict

from scheduler.core.generic import known_profiles
from scheduler.core.progress import slo_missed
from scheduler.live.job_states import JobState

# Which slowdown the prediction uses, in words: the one the job runs at now, else the average over its runs (a job
# that ran and stopped), else none (a job that never ran: alone). "" when no latency is known to multiply.
NOW, AVERAGED, ALONE = "now", "averaged over its run", "alone"


class SloStatus(TypedDict):
    slo_ms: float
    alone_ms: float | None  # the model's isolated latency; null when the catalog knows none (training, unknown)
    slowdown: float | None
    predicted_ms: float | None
    basis: str
    at_risk: bool | None  # null when nothing is predicted


def slo_status(slo_ms: float | None, model: str, state: str, predicted_slowdown: float | None,
               predicted_slowdown_avg: float | None) -> SloStatus | None:
    """A job's SLO and whether its predicted latency is over it; None for a job without an SLO."""
    if slo_ms is None:
        return None
    profile = known_profiles().get(model)
    alone = profile.latency_ms if profile is not None and profile.latency_ms else None
    if alone is None:
        return SloStatus(slo_ms=slo_ms, alone_ms=None, slowdown=None, predicted_ms=None, basis="", at_risk=None)
    # A zero or missing slowdown is no prediction: the next basis is taken.
    if state == JobState.RUNNING and predicted_slowdown:
        slowdown, basis = predicted_slowdown, NOW
    elif predicted_slowdown_avg:
        slowdown, basis = predicted_slowdown_avg, AVERAGED
    else:
        slowdown, basis = 1.0, ALONE
    return SloStatus(slo_ms=slo_ms, alone_ms=alone, slowdown=slowdown, predicted_ms=alone * slowdown, basis=basis,
                     at_risk=slo_missed(alone, slowdown, slo_ms))

"""The controller's Prometheus metrics (process-wide, in prometheus_client's default registry; `GET /metrics` serves
them with the API's own). Gauges of the current state (queue, GPUs) are read from the store at scrape time by the
web layer instead, so they are right even when the controller runs in another process."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

SLOWDOWN_BUCKETS = (1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 6.0, float("inf"))

DECISIONS = Counter("corral_decisions", "Policy decisions the controller applied", ["action"])
DECISION_LATENCY = Histogram(
    "corral_decision_latency_seconds", "Time of one policy call (one pass over the queue)",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, float("inf")),
)
RECLAIMS = Counter("corral_reclaims", "Borrowed jobs preempted to give a team under its quota its GPUs back")
GUARD_SWITCHES = Counter("corral_guard_switches", "Switches of a guarded policy's guard, by the policy that acts after",
                         ["to"])
PREDICTED_SLOWDOWN = Histogram(
    "corral_predicted_slowdown", "Slowdown the contention model predicted for each placement when it was made",
    buckets=SLOWDOWN_BUCKETS,
)
OBSERVED_SLOWDOWN = Histogram(
    "corral_observed_slowdown", "Succeeded jobs' run time over their isolated duration", buckets=SLOWDOWN_BUCKETS,
)

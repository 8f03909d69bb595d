"""`GET /metrics` in Prometheus' text format: the store's current state (read at scrape time, so it is right whichever
process runs the controller), the controller's decisions and predictions (`scheduler.live.metrics`, when it runs in this
process), and the API's request latencies. No token: Prometheus scrapes it; it shows counts, never job contents."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from flask import Flask, Response, g, request
from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

import scheduler.live.metrics  # noqa: F401  # declare the controller's series even before its first decision
from scheduler.live.accounting import gpu_seconds_by_team
from scheduler.live.store import JobState, Store, queries
from scheduler.live.store.models import Allocation, Gpu, Job

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# Per-team gauges: (name, help, the key of queries.team_usage's figures; None: the team's quota).
TEAM_GAUGES = (
    ("corral_team_quota_gpus", "GPUs the team is guaranteed", None),
    ("corral_team_in_use_gpus", "GPUs the team's running jobs hold (shares as fractions)", "in_use_gpus"),
    ("corral_team_borrowed_gpus", "GPUs the team holds beyond its quota", "borrowed_gpus"),
    ("corral_team_lent_gpus", "GPUs of the team's idle quota that other teams borrow", "lent_gpus"),
    ("corral_team_pending_jobs", "The team's jobs waiting to be placed", "pending_jobs"),
    ("corral_team_running_jobs", "The team's jobs placed and running", "running_jobs"),
)


class StoreCollector(Collector):
    """Queue, running jobs, GPUs held and shared, the running jobs' predicted slowdowns, and each team's quota and
    holdings, from the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        with self.store.session() as s:
            by_state = dict(s.execute(select(Job.state, func.count()).group_by(Job.state)).all())
            gpus = s.scalar(select(func.count()).select_from(Gpu)) or 0
            held = s.execute(select(Allocation.gpu, func.count(), func.sum(Allocation.share))
                             .where(Allocation.released_at.is_(None)).group_by(Allocation.gpu)).all()
            slow = s.execute(select(func.avg(Job.predicted_slowdown), func.max(Job.predicted_slowdown))
                             .where(Job.state == JobState.RUNNING)).one()
            quotas = {t.name: t.quota_gpus for t in queries.list_teams(s)}
            usage = queries.team_usage(s)
            held_s = gpu_seconds_by_team(s, time.time())
            guard = queries.active_policy_info(s).get("guard") or {}
        yield GaugeMetricFamily("corral_queue_length", "Jobs waiting to be placed", value=by_state.get("pending", 0))
        yield GaugeMetricFamily("corral_running_jobs", "Jobs placed and running", value=by_state.get("running", 0))
        jobs = GaugeMetricFamily("corral_jobs", "Jobs in the store by state", labels=["state"])
        for state in JobState:
            jobs.add_metric([state.value], by_state.get(state.value, 0))
        yield jobs
        yield GaugeMetricFamily("corral_gpus", "GPUs in the cluster", value=gpus)
        yield GaugeMetricFamily("corral_gpus_allocated", "GPUs with at least one tenant", value=len(held))
        yield GaugeMetricFamily("corral_gpus_shared", "GPUs with more than one tenant (MPS)",
                                value=sum(1 for _, n, _ in held if n > 1))
        yield GaugeMetricFamily("corral_gpu_share_allocated", "Sum over GPUs of the shares held",
                                value=float(sum(share or 0.0 for _, _, share in held)))
        yield GaugeMetricFamily("corral_running_predicted_slowdown_mean",
                                "Mean predicted slowdown of the running jobs", value=float(slow[0] or 0.0))
        yield GaugeMetricFamily("corral_running_predicted_slowdown_max",
                                "Largest predicted slowdown of a running job", value=float(slow[1] or 0.0))
        for name, help_text, key in TEAM_GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=["team"])
            for team, quota in quotas.items():
                family.add_metric([team], quota if key is None else usage[team][key])
            yield family
        yield GaugeMetricFamily("corral_guard_fallback_acting", "1 while a guarded policy's fallback decides in its "
                                "place (the guard's verdict), else 0", value=1.0 if guard.get("fallback") else 0.0)
        # What `GET /accounting?by=team` sums over a period, as a counter: its increase over the period x 1/3600.
        counter = CounterMetricFamily("corral_team_gpu_seconds", "GPU-seconds the team's jobs held (shares weighted)",
                                      labels=["team"])
        for team in sorted(quotas.keys() | held_s.keys()):
            counter.add_metric([team], held_s.get(team, 0.0))
        yield counter


def init_app(app: Flask, store: Store) -> None:
    registry = CollectorRegistry()
    registry.register(StoreCollector(store))
    latency = Histogram("corral_api_request_duration_seconds", "API request latency", ["method", "route", "status"],
                        registry=registry,
                        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, float("inf")))

    @app.before_request
    def _start_timer() -> None:
        g.corral_t0 = time.perf_counter()

    @app.after_request
    def _observe(response: Response) -> Response:
        t0 = g.pop("corral_t0", None)
        if t0 is not None:
            # The route's pattern, not the path: one series per endpoint, not one per job id.
            route = request.url_rule.rule if request.url_rule is not None else "unmatched"
            latency.labels(request.method, route, str(response.status_code)).observe(time.perf_counter() - t0)
        return response

    @app.get("/metrics")
    def metrics() -> Any:
        body = generate_latest(registry) + generate_latest(REGISTRY)
        return Response(body, content_type=CONTENT_TYPE)

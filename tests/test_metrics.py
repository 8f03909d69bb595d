"""`GET /metrics` parses with the Prometheus client's own parser and counts what the store holds, per team too, on
SQLite and PostgreSQL; the controller's decision metrics are checked end to end in tests/test_live.py."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from test_api import make_env
from test_explain import add_cluster
from test_stats import seed_teams

from scheduler.live.store import Store
from scheduler.live.store.models import Allocation, Job


def scrape(client) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:  # type: ignore[no-untyped-def]
    resp = client.get("/metrics")
    assert resp.status_code == 200 and resp.content_type.startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(resp.get_data(as_text=True)):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_metrics_count_the_queue_gpus_and_requests(store: Store, corral_home: Path) -> None:
    env = make_env(store)
    add_cluster(store)  # 4 GPUs
    ids = [env.submit(num_gpus=0.5)["id"] for _ in range(3)] + [env.submit(num_gpus=2)["id"]]
    now = time.time()
    with store.session() as s:
        for job_id, gpu in ((ids[0], 0), (ids[1], 0)):  # two tenants on GPU 0
            row = s.get(Job, job_id)
            assert row is not None
            row.state, row.attempt, row.predicted_slowdown = "running", 1, 1.5 if job_id == ids[0] else 1.1
            s.add(Allocation(job_id=job_id, attempt=1, rank=0, node="node0", gpu=gpu, local_gpu=gpu, share=0.5,
                             allocated_at=now))
    m = scrape(env.client)
    assert m["corral_queue_length"][()] == 2 and m["corral_running_jobs"][()] == 2
    assert m["corral_jobs"][(("state", "pending"),)] == 2 and m["corral_jobs"][(("state", "succeeded"),)] == 0
    assert m["corral_gpus"][()] == 4 and m["corral_gpus_allocated"][()] == 1 and m["corral_gpus_shared"][()] == 1
    assert m["corral_gpu_share_allocated"][()] == 1.0
    assert m["corral_running_predicted_slowdown_max"][()] == 1.5
    assert abs(m["corral_running_predicted_slowdown_mean"][()] - 1.3) < 1e-9
    posts = m["corral_api_request_duration_seconds_count"][
        (("method", "POST"), ("route", "/api/v1/jobs"), ("status", "201"))]
    assert posts == 4
    assert "corral_decision_latency_seconds_count" in m  # the controller's metrics are exported too


def test_team_gauges(store: Store, corral_home: Path) -> None:
    from web import create_app

    seed_teams(store, time.time())  # vision (quota 4) holds 2 and lends 0.5; nlp (quota 2) holds 4.5, borrows 2.5
    m = scrape(create_app(store).test_client())
    expected = {
        "corral_team_quota_gpus": {"default": 0, "nlp": 2, "vision": 4},
        "corral_team_in_use_gpus": {"default": 0, "nlp": 4.5, "vision": 2},
        "corral_team_borrowed_gpus": {"default": 0, "nlp": 2.5, "vision": 0},
        "corral_team_lent_gpus": {"default": 0, "nlp": 0, "vision": 0.5},
        "corral_team_pending_jobs": {"default": 0, "nlp": 1, "vision": 1},
        "corral_team_running_jobs": {"default": 0, "nlp": 2, "vision": 1},
    }
    for name, by_team in expected.items():
        assert m[name] == {(("team", team),): value for team, value in by_team.items()}, name

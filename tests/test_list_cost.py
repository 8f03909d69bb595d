"""A list page stays cheap at its maximum (issue 46, item 2): `GET /jobs?limit=1000` answers what JobListSchema's dump
would (web.fast_dump gives the same JSON at a fraction of marshmallow's cost), and costs as many SQL statements for
300 jobs as for 3 (no query per job). Never a timed assertion: benchmarks/security_probe.py measures the time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from test_whatif import Env

from policies import make_policy
from scheduler.live.estimates import LiveEstimator
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job as JobRow
from web.api.estimates import ESTIMATOR_KEY
from web.api.job_json import job_json
from web.fast_dump import dumper
from web.schemas.jobs import JobListSchema, JobSummarySchema

API = "/api/v1"


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    e = Env(store)
    e.register_nodes()
    return e


def varied_jobs(env: Env) -> None:
    """Jobs of every shape a list shows: running (whole GPUs, a share), pending (plain, held, with a retry list, a
    dependency, an inference SLO, a time limit), and finished ones."""
    env.running("whole", [0, 1], duration=2000, progress=0.25)
    env.running("share", [2], duration=900, progress=0.5, share=0.5)
    first = env.pending("plain", 1, 600)
    env.pending("big", 16, 3600, ago=20)
    now = time.time()
    with env.store.session() as s:
        held = s.get(JobRow, env.pending("held", 2, 60))
        assert held is not None
        held.held_at, held.held_by = now, "alice"
        s.add(JobRow(user_id=env.alice, name="picky", kind="emulated", model="ResNet-50-bs64", num_gpus=1,
                     duration_s=100.0, submitted_at=now, queued_since=now, state="pending", env={"A": "1"},
                     retry_on=[1, 3], max_retries=2, time_limit_s=300.0, priority=5,
                     depends_on=[{"job": first, "condition": "afterok"}]))
        s.add(JobRow(user_id=env.alice, name="serve", kind="emulated", model="ResNet-50-bs64", num_gpus=0.25,
                     duration_s=100.0, submitted_at=now, queued_since=now, state="pending", env={}, slo_ms=50.0))
        s.add(JobRow(user_id=env.alice, name="done", kind="emulated", model="ResNet-50-bs64", num_gpus=1,
                     duration_s=10.0, submitted_at=now - 90, queued_since=now - 90, state="succeeded", env={},
                     started_at=now - 80, first_started_at=now - 80, finished_at=now - 60, attempt=1, progress=1.0,
                     observed_slowdown=2.0, run_s=20.0, exit_code=0))
        s.add(JobRow(user_id=env.alice, name="broke", kind="command", model="ResNet-50-bs64", num_gpus=1,
                     duration_s=10.0, submitted_at=now - 90, queued_since=now - 90, state="failed", env={},
                     entrypoint="false", finished_at=now - 30, attempt=2, exit_code=1, error="exit code 1"))


def test_the_fast_dump_gives_what_the_schema_dump_gives(env: Env) -> None:
    varied_jobs(env)
    estimates = LiveEstimator(env.store, make_policy).current()
    with env.store.session() as s:
        jobs, total = q.list_jobs(s, limit=1000, offset=0)
        names = q.user_names(s, [j.user_id for j in jobs])
        allocs = q.current_allocations(s, jobs)
        rows = [job_json(j, names[j.user_id], allocs.get(j.id, []), q.queue_positions(s), estimates)
                for j in jobs]
    assert total == 9 and any(r["allocation"] for r in rows) and any(r["start_estimate_s"] for r in rows)
    fast = {"jobs": [dumper(JobSummarySchema())(r) for r in rows], "total": total}
    slow = JobListSchema().dump({"jobs": rows, "total": total})
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)  # the same JSON, 3 vs 3.0 included
    answer = env.client.get(f"{API}/jobs?limit=1000", headers={"Authorization": f"Bearer {env.tokens['alice']}"})
    assert answer.status_code == 200
    assert sorted(answer.json["jobs"][0]) == sorted(slow["jobs"][0])  # the API answers those fields


def statements(env: Env, path: str, who: str = "alice") -> tuple[int, Any]:
    count = [0]

    def one(*_: Any) -> None:
        count[0] += 1

    event.listen(env.store.engine, "before_cursor_execute", one)
    try:
        resp = env.client.get(f"{API}{path}", headers={"Authorization": f"Bearer {env.tokens[who]}"})
    finally:
        event.remove(env.store.engine, "before_cursor_execute", one)
    assert resp.status_code == 200, resp.json
    return count[0], resp.json


def test_a_full_page_costs_the_statements_of_a_small_one(env: Env) -> None:
    varied_jobs(env)
    statements(env, "/jobs?limit=1000")  # caches warm (the token, the limits)
    # Each page below replays the queue for its estimates: one replay, whatever the number of jobs.
    env.client.application.extensions.pop(ESTIMATOR_KEY)
    few, page = statements(env, "/jobs?limit=1000")
    assert page["total"] == 9
    for i in range(300):
        env.pending(f"more-{i}", 1, 60) if i % 3 else env.running(f"run-{i}", [i % 16], 60, 0.1, share=0.01)
    env.client.application.extensions.pop(ESTIMATOR_KEY)
    many, page = statements(env, "/jobs?limit=1000")
    assert page["total"] == 309 and len(page["jobs"]) == 309
    assert many == few  # no statement per job

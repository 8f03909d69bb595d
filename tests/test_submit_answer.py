"""POST /jobs answers what JobSchema's marshmallow dump of the job gives (the view dumps with `web.fast_dump`, issue
48): for a job, an array's task 0 with its array, a command job with its environment and estimate, and a retry of a
known client token (200); and the job it answers with is the one stored."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_api import COMMAND, EMULATED, Env, make_env

from scheduler.live.store import Store
from scheduler.live.store.models import Job
from web.api.job_json import job_json
from web.api.jobs import dump_job
from web.schemas.jobs import JobSchema


@pytest.fixture
def admin_env(store: Store, corral_home: Any) -> Env:
    return make_env(store, CORRAL_COMMAND_JOBS="anyone")


def _as_marshmallow(body: dict[str, Any]) -> Any:
    return json.loads(json.dumps(JobSchema().dump(body)))


@pytest.mark.parametrize("fields", [
    EMULATED | {"client_token": "answer-1", "priority": 3, "constraints": {"nodes": ["n0"]}},
    EMULATED | {"array": {"count": 3, "max_running": 2}},
    COMMAND | {"duration_s": None, "retry_on": [1, 2]},
])
def test_the_answer_is_marshmallows_dump_of_the_stored_job(admin_env: Env, fields: dict[str, Any]) -> None:
    resp = admin_env.post("/jobs", fields, who="root")
    assert resp.status_code == 201, resp.json
    answer = resp.json
    with admin_env.client.application.app_context(), admin_env.store.session() as s:
        stored = s.get(Job, answer["id"])
        assert stored is not None
        body = job_json(stored, "root")
        if "array" in answer:
            body["array"] = answer["array"]  # (read by its own query: what the schema makes of it is checked below)
    assert dump_job(body) == JobSchema().dump(body)
    assert answer == _as_marshmallow(body)
    if fields.get("client_token"):
        again = admin_env.post("/jobs", fields, who="root")
        assert again.status_code == 200
        # the first job, shown in full (its queue position and start estimate too), dumped alike
        assert {k: v for k, v in again.json.items() if k in answer and not k.startswith(("start_estimate", "queue"))} \
            == {k: v for k, v in answer.items() if not k.startswith(("start_estimate", "queue"))}

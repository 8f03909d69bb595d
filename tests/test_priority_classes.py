"""Priority classes and a job's priority fields through the API, on SQLite and PostgreSQL (the `store` fixture):
admins define classes, everyone lists them, a job that names one copies its figures, bad input is refused by name and
stores nothing; and the CLI's `corral priority-class` and `corral submit --priority-class` against a served app."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ApiCalls
from flask.testing import FlaskClient
from sqlalchemy import func, select

from scheduler.cli.commands import main
from scheduler.live.store import Store
from scheduler.live.store.models import Job, PriorityClass
from scheduler.live.store.queries import create_token
from tests.conftest import served
from web import create_app

API = "/api/v1"
JOB = {"name": "train", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 600}


class Env(ApiCalls):
    def __init__(self, store: Store) -> None:
        self.store = store
        with store.session() as s:
            self.tokens = {"root": create_token(s, "root", admin=True), "alice": create_token(s, "alice")}
        self.app = create_app(store, notify=lambda: None)
        self.client: FlaskClient = self.app.test_client()
        # alice may rank as high as the classes below, and be non-preemptible (the built-in ceiling is 0: see
        # tests/test_priority_ceilings.py).
        self.ok("PATCH", "/users/alice/limits", {"max_priority": 1000, "allow_nonpreemptible": True})

    def jobs(self) -> int:
        with self.store.session() as s:
            return int(s.scalar(select(func.count()).select_from(Job)) or 0)


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    return Env(store)


def test_admins_define_classes_and_jobs_copy_them(env: Env) -> None:
    made = env.ok("POST", "/priority-classes", {"name": "serving", "value": 1000, "preemptible": False,
                                               "description": "inference services"}, status=201)
    assert made["name"] == "serving" and made["created_by"] == "root" and made["preemptible"] is False
    env.ok("POST", "/priority-classes", {"name": "batch", "value": -10}, status=201)
    listed = env.ok("GET", "/priority-classes", who="alice")["priority_classes"]
    assert [(c["name"], c["value"], c["preemptible"]) for c in listed] == [("serving", 1000, False),
                                                                          ("batch", -10, True)]
    job = env.ok("POST", "/jobs", JOB | {"priority_class": "serving"}, who="alice", status=201)
    assert (job["priority"], job["preemptible"], job["priority_class"]) == (1000, False, "serving")
    plain = env.ok("POST", "/jobs", JOB | {"priority": 7, "preemptible": False}, who="alice", status=201)
    assert (plain["priority"], plain["preemptible"], plain["priority_class"]) == (7, False, None)
    default = env.ok("POST", "/jobs", JOB, who="alice", status=201)
    assert (default["priority"], default["preemptible"]) == (0, True)
    # A class deleted later: the job keeps what it copied; a new job can no longer name it.
    env.ok("DELETE", "/priority-classes/serving")
    assert env.ok("GET", f"/jobs/{job['id']}", who="alice")["priority"] == 1000
    resp = env.call("POST", "/jobs", JOB | {"priority_class": "serving"}, who="alice")
    assert resp.status_code == 422 and "no priority class 'serving' (known: batch)" in resp.json["message"]


def test_bad_input_is_refused_by_name_and_stores_nothing(env: Env) -> None:
    env.ok("POST", "/priority-classes", {"name": "high", "value": 100}, status=201)
    before = env.jobs()
    cases = [
        (JOB | {"priority_class": "high", "priority": 3}, "priority"),
        (JOB | {"priority_class": "high", "preemptible": True}, "preemptible"),
        (JOB | {"priority_class": "nope"}, "priority_class"),
        (JOB | {"preemptible": "no"}, "preemptible"),
        (JOB | {"priority": 10**9}, "priority"),
    ]
    for body, field in cases:
        resp = env.call("POST", "/jobs", body, who="alice")
        assert resp.status_code == 422, (body, resp.json)
        assert field in resp.json["errors"]["json"], (field, resp.json)
    assert env.jobs() == before
    # Classes: admins only (403 before the body is read), names by the naming rule, no duplicates.
    assert env.call("POST", "/priority-classes", {"name": "mine", "value": 1}, who="alice").status_code == 403
    assert env.call("DELETE", "/priority-classes/high", who="alice").status_code == 403
    assert env.call("POST", "/priority-classes", {"name": "-x", "value": 1}).status_code == 422
    assert env.call("POST", "/priority-classes", {"name": "ok", "value": "1"}).status_code == 422
    assert env.call("POST", "/priority-classes", {"name": "high", "value": 5}).status_code == 409
    assert env.call("DELETE", "/priority-classes/none").status_code == 404
    with env.store.session() as s:
        assert [c.name for c in s.scalars(select(PriorityClass))] == ["high"]


def test_resubmission_keeps_the_class_or_the_figures(env: Env) -> None:
    env.ok("POST", "/priority-classes", {"name": "high", "value": 100, "preemptible": False}, status=201)
    classed = env.ok("POST", "/jobs", JOB | {"priority_class": "high"}, who="alice", status=201)
    again = env.ok("POST", f"/jobs/{classed['id']}/resubmit", {}, who="alice", status=201)
    assert (again["priority"], again["preemptible"], again["priority_class"]) == (100, False, "high")
    lowered = env.ok("POST", f"/jobs/{classed['id']}/resubmit", {"priority": 1}, who="alice", status=201)
    assert (lowered["priority"], lowered["preemptible"], lowered["priority_class"]) == (1, True, None)
    plain = env.ok("POST", "/jobs", JOB | {"priority": 4, "preemptible": False}, who="alice", status=201)
    moved = env.ok("POST", f"/jobs/{plain['id']}/resubmit", {"priority_class": "high"}, who="alice", status=201)
    assert (moved["priority"], moved["priority_class"]) == (100, "high")


def test_the_cli_manages_classes_and_submits_with_one(env: Env) -> None:
    runner = CliRunner()
    with served(env.app) as url:
        def corral(*args: str, who: str = "root") -> str:
            result = runner.invoke(main, [*args, "--url", url, "--token", env.tokens[who]])
            assert result.exit_code == 0, result.output
            return result.output

        assert "created priority class urgent: value 50, not preemptible" in corral(
            "priority-class", "create", "urgent", "--value", "50", "--preemptible", "false")
        assert "urgent" in corral("priority-class", "list", who="alice")
        out = corral("submit", "--name", "x", "--model", "ResNet-50-bs64", "--gpus", "1", "--duration", "60",
                     "--priority-class", "urgent", who="alice")
        job_id = out.split()[2]
        assert "50 (class urgent, not preemptible)" in corral("show", job_id, who="alice")
        corral("submit", "--name", "y", "--model", "ResNet-50-bs64", "--gpus", "1", "--duration", "60",
               "--not-preemptible", "--priority", "3", who="alice")
        assert "deleted priority class urgent" in corral("priority-class", "delete", "urgent")
        refused = runner.invoke(main, ["priority-class", "create", "again", "--value", "1", "--url", url,
                                       "--token", env.tokens["alice"]])
        assert refused.exit_code != 0 and "admin" in refused.output

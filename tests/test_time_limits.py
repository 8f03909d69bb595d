"""Time limits in the live service, on SQLite and PostgreSQL (the `store` fixture): the cluster's default and maximum
(admins set them, the API applies them at submission, refusing too long a limit by name with nothing stored), and the
controller stopping a run that reaches its limit: its workers stopped, the job `timed_out` with the reason, an event.
The controller runs without Ray (`StartingBackend`: workers are up at the next poll and run until stopped); a real
Ray cluster runs it in tests/test_live_lifecycle.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import StartingBackend, served, wait_until
from sqlalchemy import func, select

from policies.heuristics import Fifo
from scheduler.cli.commands import main
from scheduler.core.reservations import ReservationRule
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.store import JobState, Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.queries import create_token
from web import create_app

API = "/api/v1"
JOB = {"name": "train", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 600}


class Env:
    def __init__(self, store: Store) -> None:
        self.store = store
        with store.session() as s:
            self.tokens = {"root": create_token(s, "root", admin=True), "alice": create_token(s, "alice")}
        self.app = create_app(store, notify=lambda: None)
        self.client = self.app.test_client()

    def call(self, method: str, path: str, body: Any = None, who: str = "root") -> Any:
        return self.client.open(API + path, method=method, json=body,
                                headers={"Authorization": f"Bearer {self.tokens[who]}"})

    def ok(self, method: str, path: str, body: Any = None, who: str = "root", status: int = 200) -> Any:
        resp = self.call(method, path, body, who)
        assert resp.status_code == status, resp.json
        return resp.json


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    return Env(store)


def test_the_cluster_default_and_maximum_apply_at_submission(env: Env) -> None:
    assert env.ok("GET", "/time-limits", who="alice") == {"default_s": None, "max_s": None}
    assert env.ok("POST", "/jobs", JOB, who="alice", status=201)["time_limit_s"] is None
    assert env.ok("PATCH", "/time-limits", {"default_s": 3600, "max_s": 86400}) == {"default_s": 3600.0,
                                                                                     "max_s": 86400.0}
    assert env.ok("POST", "/jobs", JOB, who="alice", status=201)["time_limit_s"] == 3600.0
    assert env.ok("POST", "/jobs", JOB | {"time_limit_s": 7200}, who="alice", status=201)["time_limit_s"] == 7200.0
    with env.store.session() as s:
        before = s.scalar(select(func.count()).select_from(JobRow))
    resp = env.call("POST", "/jobs", JOB | {"time_limit_s": 90000}, who="alice")
    assert resp.status_code == 422
    assert "more than the cluster's maximum time limit, 86400 s" in resp.json["errors"]["json"]["time_limit_s"][0]
    assert env.call("POST", "/jobs", JOB | {"time_limit_s": 0}, who="alice").status_code == 422
    with env.store.session() as s:
        assert s.scalar(select(func.count()).select_from(JobRow)) == before
    # Only admins change them; the default may not exceed the maximum; null clears one.
    assert env.call("PATCH", "/time-limits", {"max_s": 10}, who="alice").status_code == 403
    bad = env.call("PATCH", "/time-limits", {"max_s": 60})
    assert bad.status_code == 422 and "max_s" in bad.json["errors"]["json"]
    assert env.call("PATCH", "/time-limits", {}).status_code == 422
    assert env.ok("PATCH", "/time-limits", {"default_s": None}) == {"default_s": None, "max_s": 86400.0}
    assert env.ok("POST", "/jobs", JOB, who="alice", status=201)["time_limit_s"] is None


def test_the_cli_shows_and_sets_time_limits(env: Env) -> None:
    runner = CliRunner()
    with served(env.app) as url:
        def corral(*args: str, who: str = "root") -> str:
            result = runner.invoke(main, [*args, "--url", url, "--token", env.tokens[who]])
            assert result.exit_code == 0, result.output
            return result.output

        assert "default time limit 600 s, maximum none" in corral("time-limits", "--default", "600")
        assert "default time limit 600 s, maximum 3600 s" in corral("time-limits", "--max", "3600", who="root")
        assert "default time limit 600 s" in corral("time-limits", who="alice")
        out = corral("submit", "--name", "x", "--model", "ResNet-50-bs64", "--gpus", "1", "--duration", "60",
                     "--time-limit", "120", who="alice")
        assert "time limit         120 s" in corral("show", out.split()[2], who="alice")


def controller(store: Store, backend: StartingBackend, **kw: Any) -> Controller:
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [4]), ["n0"], lambda name: Fifo(),
                     default_policy="fifo", tick_s=0.05, preset="dgx-a100", **kw)
    ctl.recover()
    return ctl


def submit(store: Store, **fields: Any) -> int:
    with store.session(write=True) as s:
        user = q.ensure_user(s, "ann")
        return q.submit(s, user, {"name": "j", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1,
                                  "duration_s": 600.0, **fields})[0].id


def job(store: Store, job_id: int) -> JobRow:
    with store.session() as s:
        r = s.get(JobRow, job_id)
        assert r is not None
        _ = r.events
        return r


def step(ctl: Controller) -> None:
    ctl._last_poll = 0.0
    ctl.step()


def test_a_run_that_reaches_its_limit_is_stopped_and_times_out(store: Store) -> None:
    backend = StartingBackend(["n0"], 4)
    ctl = controller(store, backend)
    limited = submit(store, time_limit_s=1.0)
    free = submit(store)
    wait_until("both to start", lambda: (step(ctl), job(store, limited).started_at and job(store, free).started_at)[1],
               timeout=10, every=0.05)
    wait_until("the limited run to time out",
               lambda: (step(ctl), job(store, limited).state == JobState.TIMED_OUT)[1], timeout=10, every=0.1)
    row = job(store, limited)
    assert row.error is not None and row.error.startswith("time limit of 1 s reached")
    assert "SIGTERM, then SIGKILL" in row.error and row.finished_at is not None
    assert [e.kind for e in row.events][-1] == "timed_out"
    assert limited in backend.stopped and limited not in backend.launches
    assert job(store, free).state == JobState.RUNNING and free not in backend.stopped


def test_the_controller_holds_gpus_for_a_reservation(store: Store) -> None:
    """With --reserve-share 1: a 4-GPU job arriving behind a running 1-GPU job holds the node; a 1-GPU job with no
    time limit, submitted after it, waits (its pending reason names the reservation) though 3 GPUs are free."""
    backend = StartingBackend(["n0"], 4)
    ctl = controller(store, backend, reservations=ReservationRule(after_s=None, share=1.0))
    first = submit(store, time_limit_s=600.0)
    wait_until("the first to start", lambda: (step(ctl), job(store, first).started_at)[1], timeout=10, every=0.05)
    big = submit(store, num_gpus=4)
    late = submit(store)
    for _ in range(3):
        step(ctl)
    assert job(store, late).state == JobState.PENDING and job(store, big).state == JobState.PENDING
    assert (job(store, big).pending_reason or "").startswith("holds a reservation for 4 GPUs on 1 node(s)")
    assert "held for j's reservation" in (job(store, late).pending_reason or "")

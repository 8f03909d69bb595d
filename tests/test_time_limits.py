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
from conftest import ApiCalls, StartingBackend, served, wait_until
from conftest import job_row as job
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


class Env(ApiCalls):
    def __init__(self, store: Store) -> None:
        self.store = store
        with store.session() as s:
            self.tokens = {"root": create_token(s, "root", admin=True), "alice": create_token(s, "alice")}
        self.app = create_app(store, notify=lambda: None)
        self.client = self.app.test_client()


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
    assert env.ok("POST", "/jobs", JOB, who="alice", status=201)["time_limit_s"] == 86400.0  # the maximum
    assert env.ok("PATCH", "/time-limits", {"max_s": None}) == {"default_s": None, "max_s": None}
    assert env.ok("POST", "/jobs", JOB, who="alice", status=201)["time_limit_s"] is None


def test_with_a_maximum_and_no_default_every_job_is_bounded(env: Env) -> None:
    """Issue 46: an admin set `max_s=3600` with no default, and a job that gave no limit was stored with none at all.
    It gets the maximum, whichever way it comes in (a submission, an array's tasks, a resubmission); and its owner
    cannot lift it past the maximum afterwards."""
    old = env.ok("POST", "/jobs", JOB, who="alice", status=201)  # from before the maximum: none
    assert old["time_limit_s"] is None
    assert env.ok("PATCH", "/time-limits", {"max_s": 3600}) == {"default_s": None, "max_s": 3600.0}
    assert env.ok("POST", "/jobs", JOB, who="alice", status=201)["time_limit_s"] == 3600.0
    tasks = env.ok("POST", "/jobs", JOB | {"array": {"count": 2}}, who="alice", status=201)
    with env.store.session() as s:
        limits = s.scalars(select(JobRow.time_limit_s).where(JobRow.array_id == tasks["array"]["id"])).all()
    assert list(limits) == [3600.0, 3600.0]
    assert env.ok("POST", f"/jobs/{old['id']}/resubmit", {}, who="alice", status=201)["time_limit_s"] == 3600.0
    # The old job has none; its owner may give it one up to the maximum, not past it (an admin may).
    resp = env.call("PATCH", f"/jobs/{old['id']}", {"time_limit_s": 7200}, who="alice")
    assert resp.status_code == 403 and "maximum time limit, 3600 s" in resp.json["message"]
    assert env.ok("PATCH", f"/jobs/{old['id']}", {"time_limit_s": 1800}, who="alice")["time_limit_s"] == 1800.0
    assert env.ok("PATCH", f"/jobs/{old['id']}", {"time_limit_s": 7200})["time_limit_s"] == 7200.0  # an admin


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
    # The controller stores each reason as data beside its words: readers (the start estimate) read the code.
    assert (job(store, big).pending_code, (job(store, big).pending_params or {}).get("gpus")) == ("reservation", 4)
    assert (job(store, late).pending_code, job(store, late).pending_params) == ("reserved_gpus", {"holder": "j"})


def test_an_admin_extends_a_running_job_and_its_owner_may_only_shorten_it(env: Env) -> None:
    """Slurm's `scontrol update TimeLimit= Priority=` (`PATCH /jobs/ID`, `corral update ID`): the controller takes the
    new limit and priority in at its next pass, for a pending job as for a running one; it holds the run to its new
    limit, and the new priority orders the queue."""
    backend = StartingBackend(["n0"], 4)
    ctl = controller(env.store, backend)
    # Not preemptible: the job given a higher priority below would preempt it otherwise (which an admin allows alice).
    env.ok("PATCH", "/users/alice/limits", {"allow_nonpreemptible": True})
    running = env.ok("POST", "/jobs", {**JOB, "num_gpus": 4, "time_limit_s": 3600, "preemptible": False},
                     who="alice", status=201)["id"]
    wait_until("the first to start", lambda: (step(ctl), job(env.store, running).started_at)[1], timeout=10,
               every=0.05)
    env.ok("POST", "/priority-classes", {"name": "batch", "value": 0}, status=201)
    first, second = (env.ok("POST", "/jobs", {**JOB, "num_gpus": 4, "time_limit_s": 3600, "priority_class": "batch"},
                            who="alice", status=201)["id"] for _ in range(2))
    raise_limit = "time_limit_s: only an admin raises a job's time limit (3600 s now); you may lower it"
    raise_priority = "priority: only an admin raises a job's priority (0 now); you may lower it"
    for change, message in (({"time_limit_s": 7200}, raise_limit), ({"time_limit_s": None}, raise_limit),
                            ({"priority": 5}, raise_priority)):
        refused = env.call("PATCH", f"/jobs/{running}", change, who="alice")
        assert (refused.status_code, refused.json["message"]) == (403, message)
    for bad in ({"time_limit_s": 0}, {"time_limit_s": "soon"}, {}, {"priority": 1.5}, {"priority": "high"},
                {"nice": 3}):
        resp = env.call("PATCH", f"/jobs/{running}", bad)
        assert resp.status_code == 422 and set(resp.json["errors"]["json"]) <= {*bad, "_schema"}, resp.json
    assert (job(env.store, running).time_limit_s, job(env.store, running).priority) == (3600.0, 0)
    with served(env.app) as url:
        def corral(*args: str) -> Any:
            return CliRunner().invoke(main, [*args, "--url", url, "--token", env.tokens["root"]])

        out = corral("update", str(running), "--time-limit", "7200")
        assert out.output == f"job {running}: time limit 7200 s (was 3600 s)\n", out.output
        out = corral("update", str(second), "--priority", "10", "--time-limit", "none")
        assert out.output == f"job {second}: time limit none (was 3600 s), priority 10 (was 0)\n", out.output
        assert corral("update", str(second)).exit_code == 2  # nothing to change
    assert env.ok("PATCH", f"/jobs/{first}", {"time_limit_s": 1800, "priority": -1}, who="alice")["priority"] == -1
    step(ctl)
    assert ctl.running[running].spec.time_limit_s == 7200.0
    assert (ctl.pending[first].spec.time_limit_s, ctl.pending[first].spec.priority) == (1800.0, -1)
    assert (ctl.pending[second].spec.time_limit_s, ctl.pending[second].spec.priority) == (None, 10)
    assert [e.message for e in job(env.store, second).events if e.kind in ("time_limit_changed", "priority_changed")] \
        == ["time limit 3600 s -> none by root", "priority 0 -> 10 by root"]
    assert (job(env.store, second).priority_class, job(env.store, first).priority_class) == (None, None)
    assert env.ok("PATCH", f"/jobs/{first}", {"time_limit_s": 900}, who="alice")["priority"] == -1
    env.ok("PATCH", f"/jobs/{running}", {"time_limit_s": 1}, who="alice")  # lower than it has run: it ends now
    wait_until("the run to time out on its new limit",
               lambda: (step(ctl), job(env.store, running).state == JobState.TIMED_OUT)[1], timeout=10, every=0.1)
    assert (job(env.store, running).error or "").startswith("time limit of 1 s reached")
    step(ctl)  # the node is free: the later job, now first by priority, starts
    assert (job(env.store, second).state, job(env.store, first).state) == ("running", "pending")
    ended = env.call("PATCH", f"/jobs/{running}", {"time_limit_s": 600})
    assert ended.status_code == 409
    assert ended.json["message"] == f"job {running} is timed_out: only a pending or running job can change"

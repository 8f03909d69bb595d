"""Retries of failed runs (`max_retries`, `retry_on`, `retry_backoff_s`): a run that exits with a listed code runs
again after a backoff that doubles, each attempt recorded with its exit code; other codes, or no retries left, fail
the job with its last reason; the backoff holds across a controller restart. The controller runs without Ray: a
backend whose runs fail with the exit code the test gives them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import StartingBackend, served, wait_until
from conftest import job_row as row

from policies.heuristics import Fifo
from scheduler.cli.commands import main
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.retries import MAX_BACKOFF_S, retry_delay
from scheduler.live.runs import JobStatus
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from web import create_app

NAMES = ["n0"]


class Failing(StartingBackend):
    """Every run's workers start, then exit with `codes[job]` (default 1) at the poll after."""

    def __init__(self) -> None:
        super().__init__(NAMES, 2)
        self.codes: dict[int, int] = {}
        self.seen: set[tuple[int, int]] = set()

    def poll(self) -> list[JobStatus]:
        out = []
        for st in super().poll():
            key = (st.job_id, st.attempt)
            if key in self.seen:
                code = self.codes.get(st.job_id, 1)
                st = JobStatus(job_id=st.job_id, attempt=st.attempt, phase="failed", started_at=st.started_at,
                               ended_at=[time.time()] * len(st.started_at), exit_codes=[code] * len(st.started_at),
                               done_s=0.0, error="")
            self.seen.add(key)
            out.append(st)
        return out


def controller(store: Store, backend: Failing) -> Controller:
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [2]), NAMES, lambda name: Fifo(),
                     default_policy="fifo", tick_s=0.05, preset="dgx-a100")
    ctl.recover()
    return ctl


def submit(store: Store, **fields: Any) -> int:
    with store.session(write=True) as s:
        user = q.ensure_user(s, "ann")
        return q.submit(s, user, {"name": "j", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1,
                                  "duration_s": 600.0, **fields})[0].id


def step(ctl: Controller) -> None:
    ctl._last_poll = 0.0  # poll every pass
    ctl.step()


def test_the_backoff_doubles_is_capped_and_only_listed_codes_retry() -> None:
    assert [retry_delay(3, used, None, 10.0, 1) for used in range(4)] == [10.0, 20.0, 40.0, None]
    assert retry_delay(2, 0, [3, 137], 5.0, 137) == 5.0 and retry_delay(2, 0, [3, 137], 5.0, 1) is None
    assert retry_delay(100, 60, None, 30.0, 1) == MAX_BACKOFF_S
    assert retry_delay(0, 0, None, 30.0, 1) is None  # the default: no retries


@pytest.mark.slow
def test_a_listed_exit_code_runs_again_after_a_doubling_backoff_then_fails_with_its_last_reason(
        store: Store, corral_home: Path) -> None:
    backend = Failing()
    ctl = controller(store, backend)
    job_id = submit(store, max_retries=2, retry_on=[3], retry_backoff_s=1.0)
    backend.codes[job_id] = 3
    step(ctl)  # placed: attempt 1
    step(ctl)  # its workers start
    step(ctl)  # and exit 3: held for 1 s
    r = row(store, job_id)
    assert (r.state, r.retries, r.attempt, r.exit_code) == ("pending", 1, 1, 3)
    assert r.not_before is not None and r.pending_reason == "exit code 3: retry 1 of 2 in 1 s"
    held_until = r.not_before
    step(ctl)
    assert row(store, job_id).attempt == 1  # a pass within its backoff does not place it
    wait_until("the second run", lambda: (step(ctl), row(store, job_id).attempt == 2)[1], timeout=20, every=0.05)
    assert time.time() >= held_until and row(store, job_id).not_before is None  # placed: no longer held
    wait_until("the last run", lambda: (step(ctl), row(store, job_id).attempt == 3)[1], timeout=20, every=0.05)
    wait_until("the job to fail", lambda: (step(ctl), row(store, job_id).state == "failed")[1], timeout=20,
               every=0.05)
    r = row(store, job_id)
    assert (r.retries, r.attempt, r.exit_code, r.error) == (2, 3, 3, "exit code 3 (after 2 retries)")
    retrying = [e for e in r.events if e.kind == "retrying"]
    assert [(e.data["attempt"], e.data["exit_code"]) for e in retrying] == [(1, 3), (2, 3)]
    assert [e.message for e in retrying] == ["exit code 3: retry 1 of 2 in 1 s", "exit code 3: retry 2 of 2 in 2 s"]
    assert [e.data["attempt"] for e in r.events if e.kind == "failed"] == [3]


def test_an_unlisted_code_fails_at_once(store: Store, corral_home: Path) -> None:
    backend = Failing()
    ctl = controller(store, backend)
    job_id = submit(store, max_retries=5, retry_on=[3])
    backend.codes[job_id] = 2
    for _ in range(3):
        step(ctl)
    r = row(store, job_id)
    assert (r.state, r.retries, r.error) == ("failed", 0, "exit code 2")


def test_a_restarted_controller_keeps_the_backoff(store: Store, corral_home: Path) -> None:
    backend = Failing()
    ctl = controller(store, backend)
    job_id = submit(store, max_retries=1, retry_backoff_s=3600.0)
    for _ in range(3):
        step(ctl)
    assert row(store, job_id).state == "pending"
    again = controller(store, Failing())  # a new controller on the same store, as after a restart
    for _ in range(3):
        step(again)
    r = row(store, job_id)
    assert (r.state, r.attempt) == ("pending", 1)
    assert r.pending_reason == "exit code 1: retry 1 of 1 in 3600 s"


@pytest.mark.parametrize(("retry_on", "problem"), [
    ("sometimes", "retry_on"), ([0], "retry_on"), ([256], "retry_on"), (list(range(1, 40)), "retry_on"),
    ([True], "retry_on")])
def test_a_bad_retry_field_is_refused_naming_it(retry_on: Any, problem: str) -> None:
    from marshmallow import ValidationError

    from web.schemas.jobs import JobSubmitSchema

    with pytest.raises(ValidationError) as bad:
        JobSubmitSchema().load({"name": "j", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 10,
                                "retry_on": retry_on})
    assert problem in bad.value.messages
    loaded = JobSubmitSchema().load({"name": "j", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 10,
                                     "retry_on": [137, 3, 3], "max_retries": 2})
    assert loaded["retry_on"] == [3, 137] and loaded["max_retries"] == 2 and loaded["retry_backoff_s"] == 30.0
    with pytest.raises(ValidationError) as negative:
        JobSubmitSchema().load({"name": "j", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 10,
                                "retry_backoff_s": -1})
    assert "retry_backoff_s" in negative.value.messages


def test_corral_submit_takes_the_retry_flags_and_show_prints_them(corral_home: Path) -> None:
    store = Store.open()
    with store.session(write=True) as s:
        token = q.create_token(s, "ann")
    with served(create_app(store)) as url:
        env = {"CORRAL_URL": url, "CORRAL_TOKEN": token}
        args = ["submit", "--name", "r", "--model", "ResNet-50-bs64", "--gpus", "1", "--duration", "60",
                "--max-retries", "2", "--retry-on", "137,3", "--retry-backoff", "5", "--json"]
        result = CliRunner().invoke(main, args, env=env)
        assert result.exit_code == 0, result.output
        job = json.loads(result.stdout)
        assert (job["max_retries"], job["retry_on"], job["retry_backoff_s"], job["retries"]) == (2, [3, 137], 5.0, 0)
        shown = CliRunner().invoke(main, ["show", str(job["id"])], env=env)
        assert "0/2 on exit code 3, 137, backoff 5 s" in shown.stdout
        bad = CliRunner().invoke(main, [*args[:-5], "--retry-on", "often"], env=env)
        assert bad.exit_code == 2 and "--retry-on" in bad.output and "give any, or exit codes" in bad.output
    store.close()


def test_resubmit_copies_the_job_with_changes_as_the_callers_and_checks_them(corral_home: Path) -> None:
    store = Store.open()
    with store.session(write=True) as s:
        ann, bob = q.create_token(s, "ann"), q.create_token(s, "bob")
        admin = q.create_token(s, "root", admin=True)
    with served(create_app(store)) as url:
        def cli(token: str, *args: str) -> Any:
            return CliRunner().invoke(main, list(args), env={"CORRAL_URL": url, "CORRAL_TOKEN": token})

        assert cli(admin, "user", "limits", "ann", "--max-priority", "5").exit_code == 0  # the built-in ceiling is 0
        first = json.loads(cli(ann, "submit", "--name", "sweep", "--model", "ResNet-50-bs64", "--gpus", "1",
                               "--duration", "60", "--max-retries", "2", "--retry-on", "3", "--client-token", "k1",
                               "--priority", "5", "--json").stdout)
        again = cli(ann, "resubmit", str(first["id"]), "--with-changes", '{"num_gpus": 2, "name": "sweep-2"}',
                    "--json")
        assert again.exit_code == 0, again.output
        new = json.loads(again.stdout)
        assert new["id"] != first["id"] and (new["name"], new["num_gpus"], new["user"]) == ("sweep-2", 2, "ann")
        assert (new["priority"], new["max_retries"], new["retry_on"], new["client_token"]) == (5, 2, [3], None)
        shown = json.loads(cli(ann, "show", str(first["id"]), "--json").stdout)
        assert any(e["kind"] == "resubmitted" and f"as job {new['id']} by ann" in e["message"]
                   for e in shown["events"])
        bad = cli(ann, "resubmit", str(first["id"]), "--with-changes", '{"num_gpus": 1.5, "colour": "red"}')
        assert bad.exit_code != 0 and "colour" in bad.output
        worse = cli(ann, "resubmit", str(first["id"]), "--with-changes", '{"num_gpus": 1.5}')
        assert worse.exit_code != 0 and "num_gpus" in worse.output
        assert cli(bob, "resubmit", str(first["id"])).exit_code != 0  # not bob's job
        by_admin = json.loads(cli(admin, "resubmit", str(first["id"]), "--json").stdout)
        assert by_admin["user"] == "root"  # the admin's own job, under the admin's name
        with store.session() as s:
            assert q.list_jobs(s)[1] == 3  # the refused ones stored nothing
    store.close()

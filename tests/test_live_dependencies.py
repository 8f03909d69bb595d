"""Dependencies and job arrays in the live service, on SQLite and PostgreSQL (the `store` fixture): what the API
takes and refuses (by name, storing nothing), the array endpoints, and the controller offering a job only once its
dependencies hold, cancelling one whose never will, and running at most `max_running` tasks of an array, each with
its CORRAL_ARRAY_INDEX. The controller runs without Ray: runs end as the test says (`Outcomes`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import StartingBackend, served, wait_until
from sqlalchemy import func, select

from policies.heuristics import Fifo
from scheduler.cli.commands import main
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.runs import JobStatus
from scheduler.live.store import JobState, Store
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.queries import create_token
from web import create_app

API = "/api/v1"
JOB = {"name": "step", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 600}


class Outcomes(StartingBackend):
    """Runs start at the next poll; a run of a job in `ending` ends at the poll after, failing if in `failing`."""

    def __init__(self) -> None:
        super().__init__(["n0"], 4)
        self.ending: set[int] = set()
        self.failing: set[int] = set()
        self.seen: set[tuple[int, int]] = set()
        self.most_running = 0

    def poll(self) -> list[JobStatus]:
        out = []
        self.most_running = max(self.most_running, len(self.launches))
        for st in super().poll():
            key = (st.job_id, st.attempt)
            if key in self.seen and st.job_id in self.ending:
                failed = st.job_id in self.failing
                st = JobStatus(job_id=st.job_id, attempt=st.attempt, phase="failed" if failed else "succeeded",
                               started_at=st.started_at, ended_at=[time.time()] * len(st.started_at),
                               exit_codes=[1 if failed else 0] * len(st.started_at), done_s=600.0, error="")
            self.seen.add(key)
            out.append(st)
        return out


class Site:
    def __init__(self, store: Store) -> None:
        self.store = store
        with store.session() as s:
            self.tokens = {"root": create_token(s, "root", admin=True), "ann": create_token(s, "ann"),
                           "bob": create_token(s, "bob")}
        self.app = create_app(store, notify=lambda: None)
        self.client = self.app.test_client()
        self.backend = Outcomes()
        self.ctl = Controller(store, self.backend, build_live_cluster("dgx-a100", [4]), ["n0"], lambda name: Fifo(),
                              default_policy="fifo", tick_s=0.05, preset="dgx-a100")
        self.ctl.recover()

    def call(self, method: str, path: str, body: Any = None, who: str = "ann") -> Any:
        return self.client.open(API + path, method=method, json=body,
                                headers={"Authorization": f"Bearer {self.tokens[who]}"})

    def ok(self, method: str, path: str, body: Any = None, who: str = "ann", status: int = 200) -> Any:
        resp = self.call(method, path, body, who)
        assert resp.status_code == status, resp.json
        return resp.json

    def submit(self, who: str = "ann", **fields: Any) -> int:
        return int(self.ok("POST", "/jobs", JOB | fields, who, status=201)["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self.ok("GET", f"/jobs/{job_id}", who="root"))

    def step(self) -> None:
        self.ctl._last_poll = 0.0
        self.ctl.step()

    def until(self, what: str, pred: Any, timeout: float = 15.0) -> Any:
        return wait_until(what, lambda: (self.step(), pred())[1], timeout=timeout, every=0.05)

    def jobs(self) -> int:
        with self.store.session() as s:
            return int(s.scalar(select(func.count()).select_from(JobRow)) or 0)


@pytest.fixture
def site(store: Store, corral_home: Path) -> Site:
    return Site(store)


def test_bad_dependencies_and_arrays_are_refused_by_name(site: Site) -> None:
    mine = site.submit()
    theirs = site.submit(who="bob")
    before = site.jobs()
    cases = [
        ({"depends_on": [{"job": 99999}]}, "depends_on"),
        ({"depends_on": [{"job": theirs}]}, "depends_on"),  # another user's job reads as missing
        ({"depends_on": [{"job": mine, "condition": "after"}]}, "depends_on"),
        ({"array": {"count": 0}}, "array"),
        ({"array": {"count": 1001}}, "array"),
        ({"array": {"count": 3, "max_running": 0}}, "array"),
        ({"array": {"count": 3}, "webhook": "http://127.0.0.1:9/x"}, "webhook"),
    ]
    for extra, field in cases:
        resp = site.call("POST", "/jobs", JOB | extra)
        assert resp.status_code == 422, (extra, resp.json)
        assert field in resp.json["errors"]["json"], (extra, resp.json)
    assert site.jobs() == before
    # An admin may depend on anyone's job.
    assert site.submit(who="root", depends_on=[{"job": theirs, "condition": "afterany"}])


def test_a_pipeline_runs_in_order_and_a_branch_that_can_never_run_is_cancelled(site: Site) -> None:
    prep = site.submit(name="prep")
    train = site.submit(name="train", depends_on=[{"job": prep}])
    on_fail = site.submit(name="on-fail", depends_on=[{"job": prep, "condition": "afternotok"}])
    site.until("prep to run", lambda: site.job(prep)["state"] == JobState.RUNNING)
    site.step()
    detail = site.job(train)
    assert detail["state"] == JobState.PENDING and detail["pending_reason"] == f"waiting for job {prep} to succeed"
    assert detail["dependencies"] == [{"job": prep, "condition": "afterok", "name": "prep", "state": "running",
                                       "met": None}]
    site.backend.ending.add(prep)
    site.until("train to run", lambda: site.job(train)["state"] == JobState.RUNNING)
    cancelled = site.job(on_fail)
    assert cancelled["state"] == JobState.CANCELLED
    assert cancelled["error"] == f"its dependency can never be met: it runs afternotok job {prep}, which succeeded"
    assert site.job(train)["dependencies"][0]["met"] is True
    assert cancelled["dependencies"][0]["met"] is False


def test_cancelling_the_root_of_a_long_chain_cancels_the_whole_chain_in_one_pass(site: Site) -> None:
    """Found by a probe: cancelling the root of a 300-job chain cancelled one level a pass (70 still pending after
    120 s). Each pending job that can never run now takes its own dependents with it in the same pass."""
    root = site.submit(name="root", num_gpus=4)
    site.until("the root to run", lambda: site.job(root)["state"] == JobState.RUNNING)
    chain = [root]
    for i in range(40):
        chain.append(site.submit(name=f"link-{i}", depends_on=[{"job": chain[-1]}]))
    side = site.submit(name="side", depends_on=[{"job": chain[5], "condition": "afterany"}])
    site.step()
    assert site.ok("POST", f"/jobs/{root}/cancel")["state"] in (JobState.RUNNING, JobState.CANCELLED)
    site.step()  # one pass: the cancel of the running root takes effect, and the chain ends with it
    with site.store.session() as s:
        states = dict(s.execute(select(JobRow.id, JobRow.state).where(JobRow.id.in_([*chain, side]))).all())
    assert {states[i] for i in chain} == {JobState.CANCELLED}
    # afterany of a cancelled job: met in the same pass, so it starts on the root's GPUs at once
    assert states[side] == JobState.RUNNING
    assert site.job(chain[-1])["error"] == ("its dependency can never be met: it runs afterok job "
                                            f"{chain[-2]}, which ended without succeeding")


def test_an_array_runs_at_most_max_running_tasks_with_their_index(site: Site) -> None:
    body = site.ok("POST", "/jobs", JOB | {"name": "sweep", "array": {"count": 5, "max_running": 2}}, status=201)
    array = body["array"]
    assert array["count"] == 5 and array["max_running"] == 2 and array["states"] == {"pending": 5}
    ids = [t["id"] for t in array["tasks"]]
    assert [t["index"] for t in array["tasks"]] == [0, 1, 2, 3, 4] and body["id"] == ids[0]
    site.until("two tasks to run", lambda: site.ok("GET", f"/arrays/{array['id']}")["states"].get("running") == 2)
    for _ in range(3):
        site.step()
    assert site.ok("GET", f"/arrays/{array['id']}")["states"] == {"running": 2, "pending": 3}
    waiting = site.job(ids[4])
    assert waiting["pending_reason"] == f"array {array['id']} runs 2 tasks at once, its maximum"
    assert {launch.env["CORRAL_ARRAY_INDEX"] for launch in site.backend.launches.values()} == {"0", "1"}
    site.backend.ending.update(ids)
    site.until("every task to finish",
               lambda: site.ok("GET", f"/arrays/{array['id']}")["states"] == {"succeeded": 5})
    assert site.backend.most_running == 2
    # Only its owner and admins see it.
    assert site.call("GET", f"/arrays/{array['id']}", who="bob").status_code == 403
    assert site.job(ids[2])["array"]["id"] == array["id"]


def test_cancelling_the_array_cancels_its_tasks(site: Site) -> None:
    body = site.ok("POST", "/jobs", JOB | {"name": "sweep", "array": {"count": 4, "max_running": 1}}, status=201)
    array_id = body["array"]["id"]
    site.until("one task to run", lambda: site.ok("GET", f"/arrays/{array_id}")["states"].get("running") == 1)
    assert site.call("POST", f"/arrays/{array_id}/cancel", who="bob").status_code == 403
    after = site.ok("POST", f"/arrays/{array_id}/cancel")
    assert after["states"] == {"running": 1, "cancelled": 3}
    site.until("the running task to be stopped",
               lambda: site.ok("GET", f"/arrays/{array_id}")["states"] == {"cancelled": 4})
    assert site.call("GET", "/arrays/99999").status_code == 404


def test_the_cli_submits_with_dependencies_and_arrays(site: Site) -> None:
    runner = CliRunner()
    base = ["--model", "ResNet-50-bs64", "--gpus", "1", "--duration", "60"]
    with served(site.app) as url:
        def corral(*args: str) -> str:
            result = runner.invoke(main, [*args, "--url", url, "--token", site.tokens["ann"]])
            assert result.exit_code == 0, result.output
            return result.output

        first = int(corral("submit", "--name", "prep", *base).split()[2])
        out = corral("submit", "--name", "train", *base, "--depends-on", f"afterok:{first},afterany:{first}")
        train = int(out.split()[2])
        assert f"afterok {first} (prep, pending); afterany {first} (prep, pending)" in corral("show", str(train))
        made = corral("submit", "--name", "sweep", *base, "--array", "0-3%2")
        assert made.startswith("submitted array ") and "4 tasks, at most 2 running: 4 pending" in made
        array_id = made.split()[2].rstrip(":")
        assert "task 3" in corral("array", "show", array_id)
        assert "4 cancelled" in corral("array", "cancel", array_id)
        bad = runner.invoke(main, ["submit", "--name", "x", *base, "--depends-on", "afterok:prep", "--url", url,
                                   "--token", site.tokens["ann"]])
        assert bad.exit_code != 0 and "jobs are named by their ids" in bad.output
        bad = runner.invoke(main, ["submit", "--name", "x", *base, "--array", "1-4", "--url", url])
        assert bad.exit_code != 0 and "indices start at 0" in bad.output


def test_an_array_counts_every_task_against_the_pending_limit(site: Site) -> None:
    """With at most 4 pending jobs, an array of 5 is refused (429) and stores nothing; one of 4 is taken, and then a
    single job more is refused."""
    site.ok("PATCH", "/users/ann/limits", {"max_pending": 4}, who="root")
    before = site.jobs()
    resp = site.call("POST", "/jobs", JOB | {"array": {"count": 5}})
    assert resp.status_code == 429 and "max_pending" in resp.json["message"], resp.json
    assert site.jobs() == before
    site.ok("POST", "/jobs", JOB | {"array": {"count": 4}}, status=201)
    assert site.call("POST", "/jobs", JOB).status_code == 429
    assert site.jobs() == before + 4

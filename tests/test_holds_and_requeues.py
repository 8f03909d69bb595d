"""Holds (Slurm's `scontrol hold` and `release`, Kueue's inactive workloads): a pending job its owner or an admin holds
keeps its place in the queue but does not start until released; the jobs behind it start meanwhile. The start
estimates and what-if leave it out, an admin's hold only an admin releases, and a hold that lands while the
controller places the job wins. Requeues (`scontrol requeue`, `requeuehold`): a running job checkpointed and put back
in its place, spending no restart, held if asked. The controller runs without Ray (a backend whose runs start at the
next poll), its store on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner
from conftest import StartingBackend, served
from conftest import job_row as row

from policies.heuristics import Fifo
from scheduler.cli.commands import main
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job as JobRow
from scheduler.live.whatif import snapshot
from web import create_app

API = "/api/v1"


class Api:
    """The API as ann (who submits), bob (another user) and root (an admin)."""

    def __init__(self, store: Store) -> None:
        with store.session(write=True) as s:
            self.tokens = {name: q.create_token(s, name, admin=name == "root") for name in ("ann", "bob", "root")}
        self.http = create_app(store).test_client()

    def post(self, path: str, who: str = "ann", **kw: Any) -> Any:
        return self.http.post(f"{API}{path}", headers={"Authorization": f"Bearer {self.tokens[who]}"}, **kw)

    def get(self, path: str, who: str = "ann") -> Any:
        return self.http.get(f"{API}{path}", headers={"Authorization": f"Bearer {self.tokens[who]}"})

    def submit(self, name: str) -> int:
        resp = self.post("/jobs", json={"name": name, "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 600})
        assert resp.status_code == 201, resp.json
        return int(resp.json["id"])


def controller(store: Store) -> tuple[Controller, StartingBackend]:
    backend = StartingBackend(["n0"], 2)
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [2]), ["n0"], lambda name: Fifo(),
                     default_policy="fifo", tick_s=0.05, preset="dgx-a100")
    ctl.recover()
    return ctl, backend


def test_a_held_job_keeps_its_place_and_starts_only_once_released(store: Store, corral_home: Path) -> None:
    api = Api(store)
    ctl, backend = controller(store)
    first, second, third = (api.submit(n) for n in ("first", "second", "third"))
    held = api.post(f"/jobs/{first}/hold")
    assert held.status_code == 200, held.json
    reason = f"held by ann: it starts only once released (`corral release {first}`)"
    assert (held.json["state"], held.json["held_by"], held.json["pending_reason"]) == ("pending", "ann", reason)
    assert held.json["queue_position"] is None and held.json["start_estimate_s"] is None
    ctl.step()
    ctl.step()
    # The jobs behind it take the node's two GPUs; it waits, saying who holds it.
    assert {j: row(store, j).state for j in (first, second, third)} == {first: "pending", second: "running",
                                                                         third: "running"}
    assert row(store, first).pending_reason == reason and first not in backend.launches
    assert [j.id for j in snapshot(store).pending] == []  # what-if leaves it out
    assert api.post(f"/jobs/{second}/cancel").status_code == 200
    for _ in range(2):
        ctl.step()
    assert row(store, first).state == "pending" and first not in backend.launches  # a GPU free, still held
    released = api.post(f"/jobs/{first}/release")
    assert released.status_code == 200 and released.json["held_at"] is None
    ctl.step()
    r = row(store, first)
    assert r.state == "running" and r.held_at is None and first in backend.launches
    assert [(e.kind, e.message) for e in r.events if e.kind in ("held", "released")] == [
        ("held", "held by ann"), ("released", "released by ann: it may start")]


def test_only_a_pending_job_is_held_and_an_admin_s_hold_only_an_admin_releases(store: Store,
                                                                            corral_home: Path) -> None:
    api = Api(store)
    ctl, _ = controller(store)
    job, running = api.submit("j"), api.submit("r")
    assert api.post(f"/jobs/{job}/hold", who="bob").status_code == 403  # not bob's
    assert api.post("/jobs/999/hold").status_code == 404
    assert api.post(f"/jobs/{job}/hold", who="root").status_code == 200
    again = api.post(f"/jobs/{job}/hold")  # held already: nothing changes, root still holds it
    assert again.status_code == 200 and again.json["held_by"] == "root"
    refused = api.post(f"/jobs/{job}/release")
    assert refused.status_code == 403
    assert refused.json["message"] == f"job {job} is held by root: only they or an admin may release it"
    assert row(store, job).held_by == "root"
    assert api.post(f"/jobs/{job}/release", who="root").status_code == 200
    events = len(row(store, job).events)
    # Not held: a 409 naming it, never an answer that reads as if the release let it start (issue 46).
    unheld = api.post(f"/jobs/{job}/release")
    assert unheld.status_code == 409
    assert unheld.json["message"] == f"job {job} is not held (it is pending): there is nothing to release"
    assert len(row(store, job).events) == events
    ctl.step()
    assert row(store, running).state == "running"
    busy = api.post(f"/jobs/{running}/hold")
    assert busy.status_code == 409
    assert busy.json["message"] == (f"job {running} is running: only a pending job can be held (`corral cancel` "
                                    "stops a running one)")
    assert row(store, running).held_at is None
    held = api.post(f"/jobs/{api.submit('k')}/hold")
    cancelled = api.post(f"/jobs/{held.json['id']}/cancel")
    assert cancelled.json["state"] == "cancelled" and cancelled.json["held_at"] is None
    ended = held.json["id"]
    late = api.post(f"/jobs/{ended}/hold"), api.post(f"/jobs/{ended}/release")
    assert [r.status_code for r in late] == [409, 409]
    assert late[0].json["message"] == f"job {ended} is cancelled: only a pending job can be held"
    assert late[1].json["message"] == f"job {ended} is not held (it is cancelled): there is nothing to release"


def test_a_hold_that_lands_while_the_controller_places_the_job_wins(store: Store, corral_home: Path,
                                                                    monkeypatch: Any) -> None:
    """The controller read the holds at the start of its pass; the API held the job after that. The placement's
    conditional update refuses it: it stays pending and held, and no worker starts."""
    api = Api(store)
    ctl, backend = controller(store)
    job = api.submit("j")
    with store.session(write=True) as s:
        q.hold(s, s.get(JobRow, job), "ann")  # type: ignore[arg-type]
    monkeypatch.setattr(ctl.intake, "read_holds", lambda s: set())  # this pass read the holds before the API's
    ctl.step()
    monkeypatch.undo()
    r = row(store, job)
    assert (r.state, r.attempt, r.held_by) == ("pending", 0, "ann") and not backend.launches
    for _ in range(2):
        ctl.intake.last_full_sync = 0.0  # the full scan takes it back into the queue (it does every few seconds)
        ctl.step()
    r = row(store, job)
    assert r.state == "pending" and not backend.launches
    assert r.pending_reason == f"held by ann: it starts only once released (`corral release {job}`)"


def test_corral_hold_and_release(store: Store, corral_home: Path) -> None:
    api = Api(store)
    job = api.submit("j")
    with served(create_app(store)) as url:
        def corral(*args: str) -> Any:
            return CliRunner().invoke(main, list(args), env={"CORRAL_URL": url, "CORRAL_TOKEN": api.tokens["ann"]})

        held = corral("hold", str(job))
        assert held.exit_code == 0, held.output
        assert held.output == f"job {job}: held by ann: it starts only once released (`corral release {job}`)\n"
        with store.session(write=True) as s:  # an event whose kind is as long as the events column
            q.add_event(s, job, "requeue_requested", "requeue requested by root")
        shown = corral("show", str(job))
        assert "held               by ann since" in shown.output
        assert "requeue_requested  requeue requested by root" in shown.output  # kind and words apart
        released = corral("release", str(job))
        assert (released.exit_code, released.output) == (0, f"job {job}: released; it may start\n")
        again = corral("release", str(job))
        assert again.exit_code == 1 and f"job {job} is not held (it is pending): there is nothing to release" in \
            again.output
        missing = corral("hold", "999")
        assert missing.exit_code == 1 and "job 999 not found" in missing.output


def test_an_array_s_pending_tasks_are_held_and_released_together(store: Store, corral_home: Path) -> None:
    api = Api(store)
    ctl, backend = controller(store)
    first = api.post("/jobs", json={"name": "sweep", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 600,
                                    "array": {"count": 4}})
    assert first.status_code == 201, first.json
    array = first.json["array"]["id"]
    tasks = [t["id"] for t in first.json["array"]["tasks"]]
    ctl.step()
    ctl.step()
    assert sorted(backend.launches) == tasks[:2]  # two run on the node's two GPUs; two wait
    assert api.post(f"/jobs/{tasks[3]}/hold", who="root").status_code == 200
    held = api.post(f"/arrays/{array}/hold")
    assert held.status_code == 200, held.json
    assert held.json["held"] == 2 and [t["held_by"] for t in held.json["tasks"]] == [None, None, "ann", "root"]
    assert api.post(f"/arrays/{array}/hold", who="bob").status_code == 403  # not bob's
    assert api.post(f"/jobs/{tasks[0]}/cancel").status_code == 200
    ctl.step()
    ctl.step()
    assert sorted(backend.launches) == [tasks[1]]  # a GPU free: the held tasks still wait
    with served(create_app(store)) as url:
        env = {"CORRAL_URL": url, "CORRAL_TOKEN": api.tokens["ann"]}
        released = CliRunner().invoke(main, ["array", "release", str(array)], env=env)
        # ann releases her hold; root's stays
        assert released.output == f"array {array}: 4 tasks: 2 pending, 1 cancelled, 1 running (1 held)\n", \
            released.output
        shown = CliRunner().invoke(main, ["array", "show", str(array)], env=env)
        assert f"job {tasks[3]:<8} pending (held by root)" in shown.output, shown.output
    ctl.step()
    assert sorted(backend.launches) == [tasks[1], tasks[2]]
    assert row(store, tasks[3]).state == "pending"


def test_a_running_job_requeued_on_request_runs_again_spending_no_restart(store: Store, corral_home: Path) -> None:
    """Slurm's `scontrol requeue`: at the next pass its workers are stopped (to checkpoint) and it goes back to the
    queue in its place, spending no restart; the GPU it freed starts it again (in the same pass: it heads the queue,
    ahead of a job submitted after it)."""
    api = Api(store)
    ctl, backend = controller(store)
    job, other = api.submit("j"), api.submit("other")
    ctl.step()
    ctl.step()
    assert row(store, job).state == "running" and row(store, other).state == "running"
    later = api.submit("later")  # the node is full: it waits
    assert api.post(f"/jobs/{job}/requeue", who="bob", json={}).status_code == 403  # not bob's
    asked = api.post(f"/jobs/{job}/requeue", json={})
    assert asked.status_code == 200 and asked.json["requeue_by"] == "ann" and asked.json["state"] == "running"
    ctl.step()
    r = row(store, job)
    assert backend.stopped == [job] and (r.state, r.attempt, r.restarts, r.requeue_by) == ("running", 2, 0, None)
    assert [e.kind for e in r.events][-3:] == ["requeue_requested", "checkpointed", "placed"]
    assert [e.message for e in r.events if e.kind == "checkpointed"] == [
        "requeued by ann: checkpointed, back in the queue (no restart spent)"]
    assert row(store, later).state == "pending"
    refused = api.post(f"/jobs/{later}/requeue", json={})
    assert refused.status_code == 409
    assert refused.json["message"] == (f"job {later} is pending: only a running job can be requeued (`corral hold` "
                                       "keeps a pending one from starting)")


def test_corral_requeue_hold_keeps_it_waiting_until_released(store: Store, corral_home: Path) -> None:
    """Slurm's `scontrol requeuehold`: requeued, then held by who asked, until released."""
    api = Api(store)
    ctl, backend = controller(store)
    job = api.submit("j")
    ctl.step()
    ctl.step()
    with served(create_app(store)) as url:
        out = CliRunner().invoke(main, ["requeue", str(job), "--hold"],
                                 env={"CORRAL_URL": url, "CORRAL_TOKEN": api.tokens["root"]})
    assert out.output == f"job {job}: requeue requested; it will be held; the controller checkpoints it at its next " \
                         "pass\n", out.output
    for _ in range(3):
        ctl.step()
    r = row(store, job)
    assert (r.state, r.held_by, r.restarts) == ("pending", "root", 0) and job not in backend.launches
    assert r.pending_reason == f"held by root: it starts only once released (`corral release {job}`)"
    assert api.post(f"/jobs/{job}/release").status_code == 403  # root's hold: only an admin releases it
    assert api.post(f"/jobs/{job}/release", who="root").status_code == 200
    ctl.step()
    assert row(store, job).state == "running" and job in backend.launches

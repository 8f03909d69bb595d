"""A job `topology` holds for compact room, live: the controller stores the hold's end beside the pending reason
(`pending_until`, migration 0015, from the policy's `Wait.until`), clears it with any other reason and at the start,
and the start estimate (the policy's replay) counts the job as starting when its hold ends, not "now" (it fits now,
spread). On SQLite
and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, text
from test_api import make_env
from test_node_racks import controller, placed_nodes, steps

from policies import make_policy
from scheduler.live.controller import Controller
from scheduler.live.estimates import live_estimates
from scheduler.live.snapshot import snapshot
from scheduler.live.store import Store
from scheduler.live.store.db import alembic_config
from scheduler.live.store.models import Job

NODE_WAIT_S = 600.0


def row(store: Store, job_id: int) -> Job:
    with store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        s.expunge(job)
        return job


def settle(ctl: Controller, done: object, what: str, passes: int = 20) -> None:
    """Controller passes until `done()` holds (the backend's workers come up at the next poll)."""
    for _ in range(passes):
        if done():  # type: ignore[operator]
            return
        steps(ctl)
    assert done(), what  # type: ignore[operator]


def test_a_held_job_stores_until_when_and_is_estimated_to_start_then(store: Store, corral_home: Path) -> None:
    """2 servers of 2 GPUs, one GPU busy on each: a 2-GPU job fits now only spread, so topology holds it for one
    server, 10 min from its submission at most. The row says until when; its estimate is then, not now; the API shows
    both. Another reason (it no longer fits) clears the bound, the hold sets it again, and the start clears it."""
    ctl, _ = controller(store, {"n0": None, "n1": None}, policy=f"topology:node_wait={NODE_WAIT_S:g}")
    env = make_env(store)
    ones = [env.submit(name=f"one{i}", num_gpus=1, duration_s=3600)["id"] for i in range(4)]
    settle(ctl, lambda: all(j in ctl.running for j in ones), "the four 1-GPU jobs run")
    first_on = {node: next(j for j in ones if placed_nodes(ctl, j) == {node}) for node in ("n0", "n1")}
    for j in first_on.values():  # one GPU free on each server
        assert env.post(f"/jobs/{j}/cancel").status_code == 200
    settle(ctl, lambda: not any(j in ctl.running for j in first_on.values()), "the two cancelled runs stop")

    gang = env.submit(name="gang", num_gpus=2, duration_s=300)
    settle(ctl, lambda: (row(store, gang["id"]).pending_reason or "").startswith("waits for one server"),
           "topology holds the gang")
    held = row(store, gang["id"])
    assert held.state == "pending" and gang["id"] not in ctl.running
    assert held.pending_until == pytest.approx(held.submitted_at + NODE_WAIT_S), "the hold's end: submission + wait"
    estimates = live_estimates(snapshot(store), make_policy)
    left = held.pending_until - time.time()
    # The replay asks the policy itself, which holds it until then (it queued since its submission) and no longer.
    assert estimates.fields(gang["id"])["start_estimate_s"] == pytest.approx(left, abs=5.0), "when its hold ends"
    assert f"under topology:node_wait={NODE_WAIT_S:g}" in estimates.basis, estimates.basis
    body = env.get(f"/jobs/{gang['id']}").json
    assert body["pending_until"] == pytest.approx(held.pending_until)
    assert body["start_estimate_s"] == pytest.approx(left, abs=5.0)
    explained = env.get(f"/jobs/{gang['id']}/explain").json
    assert explained["pending_until"] == pytest.approx(held.pending_until)
    assert "until its hold ends, when it starts at the latest" in explained["summary"], explained["summary"]

    # A 1-GPU job behind it takes one of the two free GPUs: the gang no longer fits, and its reason bounds nothing.
    filler = env.submit(name="filler", num_gpus=1, duration_s=3600)["id"]
    settle(ctl, lambda: filler in ctl.running and row(store, gang["id"]).pending_until is None,
           "the filler starts and the gang's reason is the missing GPU's, with no bound")
    assert row(store, gang["id"]).pending_reason == "waiting for 2 GPUs (1 free)"
    assert env.post(f"/jobs/{filler}/cancel").status_code == 200
    settle(ctl, lambda: row(store, gang["id"]).pending_until is not None, "held again once the filler stops")
    assert row(store, gang["id"]).pending_until == pytest.approx(held.pending_until)

    # A whole server frees: the gang starts there, and the bound goes with its pending reason.
    other = next(j for j in ones if j not in first_on.values() and placed_nodes(ctl, j) == {"n0"})
    assert env.post(f"/jobs/{other}/cancel").status_code == 200
    settle(ctl, lambda: gang["id"] in ctl.running, "the gang starts on n0")
    assert placed_nodes(ctl, gang["id"]) == {"n0"}
    started = row(store, gang["id"])
    assert started.state == "running" and started.pending_reason is None and started.pending_until is None
    assert env.get(f"/jobs/{gang['id']}").json["pending_until"] is None


def test_migration_0015_adds_pending_until_to_every_job_as_null(db_url: str) -> None:
    engine = create_engine(db_url)
    cfg = alembic_config(db_url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0014")
        conn.execute(text("INSERT INTO users (name, admin, created_at) VALUES ('ann', false, 1.0)"))
        conn.execute(text(
            "INSERT INTO jobs (user_id, name, kind, model, num_gpus, duration_s, env, priority, restart_policy, "
            "max_restarts, state, cancel_requested, submitted_at, queued_since, attempt, restarts, preemptions, "
            "attained_gpu_s, work_done_s, progress, pending_reason) SELECT id, 'old', 'emulated', 'ResNet-50-bs64', "
            "2, 60, '{}', 0, 'requeue', 3, 'pending', false, 1.0, 1.0, 0, 0, 0, 0, 0, 0, 'waiting' FROM users"))
        command.upgrade(cfg, "0015")
        assert conn.execute(text("SELECT name, pending_reason, pending_until FROM jobs")).all() == [
            ("old", "waiting", None)]
        conn.execute(text("UPDATE jobs SET pending_until = 1234.5"))
        command.downgrade(cfg, "0014")
        assert conn.execute(text("SELECT name, pending_reason FROM jobs")).all() == [("old", "waiting")]
    engine.dispose()
    check = create_engine(db_url)
    with check.connect() as conn:
        columns = conn.execute(text(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'jobs' "
            "AND table_schema = current_schema()"
            if db_url.startswith("postgresql") else "SELECT name FROM pragma_table_info('jobs')")).scalars().all()
    check.dispose()
    assert "pending_reason" in columns and "pending_until" not in columns

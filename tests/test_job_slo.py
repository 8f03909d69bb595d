"""Issue 47: the rules the dashboard once copied are served with every job. `scheduler.live.slo.slo_status` (an
inference job's SLO against the model's isolated latency times its predicted slowdown: now, averaged over its run, or
alone) and the job's `terminal`, in GET /jobs/ID and in each item of GET /jobs, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_api import Env, make_env

from scheduler.core.model import JobKind
from scheduler.core.workloads import catalog
from scheduler.live.job_states import JobState
from scheduler.live.slo import slo_status
from scheduler.live.store import Store
from scheduler.live.store.models import Job

SERVE = next(p for p in catalog().values() if p.kind == JobKind.INFERENCE and p.latency_ms > 0)
TRAIN = "ResNet-50-bs64"  # a training model: no isolated latency in the catalog
ALONE = SERVE.latency_ms


# ---- the rule ---------------------------------------------------------------------------------------------------


def test_a_job_without_an_slo_has_no_status() -> None:
    assert slo_status(None, SERVE.name, "running", 1.5, 1.2) is None


@pytest.mark.parametrize("model", [TRAIN, "no-such-model"])
def test_without_an_isolated_latency_nothing_is_predicted(model: str) -> None:
    assert slo_status(40.0, model, "running", 1.5, 1.2) == {
        "slo_ms": 40.0, "alone_ms": None, "slowdown": None, "predicted_ms": None, "basis": "", "at_risk": None}


def test_a_running_job_is_judged_at_its_slowdown_now() -> None:
    st = slo_status(ALONE * 1.4, SERVE.name, "running", 1.5, 1.2)
    assert st is not None
    assert (st["alone_ms"], st["slowdown"], st["basis"]) == (ALONE, 1.5, "now")
    assert st["predicted_ms"] == pytest.approx(ALONE * 1.5) and st["at_risk"] is True
    within = slo_status(ALONE * 1.6, SERVE.name, "running", 1.5, 1.2)
    assert within is not None and within["at_risk"] is False


@pytest.mark.parametrize(("state", "now"), [("pending", 1.5), ("succeeded", 1.5), ("running", None), ("running", 0.0)])
def test_otherwise_the_slowdown_averaged_over_its_run(state: str, now: float | None) -> None:
    """A job not running (its predicted_slowdown is its last placement's), or running with no figure yet."""
    st = slo_status(ALONE * 1.1, SERVE.name, state, now, 1.2)
    assert st is not None
    assert (st["slowdown"], st["basis"], st["at_risk"]) == (1.2, "averaged over its run", True)
    assert st["predicted_ms"] == pytest.approx(ALONE * 1.2)


@pytest.mark.parametrize("avg", [None, 0.0])
def test_a_job_that_never_ran_is_judged_alone(avg: float | None) -> None:
    st = slo_status(ALONE, SERVE.name, "pending", None, avg)
    assert st == {"slo_ms": ALONE, "alone_ms": ALONE, "slowdown": 1.0, "predicted_ms": ALONE, "basis": "alone",
                  "at_risk": False}  # exactly at its SLO is within it
    over = slo_status(ALONE * 0.5, SERVE.name, "pending", None, avg)
    assert over is not None and over["at_risk"] is True


# ---- served by the API ------------------------------------------------------------------------------------------


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    return make_env(store)


def served(env: Env, job_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job as GET /jobs/ID and as GET /jobs show it."""
    one = env.get(f"/jobs/{job_id}")
    listed = env.get("/jobs?limit=1000")
    assert one.status_code == 200 and listed.status_code == 200
    (item,) = [j for j in listed.json["jobs"] if j["id"] == job_id]
    return one.json, item


def test_the_api_serves_terminal_and_the_slo(env: Env) -> None:
    serve = env.submit(name="serve", model=SERVE.name, num_gpus=0.25, slo_ms=ALONE * 1.3)
    train = env.submit(name="train", model=TRAIN)
    for body in (serve, *served(env, serve["id"])):
        assert body["terminal"] is False
        assert body["slo"] == {"slo_ms": ALONE * 1.3, "alone_ms": ALONE, "slowdown": 1.0, "predicted_ms": ALONE,
                               "basis": "alone", "at_risk": False}
    for body in served(env, train["id"]):
        assert body["terminal"] is False and body["slo"] is None

    with env.store.session() as s:  # the controller placed it beside a neighbour that slows it by half
        row = s.get(Job, serve["id"])
        assert row is not None
        row.state, row.predicted_slowdown, row.started_at = JobState.RUNNING, 1.5, row.submitted_at
    for body in served(env, serve["id"]):
        assert body["slo"]["basis"] == "now" and body["slo"]["slowdown"] == 1.5 and body["slo"]["at_risk"] is True
        assert body["slo"]["predicted_ms"] == pytest.approx(ALONE * 1.5)

    assert env.post(f"/jobs/{train['id']}/cancel").status_code == 200
    for body in served(env, train["id"]):
        assert body["state"] == "cancelled" and body["terminal"] is True

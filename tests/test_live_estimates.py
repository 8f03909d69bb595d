"""The live service's start estimates (issue 50, item 1): the store's present replayed under the active policy by the
core's replay (`scheduler.live.estimates`), through the API on SQLite and PostgreSQL over hand-made stores (no
controller runs, so every figure is known), and the cache every request shares."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from test_api import Env, make_env
from test_explain import add_cluster, run_at
from test_one_truth import set_node

from policies import make_policy
from scheduler.core.decisions import Policy
from scheduler.live.estimates import LiveEstimator
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job, Node


def activate(store: Store, policy: str) -> None:
    with store.session() as s:
        q.activate_policy(s, policy, by="test")


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    e = make_env(store)
    add_cluster(store)  # 2 nodes of 2 A100s
    return e


def _backfill(env: Env) -> tuple[dict[str, Any], dict[str, Any]]:
    """3 of 4 GPUs busy for 1,000 s; a 4-GPU job submitted first, then a 1-GPU job of 100 s that fits the gap."""
    busy = env.submit(num_gpus=2, duration_s=1000.0, name="busy")
    other = env.submit(num_gpus=1, duration_s=1000.0, name="other")
    run_at(env.store, busy["id"], [0, 1], time.time())
    run_at(env.store, other["id"], [2], time.time())
    big = env.submit(num_gpus=4, duration_s=500.0, name="big")
    small = env.submit(num_gpus=1, duration_s=100.0, name="small")
    return big, small


def test_a_small_job_after_a_large_one_starts_first_under_backfilling_and_not_under_fifo(env: Env) -> None:
    activate(env.store, "fifo-backfill")
    big, small = _backfill(env)
    listed = {j["id"]: j for j in env.get("/jobs?state=pending").json["jobs"]}
    assert listed[small["id"]]["start_estimate_outlook"] == "starts"
    assert listed[small["id"]]["start_estimate_s"] == pytest.approx(0.0, abs=2.0), "backfilled into the free GPU"
    assert listed[big["id"]]["start_estimate_s"] == pytest.approx(1000.0, abs=5.0)
    assert "under fifo-backfill" in listed[big["id"]]["start_estimate_basis"]
    shown = env.get(f"/jobs/{small['id']}").json
    assert shown["start_estimate_outlook"] == "starts" and shown["start_estimate_code"] is None
    ex = env.get(f"/jobs/{small['id']}/explain").json
    assert ex["start_estimate_outlook"] == "starts" and ex["start_estimate_basis"] == shown["start_estimate_basis"]

    activate(env.store, "fifo")  # the policy switched: the state changed, and the next request replays under it
    listed = {j["id"]: j for j in env.get("/jobs?state=pending").json["jobs"]}
    assert "under fifo " in listed[big["id"]]["start_estimate_basis"]
    assert listed[big["id"]]["start_estimate_s"] == pytest.approx(1000.0, abs=5.0)
    assert listed[small["id"]]["start_estimate_s"] >= listed[big["id"]]["start_estimate_s"], "no one overtakes"


def test_a_job_the_team_rules_never_start_reads_never_with_its_reason(env: Env) -> None:
    """A non-preemptible job of a team with no quota and no borrowing: the tenancy frame never starts it, even with
    GPUs free. The old estimate gave it a time; the replay says "never", with the frame's reason as data."""
    activate(env.store, "fifo-backfill")
    with env.store.session() as s:
        q.create_team(s, "lab", 4.0, None)
        q.create_team(s, "stray", 0.0, 0.0)
    stray = env.submit(num_gpus=1, duration_s=60.0, name="stray")
    lab = env.submit(num_gpus=1, duration_s=60.0, name="lab-job")
    with env.store.session() as s:
        for job_id, team in ((stray["id"], "stray"), (lab["id"], "lab")):
            row = s.get(Job, job_id)
            assert row is not None
            row.team, row.preemptible = team, job_id != stray["id"]
    body = env.get(f"/jobs/{stray['id']}").json
    assert body["start_estimate_outlook"] == "never" and body["start_estimate_s"] is None
    assert body["start_estimate_code"] is not None and body["start_estimate_params"] is not None
    assert body["start_estimate_text"].startswith("never starts under the current rules")
    assert "teams" in body["start_estimate_basis"]
    assert env.get(f"/jobs/{lab['id']}").json["start_estimate_s"] == pytest.approx(0.0, abs=2.0)
    ex = env.get(f"/jobs/{stray['id']}/explain").json
    assert ex["start_estimate_outlook"] == "never" and "never starts under the current rules" in ex["summary"]


def test_a_job_only_a_node_that_is_down_could_hold_waits_for_it(env: Env) -> None:
    """As the controller keeps it (its model keeps the down node, GPUs closed): never in the replay while the node
    stays down, not rejected, and the basis says why."""
    activate(env.store, "fifo")
    gang = env.submit(num_gpus=4, duration_s=60.0)
    set_node(env.store, "node1", alive=False)  # 2 GPUs up: the 4-GPU job waits for node1
    body = env.get(f"/jobs/{gang['id']}").json
    assert (body["start_estimate_outlook"], body["start_estimate_code"]) == ("never", "policy")
    assert "2 GPU(s) of 1 node(s) that are down stay closed" in body["start_estimate_basis"]
    set_node(env.store, "node1", alive=True)
    assert env.get(f"/jobs/{gang['id']}").json["start_estimate_s"] == pytest.approx(0.0, abs=2.0)


def test_a_dependent_of_a_running_job_starts_when_it_ends(env: Env) -> None:
    activate(env.store, "fifo")
    first = env.submit(num_gpus=1, duration_s=300.0)
    run_at(env.store, first["id"], [0], time.time())
    then = env.submit(num_gpus=1, duration_s=60.0, depends_on=[{"job": first["id"], "condition": "afterok"}])
    assert env.get(f"/jobs/{then['id']}").json["start_estimate_s"] == pytest.approx(300.0, abs=5.0)


def test_a_held_job_and_its_dependents_have_no_estimate(env: Env) -> None:
    activate(env.store, "fifo")
    held = env.submit(num_gpus=1, duration_s=60.0)
    assert env.post(f"/jobs/{held['id']}/hold").status_code == 200
    after = env.submit(num_gpus=1, duration_s=60.0, depends_on=[{"job": held["id"], "condition": "afterany"}])
    for job in (held, after):
        body = env.get(f"/jobs/{job['id']}").json
        assert body["start_estimate_outlook"] is None and body["start_estimate_s"] is None


# ---- the cache ----------------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def counting(built: list[str]) -> Any:
    def make(name: str, seed: int) -> Policy:
        built.append(name)
        return make_policy(name, seed)

    return make


def test_one_replay_per_state_within_the_interval_and_a_new_one_after_a_change(env: Env) -> None:
    activate(env.store, "fifo-backfill")
    big, small = _backfill(env)
    built: list[str] = []
    clock = Clock()
    est = LiveEstimator(env.store, counting(built), refresh_s=5.0, clock=clock)
    first = est.current()
    assert est.replays == 1 and built == ["fifo-backfill"], "one replay, one fresh policy"
    for _ in range(20):  # a job list page, or twenty of them: the same replay
        assert est.current() is first
    clock.t += 4.9
    assert est.current() is first and est.replays == 1
    with env.store.session() as s:  # a node agent's periodic health push: not a change the replay waits for
        nodes = s.scalars(select(Node)).all()
        assert nodes
        for node in nodes:
            node.health_at = time.time()
    assert est.current() is first and est.replays == 1
    third = env.submit(num_gpus=1, duration_s=10.0)  # the state changed: the next call replays it
    second = est.current()
    assert est.replays == 2 and third["id"] in second.by_job and third["id"] not in first.by_job
    clock.t += 5.0  # nothing changed, but the replay is as old as the interval: replayed again
    assert est.current() is not second and est.replays == 3
    with env.store.session() as s:
        q.hold(s, s.get(Job, small["id"]), "alice")  # type: ignore[arg-type]
    assert small["id"] not in est.current().by_job and est.replays == 4
    assert big["id"] in est.current().by_job and est.replays == 4


def test_concurrent_requests_share_one_replay(env: Env) -> None:
    activate(env.store, "fifo-backfill")
    _backfill(env)
    est = LiveEstimator(env.store, make_policy, refresh_s=60.0)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(est.current())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(got) == 8 and est.replays == 1 and all(g is got[0] for g in got)


def test_the_estimate_counts_down_between_replays(env: Env) -> None:
    activate(env.store, "fifo-backfill")
    big, _ = _backfill(env)
    est = LiveEstimator(env.store, make_policy).current()
    now = est.at
    start = est.fields(big["id"], now)["start_estimate_s"]
    assert est.fields(big["id"], now + 100.0)["start_estimate_s"] == pytest.approx(start - 100.0)
    assert est.fields(big["id"], now + 10 * start)["start_estimate_s"] == 0.0


def test_the_cli_says_never_instead_of_a_time() -> None:
    from corral.models import JobSummary
    from scheduler.cli.client_text import start_text

    def text(**fields: object) -> str:
        return start_text(JobSummary.from_json(fields))

    never = "never starts under the current rules and cluster (a reason)"
    assert text(start_estimate_outlook="never", start_estimate_text=never, start_estimate_s=None) == never
    assert text(start_estimate_outlook="beyond", start_estimate_s=None).startswith("not estimated")
    assert text(start_estimate_outlook="starts", start_estimate_s=30.0) == "in ~30 s"
    assert text(start_estimate_outlook=None, start_estimate_s=None) == "unknown"


def test_a_present_the_simulator_refuses_gives_no_estimates_and_says_why(env: Env) -> None:
    """Two runs recorded on one whole GPU (a store no controller would write): the replay cannot start, and the
    pages still answer, with no estimate and the reason in the basis."""
    activate(env.store, "fifo")
    one, two = env.submit(num_gpus=1, duration_s=60.0), env.submit(num_gpus=1, duration_s=60.0)
    run_at(env.store, one["id"], [0], time.time())
    run_at(env.store, two["id"], [0], time.time())
    waiting = env.submit(num_gpus=1, duration_s=60.0)
    body = env.get(f"/jobs/{waiting['id']}").json
    assert body["start_estimate_outlook"] is None and body["start_estimate_s"] is None
    assert body["start_estimate_basis"].startswith("no estimate: the present cannot be replayed"), body


def test_the_estimate_repeats_the_last_hours_submissions(env: Env) -> None:
    # All 4 GPUs busy for 1,000 s; a 4-hour job waits. In the last hour a 10-minute 4-GPU job was submitted every 10
    # minutes (they ran and ended). Under sjf, short jobs like those that keep coming go first: the estimate repeats
    # the last hour's submissions (`expected_arrivals`) and says the long job starts after five of them, and its
    # basis says what it assumed. (The busy and long jobs are dated two hours back: outside the hour.)
    activate(env.store, "sjf")
    now = time.time()
    busy = env.submit(num_gpus=4, duration_s=1000.0, name="busy")
    run_at(env.store, busy["id"], [0, 1, 2, 3], now)
    long = env.submit(num_gpus=4, duration_s=4 * 3600.0, name="long")
    shorts = [env.submit(num_gpus=4, duration_s=600.0, name=f"short{k}") for k in range(5)]
    with env.store.session() as s:
        for row_id in (busy["id"], long["id"]):
            s.get(Job, row_id).submitted_at = now - 7200.0  # type: ignore[union-attr]
        for k, sub in enumerate(shorts):
            row = s.get(Job, sub["id"])
            assert row is not None
            row.state, row.submitted_at = "succeeded", now - 3000.0 + 600.0 * k
    shown = env.get(f"/jobs/{long['id']}").json
    assert shown["start_estimate_outlook"] == "starts"
    assert shown["start_estimate_s"] == pytest.approx(1000.0 + 5 * 600.0, abs=30.0)
    assert "5 job(s) submitted in the last" in shown["start_estimate_basis"]

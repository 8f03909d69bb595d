"""Issue 26 item 4, "one truth on every page", through the API on SQLite and PostgreSQL over hand-made stores (no
controller runs, so every figure is known): start estimates on the usable GPUs (the live replay of the active policy,
issue 50: tests/test_live_estimates.py), with how they were made; a preempted job's last placement and why it stopped; one GPU numbering; progress only where it is
known; and the durations' words (`scheduler.live.words`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from test_api import Env, make_env

from scheduler.live.explain import OVERDUE_FLOOR_S, known_progress
from scheduler.live.nodes import gpu_usability, usable_gpus
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Allocation, Gpu, Job, Node
from scheduler.live.words import duration_text, gpus_text, ranges


def add_nodes(store: Store, nodes: int, gpus: int, now: float) -> None:
    with store.session() as s:
        for n in range(nodes):
            node = Node(name=f"node{n}", index=n, preset="dgx-a100", updated_at=now)
            s.add(node)
            s.flush()
            for g in range(gpus):
                s.add(Gpu(node_id=node.id, index=n * gpus + g, local_index=g, gpu_type="A100-80GB", mem_gb=80.0))


def run_on(store: Store, job_id: int, where: list[tuple[str, int, int]], *, share: float = 1.0, slowdown: float = 1.0,
           progress: float = 0.0, started_at: float | None = None, attempt: int = 1) -> None:
    """Make the job run on `where` (node, local GPU, cluster GPU), as the controller would have."""
    now = time.time()
    with store.session() as s:
        row = s.get(Job, job_id)
        assert row is not None
        row.state, row.attempt, row.predicted_slowdown, row.progress = "running", attempt, slowdown, progress
        row.started_at = started_at
        for node, local, gpu in where:
            s.add(Allocation(job_id=job_id, attempt=attempt, rank=0, node=node, gpu=gpu, local_gpu=local, share=share,
                             allocated_at=now))


def command_job(env: Env, **fields: Any) -> dict[str, Any]:
    """A command job as the store has it (submitted emulated, to need no job accounts here, then made a command)."""
    job = env.submit(**fields)
    with env.store.session() as s:
        row = s.get(Job, job["id"])
        assert row is not None
        row.kind, row.entrypoint = "command", "sleep 1000"
    return job


def set_node(store: Store, name: str, **values: Any) -> None:
    with store.session() as s:
        node = s.scalars(select(Node).where(Node.name == name)).one()
        for k, v in values.items():
            setattr(node, k, v)


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    return make_env(store)


def fifo(env: Env) -> None:
    """The estimates replay the active policy: fifo, whose order is plain to see."""
    with env.store.session() as s:
        q.activate_policy(s, "fifo", by="test")


# ---- 1. start estimates -------------------------------------------------------------------------------------------


def test_a_gang_waiting_for_whole_gpus_is_never_estimated_now(env: Env) -> None:
    """Issue 26: "start estimate now" beside "waiting for 2 GPUs (0 free)". A half-GPU job on each of the four GPUs
    leaves two GPUs' worth of share free but no whole GPU: the 2-GPU job waits for two of them to end. Before,
    aggregate capacity (4 GPUs, 2 held) said "now"."""
    fifo(env)
    add_nodes(env.store, 1, 4, time.time())
    halves = [env.submit(num_gpus=0.5, duration_s=100.0 + 10 * i) for i in range(4)]
    for h, gpu in zip(halves, range(4), strict=True):
        run_on(env.store, h["id"], [("node0", gpu, gpu)], share=0.5)
    gang = env.submit(num_gpus=2, duration_s=60.0)
    body = env.get(f"/jobs/{gang['id']}").json
    # Two halves must end: 100 s and 110 s at slowdown 1, progress 0 (the replay's clock started a moment ago).
    assert body["start_estimate_s"] == pytest.approx(110.0, abs=5.0)
    assert body["start_estimate_basis"].startswith("replaying 4 running and 1 pending job(s) under fifo in the "
                                                   "simulator, as the rules decide"), body["start_estimate_basis"]
    ex = env.get(f"/jobs/{gang['id']}/explain").json
    assert ex["start_estimate_s"] == pytest.approx(body["start_estimate_s"], abs=2.0)
    assert ex["start_estimate_basis"] == body["start_estimate_basis"]
    assert "it starts in about 1 min" in ex["summary"], ex["summary"]


def test_gpus_of_a_lost_node_do_not_count_and_the_estimate_follows_the_cluster(env: Env) -> None:
    """Issue 26: after a node loss, "now" beside "waiting for 16 GPUs (6 free)". The dead node's GPUs are closed (and
    said to be); when it comes back, the next request counts them again."""
    fifo(env)
    now = time.time()
    add_nodes(env.store, 2, 2, now)
    busy = env.submit(num_gpus=1, duration_s=30.0)
    run_on(env.store, busy["id"], [("node0", 0, 0)])
    pair, four = env.submit(num_gpus=2, duration_s=60.0), env.submit(num_gpus=4, duration_s=60.0)
    set_node(env.store, "node1", alive=False)  # lost after they were submitted
    listed = {j["id"]: j for j in env.get("/jobs?state=pending").json["jobs"]}
    assert listed[pair["id"]]["start_estimate_s"] == pytest.approx(30.0, abs=5.0)  # only GPU 1 is free: wait for GPU 0
    # 4 GPUs asked, 2 up: the replayed cluster (node1 down, its GPUs closed, as the controller models it) never runs
    # it while node1 stays down; the controller keeps it waiting, so it is not rejected.
    assert listed[four["id"]]["start_estimate_s"] is None
    assert (listed[four["id"]]["start_estimate_outlook"], listed[four["id"]]["start_estimate_code"]) == (
        "never", "policy")
    ex = env.get(f"/jobs/{four['id']}/explain").json
    assert "never starts under the current rules and cluster" in ex["summary"], ex["summary"]

    set_node(env.store, "node1", alive=True)
    listed = {j["id"]: j for j in env.get("/jobs?state=pending").json["jobs"]}
    assert listed[pair["id"]]["start_estimate_s"] == pytest.approx(0.0, abs=2.0)  # node1's two GPUs are free again
    # In queue order: the pair starts now on two of the three free GPUs for 60 s; the four wait for it and the busy one.
    assert listed[four["id"]]["start_estimate_s"] == pytest.approx(60.0, abs=5.0)


def test_faulted_gpus_and_drained_nodes_are_not_usable(env: Env) -> None:
    fifo(env)
    now = time.time()
    add_nodes(env.store, 2, 2, now)
    report = {"interval_s": 5.0, "gpus": [{"index": 0, "status": "ok"}, {"index": 1, "status": "degraded"}]}
    set_node(env.store, "node0", health=report, health_at=now)
    with env.store.session() as s:
        nodes = q.nodes_with_gpus(s)
        assert gpu_usability(nodes, now) == {0: None, 1: "GPU 1 of node0 is faulty: degraded", 2: None, 3: None}
        # A stale report is not believed: the agent may be what is down.
        assert usable_gpus(nodes, now + 3 * 5.0 + 1) == {0, 1, 2, 3}
    gang = env.submit(num_gpus=4, duration_s=60.0)
    body = env.get(f"/jobs/{gang['id']}").json
    assert body["start_estimate_s"] is None and body["start_estimate_outlook"] == "never"  # it needs all four
    assert "1 GPU(s) drained or faulty now stay closed" in body["start_estimate_basis"], body["start_estimate_basis"]
    # A drained node is left out whole, and the gang's estimate says so.
    set_node(env.store, "node1", drained_at=now, drain_reason="firmware")
    with env.store.session() as s:
        assert gpu_usability(q.nodes_with_gpus(s), now)[2] == "node node1 is drained: firmware"
    one = env.submit(num_gpus=1, duration_s=60.0)
    assert "3 GPU(s) drained or faulty now stay closed" in env.get(f"/jobs/{one['id']}").json["start_estimate_basis"]


def test_a_run_past_its_predicted_end_does_not_pin_the_estimate_at_now(env: Env) -> None:
    """Issue 26: a gang estimated "in ~5 min" still pending 18 min later. A run past its predicted end (an emulated
    one at 100%, a command one running longer than its estimate) counts as ending in OVERDUE_FLOOR_S, and the words
    say so."""
    fifo(env)
    add_nodes(env.store, 1, 2, time.time())
    done = env.submit(num_gpus=1, duration_s=60.0)
    run_on(env.store, done["id"], [("node0", 0, 0)], progress=1.0)
    cmd = command_job(env, num_gpus=1, duration_s=60.0)
    run_on(env.store, cmd["id"], [("node0", 1, 1)], started_at=time.time() - 600.0)
    gang = env.submit(num_gpus=2, duration_s=60.0)
    body = env.get(f"/jobs/{gang['id']}").json
    assert body["start_estimate_s"] == pytest.approx(OVERDUE_FLOOR_S, abs=5.0)
    assert "2 run(s) past their predicted end counted as ending within 60 s" in body["start_estimate_basis"]


def test_a_command_jobs_time_left_is_its_estimate_less_what_it_ran(env: Env) -> None:
    fifo(env)
    add_nodes(env.store, 1, 1, time.time())
    cmd = command_job(env, num_gpus=1, duration_s=600.0)
    run_on(env.store, cmd["id"], [("node0", 0, 0)], started_at=time.time() - 100.0, slowdown=1.5)
    waiting = env.submit(num_gpus=1, duration_s=60.0)
    # 100 s up at slowdown 1.5 did 66.7 s of its 600; alone on its GPU, the replay runs the rest at full speed.
    assert env.get(f"/jobs/{waiting['id']}").json["start_estimate_s"] == pytest.approx(600 - 100 / 1.5, abs=5.0)


# ---- 3. a preempted job's last placement --------------------------------------------------------------------------


def test_a_preempted_job_shows_where_it_last_ran_and_why_it_stopped(env: Env) -> None:
    add_nodes(env.store, 2, 2, time.time())
    job = env.submit(num_gpus=2, duration_s=600.0)
    placed_at = time.time() - 120.0
    with env.store.session() as s:
        row = s.get(Job, job["id"])
        assert row is not None
        row.attempt, row.preemptions = 1, 1
        for local, gpu in ((0, 2), (1, 3)):
            s.add(Allocation(job_id=job["id"], attempt=1, rank=0, node="node1", gpu=gpu, local_gpu=local,
                             share=1.0, allocated_at=placed_at, released_at=placed_at + 60.0))
        q.add_event(s, job["id"], "placed", "on node1: GPUs [2, 3] x 1", at=placed_at)
        q.add_event(s, job["id"], "preempted", "reclaimed for team B (under its quota)", at=placed_at + 60.0)
    body = env.get(f"/jobs/{job['id']}").json
    assert body["allocation"] == [] and body["placement_text"] is None
    last = body["last_placement"]
    assert last["where"] == "node1: GPU 0-1 (cluster GPUs 2-3)"
    assert last["nodes"] == ["node1"] and last["gpus"] == [2, 3] and last["local_gpus"] == [0, 1]
    assert last["placed_at"] == pytest.approx(placed_at) and last["released_at"] == pytest.approx(placed_at + 60.0)
    assert last["ended_by"]["kind"] == "preempted"
    assert last["ended_by"]["reason"] == "reclaimed for team B (under its quota)"
    ex = env.get(f"/jobs/{job['id']}/explain").json
    assert ex["last_placement"] == last
    assert ("it last ran on node1: GPU 0-1 (cluster GPUs 2-3) (attempt 1), until it was preempted (reclaimed for "
            "team B (under its quota))") in ex["summary"]
    # A job never placed has none.
    fresh = env.submit(num_gpus=1)
    assert env.get(f"/jobs/{fresh['id']}").json["last_placement"] is None


# ---- 4. one GPU numbering -----------------------------------------------------------------------------------------


def test_lists_and_explanations_name_gpus_by_node_and_local_index(env: Env) -> None:
    add_nodes(env.store, 3, 8, time.time())
    job = env.submit(num_gpus=8, duration_s=600.0)
    run_on(env.store, job["id"], [("node2", g, 16 + g) for g in range(8)])
    listed = next(j for j in env.get("/jobs").json["jobs"] if j["id"] == job["id"])
    assert listed["placement_text"] == "node2: GPU 0-7 (cluster GPUs 16-23)"
    ex = env.get(f"/jobs/{job['id']}/explain").json
    assert ex["placement"]["where"] == "node2: GPU 0-7 (cluster GPUs 16-23)"


def test_gpu_words() -> None:
    assert ranges([3, 0, 1, 2, 6, 8, 9]) == "0-3, 6, 8-9"
    assert gpus_text([("node2", g, 16 + g) for g in range(8)]) == "node2: GPU 0-7"
    assert gpus_text([("node1", 3, 7), ("node2", 0, 8)], cluster_ids=True) == \
        "node1: GPU 3; node2: GPU 0 (cluster GPUs 7-8)"
    assert gpus_text([("n", 1, 5)], 0.25, cluster_ids=True) == "n: GPU 1 ×0.25 (cluster GPU 5)"


# ---- 5. durations -------------------------------------------------------------------------------------------------

# The same table as tests/test_dashboard_truth.py holds `Corral.duration` (web/static/js/core.js) to.
DURATIONS = [(0, "0.0 s"), (9.96, "10 s"), (59.4, "59 s"), (59.6, "1 min 00 s"), (119.7, "2 min 00 s"),
             (659.5, "11 min 00 s"), (3599.5, "1 h 00 min"), (3629.0, "1 h 00 min"), (7199.0, "2 h 00 min"),
             (86399.6, "1 d 0 h"), (2 * 86400 + 3 * 3600 + 10, "2 d 3 h"), (None, "-")]


@pytest.mark.parametrize(("seconds", "text"), DURATIONS)
def test_durations_round_to_whole_units_before_they_split(seconds: float | None, text: str) -> None:
    """Issue 26: "10 min 60 s", "1 min 60 s ago": minutes were floored and seconds rounded."""
    assert duration_text(seconds) == text


# ---- 6. progress where it is known --------------------------------------------------------------------------------


def test_progress_is_null_where_unknown(env: Env) -> None:
    add_nodes(env.store, 1, 2, time.time())
    cmd = command_job(env, num_gpus=1, duration_s=60.0)
    emu = env.submit(num_gpus=1, duration_s=60.0)
    run_on(env.store, cmd["id"], [("node0", 0, 0)], started_at=time.time())
    run_on(env.store, emu["id"], [("node0", 1, 1)], started_at=time.time(), progress=0.0)
    listed = {j["id"]: j for j in env.get("/jobs").json["jobs"]}
    assert listed[cmd["id"]]["progress"] is None  # a command job reports none: no 0% bar
    assert listed[emu["id"]]["progress"] == 0.0  # an emulated job's 0% is a real figure
    assert env.get(f"/jobs/{cmd['id']}").json["progress"] is None
    assert env.get(f"/jobs/{cmd['id']}/explain").json["progress"] is None
    assert known_progress("command", "succeeded", 1.0) == 1.0
    assert known_progress("command", "running", 0.4) == 0.4  # one it reported


def test_the_cli_writes_placements_and_progress_in_the_same_words() -> None:
    from corral.models import Allocation
    from scheduler.cli.client_text import placement, progress_text

    alloc = [Allocation(rank=0, node="node2", gpu=16 + g, local_gpu=g, share=1.0) for g in range(8)]
    assert placement(alloc) == "node2: GPU 0-7"  # was node2[0,1,2,3,4,5,6,7]
    assert placement(alloc, cluster_ids=True) == "node2: GPU 0-7 (cluster GPUs 16-23)"
    assert placement([Allocation(rank=0, node="n", gpu=3, local_gpu=1, share=0.5)]) == "n: GPU 1 ×0.5"
    assert placement([]) == ""
    assert progress_text(None) == "" and progress_text(0.42) == "42%" and progress_text(0.425, 1) == "42.5%"

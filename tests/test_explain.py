"""Explanations: the pending reasons and start estimates of `scheduler.live.explain`, and `GET /jobs/{id}/explain` and
`queue_position` through the API on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import small_cluster
from test_api import Env, make_env

from scheduler.core.contention import ContentionModel
from scheduler.core.model import JobSpec, Placement
from scheduler.core.reasons import Code, Reason
from scheduler.core.reservations import ReservationRule
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.workloads import catalog
from scheduler.live.estimates import LiveEstimates
from scheduler.live.explain import Queued, Running, capacity_reason, start_estimates
from scheduler.live.job_explanation import explain_job
from scheduler.live.store import Store, reason_columns
from scheduler.live.store import queries as q
from scheduler.live.store.models import Allocation, Decision, Gpu, Job, Node


def view_with(placed: list[tuple[float, tuple[int, ...]]]) -> ClusterView:
    return small_view(2, placed)


def small_view(nodes: int, placed: list[tuple[float, tuple[int, ...]]]) -> ClusterView:
    cluster = small_cluster(nodes=nodes, gpus=4)
    state = ClusterState(cluster, catalog())
    contention = ContentionModel(cluster, catalog())
    for i, (gpus, where) in enumerate(placed):
        spec = JobSpec(f"j{i}", 0.0, gpus, 100.0, "ResNet-50-bs64")
        placement = Placement(where, spec.share)
        state.allocate(i, spec, placement)
        contention.add(i, spec, placement)
    return ClusterView(state, contention, {})


def spec(gpus: float) -> JobSpec:
    return JobSpec("x", 0.0, gpus, 10.0, "ResNet-50-bs64")


def test_capacity_reasons_say_what_is_missing() -> None:
    busy = view_with([(4, (0, 1, 2, 3)), (2, (4, 5))])  # 2 GPUs free, both on node 1
    assert capacity_reason(busy, spec(4), "tiresias").text == "waiting for 4 GPUs (2 free)"
    assert capacity_reason(busy, spec(2), "rl:default").text == "fits now: rl:default chose to wait"
    assert capacity_reason(busy, spec(0.5), "p").text == "fits now: p chose to wait"
    spread = view_with([(2, (0, 1)), (2, (4, 5))])  # 2 free on each node
    assert "at most 2 free on one" in capacity_reason(spread, spec(4), "p").text
    # A gang larger than a server that fits only spread: 5 GPUs need 2 of these 4-GPU nodes, which have 4 free.
    spread3 = small_view(nodes=3, placed=[(2, (0, 1)), (2, (4, 5)), (2, (8, 9))])  # 2 free on each of 3 nodes
    assert capacity_reason(spread3, spec(5), "rl:default").text == (
        "fits only spread over more than 2 nodes (the 2 with the most room have 4 free): rl:default chose to wait "
        "for 5 on 2 nodes")
    roomy = small_view(nodes=3, placed=[(2, (0, 1))])  # 4 free on nodes 1 and 2: 8 on the fewest
    assert capacity_reason(roomy, spec(5), "p").text == "fits now: p chose to wait"
    full = view_with([(4, (0, 1, 2, 3)), (4, (4, 5, 6, 7))])
    assert capacity_reason(full, spec(0.25), "p").text.startswith("waiting for a GPU with a 0.25 share")


def whole(first: int, n: int) -> dict[int, float]:
    return {g: 1.0 for g in range(first, first + n)}


def test_start_estimate_replays_ends_and_the_jobs_ahead() -> None:
    running = [Running(whole(0, 4), 50.0), Running(whole(4, 4), 100.0)]  # 8 GPUs, all busy
    gpus = range(8)
    assert start_estimates(gpus, running, [Queued(4, 10.0)]) == [50.0]
    assert start_estimates(gpus, running, [Queued(8, 10.0)]) == [100.0]
    # A 4-GPU job ahead takes the first 4 GPUs freed (at 50 s) for 30 s; it ends at 80 s, before the second running
    # job (100 s), so ours starts at 80 s.
    assert start_estimates(gpus, running, [Queued(4, 30.0), Queued(4, 10.0)]) == [50.0, 80.0]
    assert start_estimates(gpus, running, [Queued(16, 10.0)]) == [None]
    assert start_estimates(gpus, [], [Queued(2, 10.0)]) == [0.0]


def test_a_gang_needs_whole_gpus_so_shares_spread_over_them_do_not_make_it_start_now() -> None:
    """Issue 26: "start estimate now" beside "waiting for 2 GPUs (0 free)". Four halves held on four GPUs leave two
    GPUs' worth of share free but no whole GPU: the gang waits for the earliest end, never 0."""
    running = [Running({g: 0.5}, 30.0 + g) for g in range(4)]
    assert start_estimates(range(4), running, [Queued(2, 10.0)]) == [31.0]
    assert start_estimates(range(4), running, [Queued(0.5, 10.0)]) == [0.0]  # a half fits now, as the reason says


def test_only_usable_gpus_count_and_a_gang_larger_than_them_has_no_estimate() -> None:
    running = [Running(whole(0, 2), 40.0)]
    # GPUs 4-7 on a lost node are not usable: a 4-GPU job waits for the running one, a 16-GPU one never starts.
    assert start_estimates([0, 1, 2, 3], running, [Queued(4, 10.0)]) == [40.0]
    assert start_estimates([0, 1, 2, 3], running, [Queued(6, 10.0), Queued(2, 10.0)]) == [None, 0.0]
    # The model's memory: a gang needs GPUs with as much memory as its model asks.
    assert start_estimates(range(4), [], [Queued(2, 10.0, mem_gb=40.0)], gpu_mem={0: 16.0, 1: 16.0, 2: 80.0,
                                                                                  3: 80.0}) == [0.0]
    assert start_estimates(range(4), [], [Queued(3, 10.0, mem_gb=40.0)], gpu_mem={0: 16.0, 1: 16.0, 2: 80.0,
                                                                                  3: 80.0}) == [None]


def test_a_team_at_its_ceiling_waits_for_its_own_jobs_to_end() -> None:
    # Team A (quota 2 + borrowing limit 0) holds 2 GPUs until 70 s; 6 GPUs are free but A may not use them.
    running = [Running(whole(0, 2), 70.0, team="A"), Running(whole(2, 2), 20.0, team="B")]
    assert start_estimates(range(8), running, [Queued(1, 10.0, team="A")], ceilings={"A": 2.0}) == [70.0]
    assert start_estimates(range(8), running, [Queued(1, 10.0, team="B")], ceilings={"A": 2.0}) == [0.0]
    assert start_estimates(range(8), running, [Queued(3, 10.0, team="A")], ceilings={"A": 2.0}) == [None]


def test_a_job_the_policy_holds_starts_when_its_hold_ends_and_the_jobs_behind_it_go_on_meanwhile() -> None:
    """8 free GPUs. `held` (4 GPUs, 1000 s) fits now, but the policy holds it until 600 s (topology, for compact
    room): it starts then, not now. `fits` (4 GPUs) behind it starts now on the other four; `after` (6 GPUs) fits
    only once both have taken theirs and ended: held ends at 1600 s, after fits (900 s)."""
    queue = [Queued(4, 1000.0), Queued(4, 900.0), Queued(6, 100.0)]
    assert start_estimates(range(8), [], queue, not_before=[600.0, 0.0, 0.0]) == [600.0, 0.0, 1600.0]
    assert start_estimates(range(8), [], queue) == [0.0, 0.0, 1000.0], "unheld: all of it now"
    assert start_estimates(range(8), [], queue, not_before=[0.0, 0.0, 0.0]) == [0.0, 0.0, 1000.0]


def test_a_held_job_takes_its_place_in_the_queue_again_when_its_hold_ends() -> None:
    """4 of 8 GPUs busy until 700 s. `gang` (8 GPUs) is held until 600 s; behind it, `quick` starts now on the free
    four and `long` when quick ends (50 s), before the hold ends. At 600 s the gang is back ahead of `last`: it needs
    all 8, so it waits for long (1050 s), and last waits for it (strict order), though 4 GPUs free at 700 s."""
    running = [Running(whole(0, 4), 700.0)]
    queue = [Queued(8, 100.0), Queued(4, 50.0), Queued(4, 1000.0), Queued(4, 10.0)]
    assert start_estimates(range(8), running, queue, not_before=[600.0, 0.0, 0.0, 0.0]) == [1050.0, 0.0, 50.0,
                                                                                          1150.0]
    # Without the hold the gang goes first: it waits for the busy GPUs (700 s), and everything behind it waits.
    assert start_estimates(range(8), running, queue) == [700.0, 800.0, 800.0, 850.0]
    # Held longer than the others take: it starts when its hold ends, all free by then.
    assert start_estimates(range(8), running, queue, not_before=[2000.0, 0.0, 0.0, 0.0]) == [2000.0, 0.0, 50.0, 700.0]
    # A held job that can never start here holds no one up.
    assert start_estimates(range(8), [], [Queued(16, 10.0), Queued(2, 10.0)], not_before=[5.0, 0.0]) == [None, 0.0]
    with pytest.raises(ValueError, match="2 entries for 1 queued"):
        start_estimates(range(8), [], [Queued(1, 10.0)], not_before=[0.0, 0.0])


def add_cluster(store: Store) -> None:
    now = time.time()
    with store.session() as s:
        for n in range(2):
            node = Node(name=f"node{n}", index=n, preset="dgx-a100", updated_at=now)
            s.add(node)
            s.flush()
            for g in range(2):
                s.add(Gpu(node_id=node.id, index=n * 2 + g, local_index=g, gpu_type="A100-80GB", mem_gb=80.0))


def test_explain_quotes_the_decision_and_its_candidates(store: Store, corral_home: Path) -> None:
    env: Env = make_env(store)
    add_cluster(store)
    a, b, waiting = env.submit(num_gpus=0.5), env.submit(num_gpus=0.5, name="neighbour"), env.submit(num_gpus=4)
    now = time.time()
    with store.session() as s:
        for job_id, slow in ((a["id"], 1.3), (b["id"], 1.2)):
            row = s.get(Job, job_id)
            assert row is not None
            row.state, row.attempt, row.predicted_slowdown, row.progress = "running", 1, slow, 0.5
            s.add(Allocation(job_id=job_id, attempt=1, rank=0, node="node0", gpu=0, local_gpu=0, share=0.5,
                             allocated_at=now))
        s.add(Decision(job_id=a["id"], at=now, policy="rl:default", action="place", reason="chose candidate 0",
                       gpus=[0], share=0.5, predicted_slowdown=1.3, latency_ms=1.0, candidates=[
                           {"gpus": [0], "share": 0.5, "slowdown": 1.3, "others_added": 0.2},
                           {"gpus": [1], "share": 0.5, "slowdown": 1.0, "others_added": 0.0}]))
        s.get(Job, waiting["id"]).pending_reason = "waiting for 4 GPUs (3 free)"  # type: ignore[union-attr]
    body = env.get(f"/jobs/{a['id']}/explain").json
    assert body["placement"] == {"gpus": [0], "nodes": ["node0"], "share": 0.5, "predicted_slowdown": 1.3,
                                 "neighbour_job_ids": [b["id"]], "where": "node0: GPU 0 ×0.5 (cluster GPU 0)"}
    assert [c["chosen"] for c in body["decision"]["candidates"]] == [True, False]
    assert body["neighbours"] == [{"job_id": b["id"], "name": "neighbour", "gpus": [0], "predicted_slowdown": 1.2,
                                   "where": "node0: GPU 0 (cluster GPU 0)"}]
    assert "predicted slowdown 1.30" in body["summary"] and "of 2 candidates" in body["summary"]
    assert body["queue_position"] is None

    pending = env.get(f"/jobs/{waiting['id']}/explain").json
    assert pending["queue_position"] == 1 and pending["pending_reason"] == "waiting for 4 GPUs (3 free)"
    # 4 GPUs in all, 1 held (two halves): it needs all 4, so it waits for both runs to end: their 60 s, half done,
    # at the rate the contention model predicts for two halves on one GPU.
    assert pending["start_estimate_s"] > 30.0 - 5.0
    assert pending["start_estimate_outlook"] == "starts"

    assert pending["summary"].startswith("#1 in the queue: waiting for 4 GPUs")
    assert env.get(f"/jobs/{waiting['id']}").json["queue_position"] == 1
    listed = {j["id"]: j["queue_position"] for j in env.get("/jobs").json["jobs"]}
    assert listed == {waiting["id"]: 1, a["id"]: None, b["id"]: None}
    assert env.get(f"/jobs/{a['id']}/explain", who="bob").status_code == 403
    assert env.get("/jobs/99999/explain").status_code == 404


def test_an_explanation_says_when_and_beside_whom_each_figure_was_computed(store: Store, corral_home: Path) -> None:
    """The case of issue 10: the policy scored its candidates beside a job it then preempted, so the chosen figure
    (1.81x) and the present one (1.00x, alone) differ. The page must show both as two moments, and say what the
    choice traded in the same words for an rl: policy as for a heuristic."""
    env: Env = make_env(store)
    add_cluster(store)
    job = env.submit(num_gpus=0.25, name="graphsage")
    now = time.time()
    with store.session() as s:
        row = s.get(Job, job["id"])
        assert row is not None
        row.state, row.attempt, row.predicted_slowdown, row.progress = "running", 1, 1.0, 0.1
        s.add(Allocation(job_id=job["id"], attempt=1, rank=0, node="node1", gpu=3, local_gpu=1, share=0.25,
                         allocated_at=now))
        s.add(Decision(job_id=job["id"], at=now - 60, policy="rl:default", action="place",
                       reason="rl:default chose candidate 1 of 2 (Tiresias queue 0)", gpus=[3], share=0.25,
                       predicted_slowdown=1.81, latency_ms=1.0, candidates=[
                           {"gpus": [3], "share": 0.25, "slowdown": 1.81, "others_added": 0.54,
                            "neighbour_job_ids": [7], "computed_at": now - 60},
                           {"gpus": [2], "share": 0.25, "slowdown": 1.0, "others_added": 0.0,
                            "neighbour_job_ids": [], "computed_at": now - 60}]))
    body = env.get(f"/jobs/{job['id']}/explain").json
    chosen = next(c for c in body["decision"]["candidates"] if c["chosen"])
    assert chosen["neighbour_job_ids"] == [7] and chosen["computed_at"] == pytest.approx(now - 60)
    assert body["placement"]["neighbour_job_ids"] == [] and body["placement"]["predicted_slowdown"] == 1.0
    summary = body["summary"]
    assert "predicted slowdown 1.81 beside job 7" in summary
    # One GPU numbering (issue 26): by node and index on the node, the cluster-wide number in parentheses.
    assert "on node1: GPU 1 ×0.25 (cluster GPU 3), predicted slowdown 1.81" in summary
    assert ("it chose slowdown 1.81x, adding 0.54 to its neighbours, over 1.00x, adding 0.00 to its neighbours on "
            "node1: GPU 0 ×0.25 (cluster GPU 2)") in summary
    assert "policy's preference" not in summary
    assert summary.endswith("; now 1.00 alone")


# The holder's reason as the controller writes it: "holds a reservation for 4 GPUs on 2 node(s) (1 free now, ...)".
HOLDER = Reason(Code.RESERVATION, {"gpus": 4, "nodes": 2, "free_now": 1, "waiting_on": [], "more": 0,
                                   "starts_in_s": None})


def run_at(store: Store, job_id: int, gpus: list[int], started_at: float) -> None:
    """Make the job run on whole cluster GPUs `gpus` (2 a node, as `add_cluster` makes them) since `started_at`."""
    with store.session() as s:
        row = s.get(Job, job_id)
        assert row is not None
        row.state, row.attempt, row.predicted_slowdown, row.progress, row.started_at = "running", 1, 1.0, 0.0, started_at
        for rank, g in enumerate(gpus):
            s.add(Allocation(job_id=job_id, attempt=1, rank=rank, node=f"node{g // 2}", gpu=g, local_gpu=g % 2,
                             share=1.0, allocated_at=started_at))


def test_the_replay_reserves_as_the_controller_does_and_runs_end_by_their_time_limits(store: Store,
                                                                                     corral_home: Path) -> None:
    """4 GPUs: `long` (predicted 900 s left, but its 300-s limit stops it in 200 s) on GPUs 0-1, `short` (50 s left)
    on GPU 2. With the server's reservation rule (`corral serve --reserve-share 1`), `gang` (all 4 GPUs) holds a
    reservation in the replay, as the controller gives it: it starts when `long` reaches its limit, and `filler`,
    submitted after it, runs after it (its 1,000 s would hold up the reservation)."""
    env: Env = make_env(store, CORRAL_RESERVATIONS=ReservationRule(after_s=None, share=1.0))
    add_cluster(store)
    with store.session() as s:
        q.activate_policy(s, "fifo-backfill", by="test")
    now = time.time()
    long = env.submit(num_gpus=2, duration_s=1000, time_limit_s=300, name="long")
    short = env.submit(num_gpus=1, duration_s=50, time_limit_s=600, name="short")
    gang = env.submit(num_gpus=4, duration_s=30, name="gang")
    filler = env.submit(num_gpus=1, duration_s=1000, name="filler")
    run_at(store, long["id"], [0, 1], now - 100)
    run_at(store, short["id"], [2], now)
    held, behind = env.get(f"/jobs/{gang['id']}").json, env.get(f"/jobs/{filler['id']}").json
    assert held["start_estimate_s"] == pytest.approx(200.0, abs=5.0), "when long is stopped at its limit"
    assert behind["start_estimate_s"] >= held["start_estimate_s"] + 30.0 - 5.0, "after the gang's 30 s"
    assert "reservations" in held["start_estimate_basis"], held["start_estimate_basis"]
    with store.session() as s:
        reason_columns.set_pending(s.get(Job, gang["id"]), HOLDER)  # type: ignore[arg-type]
    # The holder's answer adds its pending reason (the controller's words of its reservation) to the basis.
    assert env.get(f"/jobs/{gang['id']}").json["start_estimate_basis"].endswith(f"; the job {HOLDER.text}")


def test_a_job_queued_after_the_last_replay_has_no_estimate_yet_not_a_hold(store: Store, corral_home: Path) -> None:
    """Tried as a platform team would: a job just submitted read 'a held job ... has none' until the next replay."""
    with store.session() as s:
        alice = q.ensure_user(s, "alice")
        job, _ = q.submit(s, alice, {"name": "new", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1,
                                     "duration_s": 60.0})
        before = LiveEstimates(at=job.queued_since - 1.0, by_job={}, basis="a replay")
        assert "no start estimate yet" in explain_job(s, job, before)["summary"]
        job.held_at, job.held_by = time.time(), "alice"
        after = LiveEstimates(at=job.queued_since + 1.0, by_job={}, basis="a replay")  # replayed since: held
        assert "a held job" in explain_job(s, job, after)["summary"]

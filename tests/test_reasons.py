"""Reasons as data (`scheduler.core.reasons`): each producer's reason renders the words it gave before codes existed
(the store's and the simulator's texts did not change), every code has words, and a reason survives the store's JSON
and the 0021 migration both ways."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from scheduler.core.decisions import Wait
from scheduler.core.dependencies import Condition, Dependency, Outcome, array_throttle, array_waits, readiness
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.outages import Drain, NodeSpan, eviction_reasons, evictions
from scheduler.core.reasons import TEMPLATES, Code, Reason, duration_words, duration_words_floor
from scheduler.live.retries import retry_reason
from scheduler.live.store import Store, queries, reason_columns
from scheduler.live.store.db import alembic_config, make_engine
from scheduler.live.store.models import Job as JobRow

# One reason of each code, with the words it must read (those the code wrote before reasons had codes).
WORDS = [
    (Reason(Code.POLICY, {"text": "waiting for compact room"}), "waiting for compact room"),
    (Reason(Code.RESERVATION, {"gpus": 4, "nodes": 1, "free_now": 2, "waiting_on": ["a", "b", "c"], "more": 2,
                               "starts_in_s": 725.0}),
     "holds a reservation for 4 GPUs on 1 node(s) (2 free now, kept for it as the rest free); it starts within "
     "12 min, when a, b, c and 2 more reach their time limits"),
    (Reason(Code.RESERVATION, {"gpus": 8, "nodes": 2, "free_now": 0, "waiting_on": ["a"], "more": 0,
                               "starts_in_s": None}),
     "holds a reservation for 8 GPUs on 2 node(s) (0 free now, kept for it as the rest free); it starts when a end "
     "(not all have time limits)"),
    (Reason(Code.RESERVED_GPUS, {"holder": "big"}),
     "the free GPUs it fits on are held for big's reservation; it could use them only if its time limit ended before "
     "the reservation starts"),
    (Reason(Code.CAPACITY, {"gpus": 4, "free": 2}), "waiting for 4 GPUs (2 free)"),
    (Reason(Code.SHARE_CAPACITY, {"share": 0.25, "mem_gb": 6.0, "lack": "mps_user"}),
     "waiting for a 0.25 share on a node running no other user's shares (each node's CUDA MPS serves one user at a "
     "time)"),
    (Reason(Code.SHARE_CAPACITY, {"share": 0.5, "mem_gb": 12.5, "lack": "mps_memory"}),
     "waiting for a GPU whose 0.5 share holds 12.5 GB under MPS (the larger GPUs are busy)"),
    (Reason(Code.SHARE_CAPACITY, {"share": 0.25, "mem_gb": 6.0, "lack": "room"}),
     "waiting for a GPU with a 0.25 share and 6 GB free"),
    (Reason(Code.CONSTRAINED, {"constraints": "gpu=h100", "nodes": 2, "gpus": 8, "share": None, "free": 3,
                               "elsewhere": True}),
     "waiting for 8 GPUs on nodes matching gpu=h100 (2 nodes; 3 free there): it would fit now elsewhere"),
    (Reason(Code.CONSTRAINED, {"constraints": "not on n1", "nodes": 1, "gpus": None, "share": 0.5, "free": 0,
                               "elsewhere": False}),
     "waiting for a GPU with a 0.5 share free on nodes matching not on n1 (1 node; 0 with room there)"),
    (Reason(Code.FITS_NOW, {"policy": "fifo"}), "fits now: fifo chose to wait"),
    (Reason(Code.FITS_SPREAD, {"policy": "p", "gpus": 4, "nodes": 1, "room": 2}),
     "fits only spread over nodes (at most 2 free on one): p chose to wait for 4 on one node"),
    (Reason(Code.FITS_SPREAD, {"policy": "p", "gpus": 5, "nodes": 2, "room": 4}),
     "fits only spread over more than 2 nodes (the 2 with the most room have 4 free): p chose to wait for 5 on 2 "
     "nodes"),
    (queries.held_reason(7, "alice"), "held by alice: it starts only once released (`corral release 7`)"),
    (Reason(Code.DEPENDENCY, {"on": "job 12", "condition": "afterok", "more": 0}), "waiting for job 12 to succeed"),
    (retry_reason(2, 3, 137, 20.0), "exit code 137: retry 2 of 3 in 20 s"),
    (Reason(Code.ARRAY_LIMIT, {"array": "3", "max_running": 2}), "array 3 runs 2 tasks at once, its maximum"),
    (Reason(Code.EVICTED, {"node": "n1", "gpu": 3, "detail": "Xid 79", "requeued": True}),
     "GPU 3 of n1 is faulty (Xid 79): checkpointed and requeued (no restart spent)"),
    (Reason(Code.EVICTED, {"node": "n1", "gpu": None, "detail": "", "requeued": False}), "node n1 was drained now"),
    (Reason(Code.NOT_STARTED, {"timeout_s": 120.0, "nodes": "n1, n2"}),
     "its workers were not up 120 s after it was placed on n1, n2 (Ray did not start them): requeued (no restart "
     "spent)"),
    (Reason(Code.CHECKPOINTED, {"detail": "the controller is stopping"}),
     "the controller is stopping: checkpointed and requeued (no restart spent)"),
    (Reason(Code.REQUEUED, {"by": "bob"}), "requeued by bob: checkpointed, back in the queue (no restart spent)"),
    (Reason(Code.RESIZE_REFUSED, {"job": "bert", "to": 2, "rule": "interval", "ago_s": 120.4, "interval_s": 600.0}),
     "its policy would resize bert to 2 GPUs, resized 120 s ago: a job is resized at most once every 600 s"),
    (Reason(Code.RESIZE_REFUSED, {"job": "bert", "to": 8, "rule": "gain", "gain_s": 20.2, "pause_s": 31.0}),
     "its policy would resize bert to 8 GPUs, which would save 20 s, no more than its 31 s pause"),
    (Reason(Code.RESIZE_REFUSED, {"job": "bert", "to": 2, "rule": "no_start"}),
     "its policy would resize bert to 2 GPUs to make room for no start"),
    (Reason(Code.SIZED_DOWN, {"from": 16, "to": 8, "why": "needs 16 GPUs, the cluster has 8"}),
     "brought down from 16 to 8 GPUs, the most it accepts that the cluster can ever hold (at 16 GPUs it can never "
     "run: needs 16 GPUs, the cluster has 8)"),
    (Reason(Code.REJECTED, {"text": "model X does not fit"}), "model X does not fit"),
    (Reason(Code.EXIT_CODE, {"exit_code": 3, "error": None, "retries": 2}), "exit code 3 (after 2 retries)"),
    (Reason(Code.EXIT_CODE, {"exit_code": 1, "error": "rank 1 exited with code 1", "retries": 0}),
     "rank 1 exited with code 1"),
    (Reason(Code.TIME_LIMIT, {"limit_s": 30.0, "ran_s": 31.4, "grace_s": 10.0}),
     "time limit of 30 s reached (its run had lasted 31 s): stopped with SIGTERM, then SIGKILL after 10 s"),
    (Reason(Code.LOST, {"detail": "node n2 is down"}), "lost: node n2 is down"),
    (Reason(Code.DEPENDENCY_NEVER, {"on": "job 4", "condition": "afterok", "succeeded": False}),
     "its dependency can never be met: it runs afterok job 4, which ended without succeeding"),
]


def test_every_code_has_words_and_an_example_here() -> None:
    assert set(TEMPLATES) == set(Code)
    assert {why.code for why, _ in WORDS} == set(Code), "each code's words are checked below"


@pytest.mark.parametrize(("why", "words"), WORDS, ids=[f"{w.code}-{i}" for i, (w, _) in enumerate(WORDS)])
def test_a_reason_reads_as_it_did_and_survives_json(why: Reason, words: str) -> None:
    assert why.text == words
    back = Reason.from_json(json.loads(json.dumps(why.to_json())))
    assert back == why and back.text == words and type(back.code) is Code


def test_duration_words_read_the_same_down_to_their_floor_and_change_just_below_it() -> None:
    """Each regime's words (seconds, minutes, tenths of hours) stand for every time left above the floor, down to a
    microsecond of it, and change below it: a held wait quoted again until then says what a new rendering would."""
    rng = __import__("random").Random(7)
    edges = [0.4, 0.5, 1.5, 59.5, 119.4, 119.6, 120.0, 150.0, 7169.0, 7199.9, 7200.0, 7380.0, 9000.0, 86400.0]
    lefts = [rng.uniform(0.0, 200_000.0) for _ in range(3000)] + [e + d for e in edges for d in (-1e-7, 0.0, 1e-7)]
    for left in lefts:
        words, floor = duration_words_floor(left)
        assert words == duration_words(left)
        for s in (floor + 2e-6, (floor + left) / 2, left, *(rng.uniform(max(floor, 0.0), left) for _ in range(4))):
            if floor < s <= left:
                assert duration_words(s) == words, (left, s)
        if floor > 0:
            assert duration_words(floor - 1e-3) != words, (left, floor)  # (the floor is the rounding's, not lower)


def test_a_stored_reason_that_is_not_one_names_the_field() -> None:
    with pytest.raises(ValueError, match="code: 'no_such' is not a reason code"):
        Reason.from_json({"code": "no_such", "params": {}})
    with pytest.raises(ValueError, match="code: None is not a reason code"):
        Reason.from_json({"params": {}})
    with pytest.raises(TypeError, match=r"params: \[1\] is not an object"):
        Reason.from_json({"code": "capacity", "params": [1]})


def test_a_wait_carries_its_reason_as_data_and_a_policys_as_its_words() -> None:
    plain = Wait(1, "my own words", 5.0)
    assert plain.why == Reason(Code.POLICY, {"text": "my own words"})
    held = Wait.because(2, Reason(Code.CAPACITY, {"gpus": 4, "free": 1}), until=9.0)
    assert (held.reason, held.until, held.why) == ("waiting for 4 GPUs (1 free)", 9.0,
                                                   Reason(Code.CAPACITY, {"gpus": 4, "free": 1}))


def test_dependency_reasons_carry_their_figures() -> None:
    deps = [Dependency("12", Condition.AFTEROK), Dependency("13", Condition.AFTERANY)]
    waiting = readiness(deps, lambda key: None)
    assert waiting.reason == Reason(Code.DEPENDENCY, {"on": "job 12", "condition": "afterok", "more": 1})
    assert waiting.why == "waiting for job 12 to succeed (and 1 more)"
    never = readiness([Dependency("4", Condition.AFTERNOTOK)], lambda key: Outcome.SUCCEEDED)
    assert never.never and never.reason is not None and never.reason.code is Code.DEPENDENCY_NEVER
    assert never.why == "its dependency can never be met: it runs afternotok job 4, which succeeded"


def test_array_and_eviction_reasons_are_their_words_as_data() -> None:
    def task(i: int) -> Job:
        return Job(i, JobSpec(f"t{i}", 0.0, 1, 10.0, "ResNet-50-bs64", array="7", array_max_running=1), 10.0)

    offered, waits = array_waits([task(1), task(2)], [])
    assert [j.id for j in offered] == [1] and waits == {2: Reason(Code.ARRAY_LIMIT, {"array": "7", "max_running": 1})}
    assert array_throttle([task(1), task(2)], [])[1] == {2: "array 7 runs 1 tasks at once, its maximum"}
    nodes = [NodeSpan("n0", 0, 4), NodeSpan("n1", 4, 4)]
    placements = {1: Placement((1,), 1.0), 2: Placement((5,), 1.0)}
    kw = {"drained": {1: Drain("maintenance", evict=True)}, "faults": {1: "Xid 79"}}
    assert eviction_reasons(nodes, placements, requeued=True, **kw) == {  # type: ignore[arg-type]
        1: Reason(Code.EVICTED, {"node": "n0", "gpu": 1, "detail": "Xid 79", "requeued": True}),
        2: Reason(Code.EVICTED, {"node": "n1", "gpu": None, "detail": "maintenance", "requeued": True})}
    assert evictions(nodes, placements, **kw) == {  # type: ignore[arg-type]
        1: "GPU 1 of n0 is faulty (Xid 79)", 2: "node n1 was drained now (maintenance)"}


def test_a_reason_is_stored_with_its_words_and_cleared_with_them(store: Store) -> None:
    with store.session() as s:
        user = queries.ensure_user(s, "alice")
        job, _ = queries.submit(s, user, {"name": "a", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1,
                                          "duration_s": 10.0})
        queries.hold(s, job, "alice")
    with store.session() as s:
        row = s.get(JobRow, job.id)
        assert row is not None
        assert (row.pending_reason, row.pending_code, row.pending_params) == (
            f"held by alice: it starts only once released (`corral release {job.id}`)", "held",
            {"by": "alice", "job_id": job.id})
        queries.release(s, row, "alice", admin=False)
    with store.session() as s:
        row = s.get(JobRow, job.id)
        assert row is not None and (row.pending_reason, row.pending_code, row.pending_params) == (None, None, None)
        reason_columns.set_end(row, Reason(Code.LOST, {"detail": "node n2 is down"}))
    with store.session() as s:
        row = s.get(JobRow, job.id)
        assert row is not None and (row.error, row.end_code, row.end_params) == (
            "lost: node n2 is down", "lost", {"detail": "node n2 is down"})


def test_migration_0021_adds_the_reason_columns_and_takes_them_away(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    Store.open(url).close()
    engine = make_engine(url)

    def columns() -> set[str]:
        return {c["name"] for c in sa.inspect(engine).get_columns("jobs")}

    added = {"pending_code", "pending_params", "end_code", "end_params"}
    assert added <= columns()
    command.downgrade(alembic_config(url), "0020")
    assert not added & columns() and "pending_reason" in columns()
    command.upgrade(alembic_config(url), "head")
    assert added <= columns()
    engine.dispose()

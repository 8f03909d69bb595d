"""The life cycle (`scheduler.live.lifecycle`): the one place a live job changes state. Its table of legal moves is
checked exhaustively against the one reviewed here; each move writes the row, its event and the controller's memory
together; an illegal move raises and writes nothing; the two racing moves (the API's cancel, the controller's claim)
are decided by the database."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import select

from scheduler.core.model import Job, JobSpec
from scheduler.core.reasons import Code, Reason
from scheduler.core.workloads import catalog
from scheduler.live import lifecycle
from scheduler.live.job_states import JobState as S
from scheduler.live.lifecycle import TRANSITIONS, IllegalTransition, LifeCycle
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import JobEvent

# The reviewed table: a job ends once, never comes back from an end, and runs only from the queue.
LEGAL = {
    (S.PENDING, S.RUNNING), (S.PENDING, S.CANCELLED), (S.PENDING, S.FAILED),
    (S.RUNNING, S.PENDING), (S.RUNNING, S.SUCCEEDED), (S.RUNNING, S.FAILED), (S.RUNNING, S.CANCELLED),
    (S.RUNNING, S.TIMED_OUT),
}


@pytest.mark.parametrize("old", list(S))
@pytest.mark.parametrize("new", list(S))
def test_every_pair_of_states_is_legal_exactly_as_reviewed(old: S, new: S) -> None:
    assert ((old, new) in LEGAL) == (new in TRANSITIONS[old])
    if (old, new) in LEGAL:
        lifecycle.check(1, old, new)
    else:
        with pytest.raises(IllegalTransition, match=f"{old} -> {new}"):
            lifecycle.check(1, old, new)


def test_the_table_has_every_state_and_terminal_states_lead_nowhere() -> None:
    assert set(TRANSITIONS) == set(S)
    assert {s for s in S if not TRANSITIONS[s]} == {s for s in S if s.terminal}
    assert set(lifecycle.legal_moves()) == LEGAL


class FakeRuns:
    """The controller's memory as the life cycle sees it, recording what it was told."""

    def __init__(self) -> None:
        self.pending: dict[int, Job] = {}
        self.running: dict[int, Job] = {}
        self.ended: list[int] = []
        self.queued_reasons: dict[int, Reason | None] = {}
        self.dequeued_ids: list[int] = []

    def end_run(self, s: Any, row: JobRow, now: float) -> Job:
        self.ended.append(row.id)
        return self.running.pop(row.id)

    def enqueue(self, job: Job) -> None:
        self.pending[job.id] = job

    def queued(self, job_id: int, reason: Reason | None) -> None:
        self.queued_reasons[job_id] = reason

    def dequeued(self, job_id: int) -> None:
        self.dequeued_ids.append(job_id)
        self.pending.pop(job_id, None)


def _job(store: Store, state: S = S.PENDING, **fields: Any) -> int:
    with store.session(write=True) as s:
        user = q.ensure_user(s, "ann")
        row = JobRow(user_id=user.id, name="j", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=60.0,
                     submitted_at=time.time(), queued_since=time.time(), state=state, **fields)
        s.add(row)
        s.flush()
        return row.id


def _events(store: Store, job_id: int) -> list[tuple[str, str, dict[str, Any]]]:
    with store.session() as s:
        return [(e.kind, e.message, e.data) for e in s.scalars(select(JobEvent).where(JobEvent.job_id == job_id)
                                                                .order_by(JobEvent.id))]


def _spec_job(job_id: int) -> Job:
    return Job(job_id, JobSpec(name="j", submit_s=0.0, num_gpus=1, duration_s=60.0, model="ResNet-50-bs64"), 60.0)


def test_a_run_ended_writes_the_row_its_event_and_memory_together(store: Store) -> None:
    job_id = _job(store, S.RUNNING, held_at=1.0, held_by="ann")
    runs = FakeRuns()
    runs.running[job_id] = _spec_job(job_id)
    with store.session(write=True) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        why = Reason(Code.EXIT_CODE, {"exit_code": 3, "error": "boom", "retries": 0})
        LifeCycle(runs, catalog()).to_terminal(s, row, S.FAILED, 123.0, event="failed", why=why, exit_code=3,
                                               attempt=1)
    assert runs.ended == [job_id] and job_id in runs.dequeued_ids
    with store.session() as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        assert (row.state, row.finished_at, row.error, row.exit_code) == (S.FAILED, 123.0, "boom", 3)
        assert (row.end_code, row.end_params) == ("exit_code", {"exit_code": 3, "error": "boom", "retries": 0})
        assert row.held_at is None and row.held_by is None and row.pending_reason is None
    assert _events(store, job_id) == [("failed", "boom", {"exit_code": 3, "attempt": 1})]


def test_a_run_back_in_the_queue_takes_its_reason_and_keeps_its_place(store: Store) -> None:
    job_id = _job(store, S.RUNNING)
    runs = FakeRuns()
    runs.running[job_id] = _spec_job(job_id)
    with store.session(write=True) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        why = Reason(Code.REQUEUED, {"by": "ann"})
        job = LifeCycle(runs, catalog()).to_pending(s, row, 50.0, event="checkpointed", reason=why)
    assert runs.ended == [job_id] and runs.pending == {job_id: job} and runs.queued_reasons == {job_id: why}
    with store.session() as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        assert (row.state, row.queued_since, row.pending_reason, row.pending_until) == (S.PENDING, 50.0, why.text, None)
        assert (row.pending_code, row.pending_params) == ("requeued", {"by": "ann"})
    assert _events(store, job_id) == [("checkpointed", why.text, {})]


@pytest.mark.parametrize("state", [s for s in S if s.terminal])
def test_an_ended_job_refuses_every_move_and_nothing_is_written(store: Store, state: S) -> None:
    job_id = _job(store, state, error="kept")
    runs = FakeRuns()
    moves = LifeCycle(runs, catalog())
    with store.session(write=True) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        with pytest.raises(IllegalTransition):
            moves.to_pending(s, row, 1.0, event="requeued", message="x")
        for other in S:
            if other != state:
                with pytest.raises(IllegalTransition):
                    moves.to_terminal(s, row, other, 1.0, event="x", why=Reason(Code.LOST, {"detail": "x"}))
    with store.session() as s:
        row = s.get(JobRow, job_id)
        assert row is not None and row.state == state and row.error == "kept"
    assert _events(store, job_id) == [] and runs.pending == {} and runs.dequeued_ids == []


def test_a_lost_run_is_requeued_while_restarts_last_then_fails(store: Store) -> None:
    job_id = _job(store, S.RUNNING, restart_policy="requeue", max_restarts=1)
    runs = FakeRuns()
    moves = LifeCycle(runs, catalog())
    with store.session(write=True) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        moves.lose(s, row, "node gone", 10.0)
        assert row.state == S.PENDING and row.restarts == 1
        row.state = S.RUNNING  # (placed again, as the controller's claim would: the test's shortcut)
        moves.lose(s, row, "node gone again", 20.0)
        assert row.state == S.FAILED and row.error == "lost: node gone again" and row.end_code == "lost"
    kinds = [k for k, _, _ in _events(store, job_id)]
    assert kinds == ["lost", "requeued", "lost", "failed"]


def test_the_api_cancel_and_the_controller_claim_race_through_the_database(store: Store) -> None:
    first, second, held = _job(store), _job(store), _job(store, held_at=1.0, held_by="ann")
    with store.session(write=True) as s:
        assert lifecycle.claim(s, first, 1, 1.0)
        assert not lifecycle.cancel_pending(s, first, 2.0)  # placed first: the cancel is the controller's to do
        assert lifecycle.cancel_pending(s, second, 2.0)
        assert not lifecycle.claim(s, second, 1, 1.0)  # cancelled first: it is not placed
        assert not lifecycle.claim(s, held, 1, 1.0)  # held: it waits
    with store.session() as s:
        states = {i: s.get(JobRow, i).state for i in (first, second, held)}  # type: ignore[union-attr]
    assert states == {first: S.RUNNING, second: S.CANCELLED, held: S.PENDING}

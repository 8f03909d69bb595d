"""A submission's reads in one statement (`scheduler.live.store.submission_reads`, issue 48): what it reads (the
recorded capacity, the time limits, the team) is what the statements it replaced read, the user's row is locked as
they locked it, and a job stored this way is the job and `submitted` event the store always stored; on SQLite and
on PostgreSQL (the `store` fixture)."""

from __future__ import annotations

import threading
import time

from conftest import InMemoryBackend, waits_for
from sqlalchemy import select, update

from scheduler.live import submissions
from scheduler.live.cluster import build_live_cluster
from scheduler.live.job_accounts import JobAccounts
from scheduler.live.nodes import RECORDED_CAPACITY, register_nodes
from scheduler.live.store import JobState, Store, queries
from scheduler.live.store.models import Job, JobEvent, Node, Team, User
from scheduler.live.store.submission_reads import submission_reads
from scheduler.live.webhooks import AllowList

EMULATED = {"name": "a", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 10.0}
NODES = ["n0", "n1", "n2"]


def _cluster(store: Store) -> None:
    """Three nodes of 8 GPUs, n2 down, and a team `vision` with vera in it."""
    with store.session(write=True) as s:
        register_nodes(s, InMemoryBackend(NODES, 8).nodes(), build_live_cluster("dgx-a100", [8] * 3), NODES,
                       ["dgx-a100"] * 3, time.time())
        s.execute(update(Node).where(Node.name == "n2").values(alive=False))
        now = time.time()
        s.add(Team(name="vision", quota_gpus=8.0, borrow_limit_gpus=None, created_at=now, updated_at=now))
        s.flush()
        queries.ensure_user(s, "vera", team="vision")
        queries.ensure_user(s, "alice")


def test_the_one_statement_reads_what_the_three_did(store: Store) -> None:
    with store.session(write=True) as s:  # nothing recorded yet: no capacity, no limits, the default team
        alice = queries.ensure_user(s, "alice")
        reads = submission_reads(s, alice.id)
        assert (reads.recorded_gpus, reads.time_limits, reads.team) == (0, (None, None), "default")
    _cluster(store)
    with store.session(write=True) as s:
        queries.set_time_limits(s, {"default_s": 600.0, "max_s": 7200.0}, by="root")
    for for_update in (False, True):
        with store.session(write=True) as s:
            vera = queries.ensure_user(s, "vera")
            reads = submission_reads(s, vera.id, for_update=for_update)
            total, largest = s.execute(RECORDED_CAPACITY).one()
            assert (reads.recorded_gpus, reads.largest_gpu_gb) == (total, largest) == (24, 80.0)  # n2's 8 counted
            assert reads.time_limits == queries.time_limit_settings(s) == (600.0, 7200.0)
            assert reads.team == queries.submitter_team(s, vera.id) == "vision"


def _rules() -> submissions.Rules:
    return submissions.Rules(command_jobs="isolated", accounts=JobAccounts(), webhook_allow=AllowList())


def _submit(store: Store, name: str, fields: dict[str, object], **kw: object) -> Job:
    with store.session(write=True) as s:
        user = queries.ensure_user(s, name)
        return submissions.submit(s, user, submissions.check(fields, user, _rules()), **kw).job  # type: ignore[arg-type]


def test_a_job_stored_through_the_reads_is_the_job_and_event_as_before(store: Store) -> None:
    """Team, time limit, the capacity check and the event: each as the statements they replaced gave them."""
    _cluster(store)
    with store.session(write=True) as s:
        queries.set_time_limits(s, {"default_s": 600.0, "max_s": 7200.0}, by="root")
    job = _submit(store, "vera", {**EMULATED, "client_token": "t-1"}, max_pending=10)
    again = _submit(store, "vera", {**EMULATED, "client_token": "t-1"}, max_pending=10)
    assert again.id == job.id  # a known client token: the first job, nothing new
    with store.session() as s:
        row = s.get(Job, job.id)
        assert row is not None
        assert (row.team, row.time_limit_s, row.state, row.user_id) == ("vision", 600.0, JobState.PENDING, job.user_id)
        events = s.execute(select(JobEvent.kind, JobEvent.message, JobEvent.data).where(JobEvent.job_id == job.id))
        assert [tuple(e) for e in events] == [("submitted", "submitted by vera", {})]
        columns = [c.key for c in Job.__table__.columns]
        assert {c: getattr(row, c) for c in columns} == {c: getattr(job, c) for c in columns}  # as RETURNING gave it
        assert s.query(Job).count() == 1
    try:  # 25 GPUs: more than the 24 recorded (n2's, down, count: the controller's model keeps it)
        _submit(store, "alice", {**EMULATED, "num_gpus": 25})
    except submissions.InvalidField as exc:
        assert exc.field == "num_gpus"
    else:
        raise AssertionError("25 GPUs on 24 were accepted")
    try:
        _submit(store, "alice", {**EMULATED, "time_limit_s": 9000.0})
    except submissions.InvalidField as exc:
        assert exc.field == "time_limit_s"
    else:
        raise AssertionError("a time limit above the maximum was accepted")


def test_a_move_waits_for_an_open_submission_and_then_sees_its_job(store: Store) -> None:
    """The user's row is locked by the one statement: a move of the user made while a submission's transaction is
    open waits for it (PostgreSQL's row lock; SQLite's one writer), then refuses, the job counted in the old team."""
    _cluster(store)
    with store.session() as s:
        vera = queries.ensure_user(s, "vera")
        user = User(id=vera.id, name=vera.name, admin=False)  # a detached stand-in, as the API passes: no lock of its own

    def submit_and_hold(submitted: threading.Event, go: threading.Event) -> int:
        with store.session(write=True) as s:
            done = submissions.submit(s, user, submissions.check(dict(EMULATED), user, _rules()))
            submitted.set()
            assert go.wait(10)
            return done.job.id

    def move() -> object:
        with store.session(write=True) as s:
            return queries.move_user(s, queries.ensure_user(s, "vera"), "default")

    job_id, moved = waits_for(submit_and_hold, move, "the move")
    assert isinstance(moved, queries.TeamConflict), moved
    with store.session() as s:
        assert s.get(Job, job_id).team == "vision"  # type: ignore[union-attr]


def test_the_one_statement_inserts_kept_per_shape_stay_bounded() -> None:
    """The job-and-event statements are kept per set of columns a submission gives; optional fields combine, so a
    user varying them must not grow the server's memory without end (`_WITH_EVENT_KEPT`)."""
    from scheduler.live.store import jobs as job_store

    optional = sorted(col.name for col in job_store._JOB_TABLE.c if col.name not in ("id", "user_id", "name"))[:8]
    shapes = [frozenset({"user_id", "name", *(c for k, c in enumerate(optional) if n >> k & 1)}) for n in range(200)]
    for shape in shapes:
        statement = job_store._job_with_event(shape)
        assert job_store._job_with_event(shape) is statement  # kept while there is room
        assert len(job_store._WITH_EVENT) <= job_store._WITH_EVENT_KEPT < len(shapes)

"""A command job that gives no duration gets the run time of similar jobs that succeeded (scheduler/live/durations.py
over scheduler/core/durations.py), with what it rests on; the flat default only while nothing similar has ended. On
SQLite and PostgreSQL, without HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.live import durations
from scheduler.live.job_accounts import JobAccounts
from scheduler.live.store import JobState, Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job, User
from scheduler.live.submissions import DEFAULT_COMMAND_DURATION_S, Rules, check, resubmitted, submit
from scheduler.live.webhooks import AllowList
from web.schemas.jobs import JobSubmitSchema

RULES = Rules(command_jobs="all", accounts=JobAccounts(), webhook_allow=AllowList())


@pytest.fixture(autouse=True)
def fresh_predictors() -> Iterator[None]:
    durations.STORE_DURATIONS.forget()  # (a predictor built for another test's database of the same URL)
    yield
    durations.STORE_DURATIONS.forget()


def user(store: Store, name: str) -> User:
    with store.session(write=True) as s:
        row = q.ensure_user(s, name)
        return User(id=row.id, name=row.name, admin=True)


def submitted(store: Store, who: User, **given: Any) -> Job:
    loaded = JobSubmitSchema().load({"name": "train-lr3", "kind": "command", "entrypoint": "python train.py",
                                     "model": "ResNet-50-bs64", "num_gpus": 1, **given})
    with store.session(write=True) as s:
        job = submit(s, who, check(loaded, who, RULES)).job
        s.flush()
        s.expunge(job)
        return job


def ran(store: Store, job_id: int, run_s: float, slowdown: float = 1.0) -> None:
    """The job succeeded after its workers ran `run_s`, slowed by `slowdown` as the model predicted."""
    with store.session(write=True) as s:
        row = s.get(Job, job_id)
        assert row is not None
        row.state, row.run_s, row.predicted_slowdown_avg, row.finished_at = (
            JobState.SUCCEEDED, run_s, slowdown, time.time())


def test_a_job_without_a_duration_gets_what_similar_jobs_ran(store: Store) -> None:
    ann, bob = user(store, "ann"), user(store, "bob")
    first = submitted(store, ann, name="train-lr1")
    assert first.duration_s == DEFAULT_COMMAND_DURATION_S
    assert first.duration_estimate is not None and first.duration_estimate["n"] == 0
    assert first.duration_estimate["text"] == "no similar job has ended yet: the default, 60 min"
    given = submitted(store, ann, name="train-lr2", duration_s=120)
    assert (given.duration_s, given.duration_estimate) == (120, None)  # what the user gave stands

    # Ann's sweep: five runs of 10 min each, one of them slowed 2x by its neighbours (20 min of wall time).
    for i, (run_s, slowdown) in enumerate([(600, 1), (600, 1), (1200, 2), (600, 1), (600, 1)]):
        ran(store, submitted(store, ann, name=f"train-lr{i + 3}").id, run_s, slowdown)
    # Bob's jobs of another name ran 2 h.
    for i in range(5):
        ran(store, submitted(store, bob, name=f"eval-{i}").id, 7200)
    durations.STORE_DURATIONS.forget()  # (the predictor is rebuilt at most every REFRESH_S: now, for the test)

    nxt = submitted(store, ann, name="train-lr99")
    assert nxt.duration_s == pytest.approx(600)  # isolated: the slowed run taught 10 min, not 20
    est = nxt.duration_estimate
    assert est is not None and est["n"] == 5 and est["basis"] == ["user", "pattern", "model", "gpus"]
    assert est["text"].startswith("similar jobs (same user, name pattern, model, size) ran 10 min median (n = 5)")
    # Bob's new kind of job: nothing of his ran under that name; his own jobs are the nearest group.
    other = submitted(store, bob, name="sweep-x")
    assert other.duration_s == pytest.approx(7200) and other.duration_estimate is not None
    assert other.duration_estimate["basis"] == ["user", "model", "gpus"]


def test_only_succeeded_runs_teach_and_the_history_is_read_at_most_every_refresh(store: Store) -> None:
    ann = user(store, "ann")
    for i in range(5):
        ran(store, submitted(store, ann, name=f"a-{i}").id, 300)
    for i in range(5):  # cancelled after 5 s: they say only that the job runs longer, not how long
        job = submitted(store, ann, name=f"a-{i}")
        with store.session(write=True) as s:
            row = s.get(Job, job.id)
            assert row is not None
            row.state, row.run_s, row.finished_at = JobState.CANCELLED, 5.0, time.time()
    durations.STORE_DURATIONS.forget()
    assert submitted(store, ann, name="a-7").duration_s == pytest.approx(300)
    for i in range(10):  # these end after the predictor was built: learned at its next rebuild, not at once
        ran(store, submitted(store, ann, name=f"a-{i}").id, 900)
    assert submitted(store, ann, name="a-8").duration_s == pytest.approx(300)
    durations.STORE_DURATIONS.forget()
    assert submitted(store, ann, name="a-9").duration_s == pytest.approx(900)  # the group's recent runs


def test_a_resubmission_estimates_anew_unless_the_duration_was_given(store: Store) -> None:
    ann = user(store, "ann")
    estimated = submitted(store, ann, name="r-1")
    given = submitted(store, ann, name="r-2", duration_s=42)
    assert "duration_s" not in resubmitted(estimated, {})
    assert resubmitted(given, {})["duration_s"] == 42

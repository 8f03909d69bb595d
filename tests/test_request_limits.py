"""Per-user limits on every authenticated request (issue 46, item 2): a token bucket (`request_rate`/`request_burst`,
429 with Retry-After) and a cap on requests in progress at once, so one user's many threads cannot hold every one of
the server's. Admins are exempt. On SQLite and PostgreSQL (the `store` fixture); time is driven by the app's clock."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select
from test_api import API, EMULATED, Env, make_env
from test_fair_use import Clock, set_limits

from scheduler.live.store import Store
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import User

WAIT_S = 30.0


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def env(store: Store, corral_home: Path, clock: Clock) -> Env:
    return make_env(store, CORRAL_CLOCK=clock)


def test_a_user_past_the_request_rate_gets_429_with_retry_after_and_others_are_fine(env: Env, clock: Clock) -> None:
    set_limits(env, "/users/alice/limits", request_rate=0.5, request_burst=3)
    assert [env.get("/jobs").status_code for _ in range(3)] == [200] * 3
    refused = env.get("/jobs")
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "2"  # a token every 2 s
    assert refused.json["message"].startswith("request_rate: alice may make 0.5 request(s) a second after a burst "
                                              "of 3 (every 64 KiB of an answer counts as one more); try again in 2 s")
    assert env.post("/jobs", EMULATED).status_code == 429  # every kind of request counts
    assert env.get("/jobs", "bob").status_code == 200  # alice's limit is hers alone
    assert all(env.get("/jobs", "root").status_code == 200 for _ in range(10))  # admins are exempt
    clock.advance(2.0)
    assert env.get("/jobs").status_code == 200  # a token earned
    assert env.get("/jobs").status_code == 429
    # The built-in default binds too: bob's burst of 200 (full again two seconds later), then a refusal.
    codes = [env.get("/jobs", "bob").status_code for _ in range(201)]
    assert codes.count(200) == 200 and codes[-1] == 429


def test_a_token_refused_for_its_rate_is_answered_without_the_database(env: Env, clock: Clock) -> None:
    """Until its Retry-After, a refused token's requests get the same refusal from the front of the app: no token
    lookup, no statement (a flood of refused requests then costs little); afterwards the app answers again."""
    set_limits(env, "/users/alice/limits", request_rate=0.25, request_burst=1)
    assert env.get("/jobs").status_code == 200
    first = env.get("/jobs")
    assert first.status_code == 429 and first.headers["Retry-After"] == "4"
    statements = [0]

    def count(*_: Any) -> None:
        statements[0] += 1

    event.listen(env.store.engine, "before_cursor_execute", count)
    try:
        clock.advance(1.5)
        again = env.get("/jobs")
    finally:
        event.remove(env.store.engine, "before_cursor_execute", count)
    assert again.status_code == 429 and again.json == first.json and statements == [0]
    assert again.headers["Retry-After"] == "3"  # what is left of the wait
    assert "Content-Security-Policy" in again.headers  # the app's headers, as on every answer
    assert env.get("/jobs", "bob").status_code == 200
    clock.advance(2.5)
    assert env.get("/jobs").status_code == 200


def test_a_large_answer_costs_one_more_token_per_64_kib(env: Env) -> None:
    """A full list costs the server what many small requests do, and the user's bucket as much."""
    now = time.time()
    with env.store.session() as s:
        alice = s.scalars(select(User.id).where(User.name == "alice")).one()
        s.add_all(JobRow(user_id=alice, name=f"j{i}-" + "x" * 150, kind="emulated", model="ResNet-50-bs64",
                         num_gpus=1, duration_s=60.0, submitted_at=now, queued_since=now, state="succeeded", env={})
                  for i in range(300))
    set_limits(env, "/users/alice/limits", request_rate=0.001, request_burst=8)
    big = env.get("/jobs?limit=1000")
    assert big.status_code == 200 and len(big.json["jobs"]) == 300
    extra = len(big.data) // (64 * 1024)
    assert extra >= 2
    codes = [env.get("/jobs?limit=1").status_code for _ in range(8)]
    assert codes == [200] * (8 - 1 - extra) + [429] * (1 + extra)  # the big one took 1 + extra of the 8


def test_a_user_past_the_requests_in_progress_gets_429_while_others_are_served(store: Store,
                                                                              corral_home: Path) -> None:
    """Two of alice's submissions are held in progress (in the notify hook, after their job is stored); with at most
    2 in progress a third request of hers is refused at once, bob's and an admin's are answered."""
    entered = threading.Semaphore(0)
    release = threading.Event()

    def notify() -> None:
        entered.release()
        release.wait(WAIT_S)

    env = make_env(store, CORRAL_MAX_IN_FLIGHT=2)
    env.client.application.extensions["corral.notify"] = notify
    app = env.client.application
    def submit(i: int) -> Any:
        return app.test_client().post(f"{API}/jobs", json=EMULATED | {"name": f"h{i}"}, headers=env.auth())

    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(submit, i) for i in range(2)]
        try:
            assert entered.acquire(timeout=WAIT_S) and entered.acquire(timeout=WAIT_S)
            refused = env.get("/jobs")
            assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
            assert refused.json["message"].startswith("requests in progress: alice has 2 request(s) in progress, "
                                                      "the most one user may have at once")
            assert env.get("/jobs", "bob").status_code == 200
            assert env.get("/jobs", "root").status_code == 200
        finally:
            release.set()
        assert [f.result(WAIT_S).status_code for f in held] == [201, 201]
    assert env.get("/jobs").status_code == 200  # each gave its place back when answered

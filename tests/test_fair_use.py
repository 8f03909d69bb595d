"""Fair use (issue 25, item 4), on SQLite and on PostgreSQL (the `store` fixture): per-user limits on pending jobs,
on submissions a second and on what-ifs a minute, set by admins (API and CLI) as cluster-wide defaults with per-user
overrides, admins exempt; and a non-admin's what-if bounded by its own size, not by everybody's queue.

Time is driven by a clock put in the app's config (`CORRAL_CLOCK`), never by sleeping."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from test_api import API, EMULATED, Env, make_env
from test_client_cli import Server, corral, server  # noqa: F401 (server: the fixture)
from test_whatif import MODEL
from test_whatif import Env as WhatIfEnv

from scheduler.live.store import JobState, Store, queries
from scheduler.live.store.models import Job, LimitDefaults, UserLimits
from scheduler.live.store.queries import BUILTIN_LIMITS, create_token


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def env(store: Store, corral_home: Path, clock: Clock) -> Env:
    return make_env(store, CORRAL_CLOCK=clock)


def patch(env: Env, path: str, body: Any, who: str = "root") -> Any:
    return env.client.patch(API + path, json=body, headers=env.auth(who))


def set_limits(env: Env, path: str, **values: Any) -> dict[str, Any]:
    resp = patch(env, path, values)
    assert resp.status_code == 200, resp.json
    return resp.json  # type: ignore[no-any-return]


def post_job(env: Env, who: str = "alice", **overrides: Any) -> Any:
    return env.post("/jobs", EMULATED | overrides, who)


def pending_of(store: Store, name: str) -> int:
    with store.session() as s:
        user = queries.user_by_name(s, name)
        assert user is not None
        return queries.pending_jobs_of_user(s, user.id)


# ---- max_pending ---------------------------------------------------------------------------------------------------


def test_pending_cap_refuses_new_jobs_not_retries_and_not_admins(env: Env) -> None:
    set_limits(env, "/users/alice/limits", max_pending=3)
    first = [post_job(env, name=f"j{i}", client_token=f"t{i}") for i in range(3)]
    assert [r.status_code for r in first] == [201] * 3
    refused = post_job(env, name="j3")
    assert refused.status_code == 429
    assert refused.json["message"].startswith("max_pending: alice has 3 job(s) pending, the most a user may have is 3")
    assert "Retry-After" not in refused.headers  # when a slot frees depends on the scheduler
    assert pending_of(env.store, "alice") == 3
    retry = post_job(env, name="j0", client_token="t0")  # a retry adds nothing: never refused
    assert retry.status_code == 200 and retry.json["id"] == first[0].json["id"]
    assert post_job(env, "bob").status_code == 201  # alice's override is hers alone
    env.post(f"/jobs/{first[0].json['id']}/cancel")
    assert post_job(env, name="j4").status_code == 201  # a slot freed
    # The cluster-wide default binds everyone without an override; admins are exempt.
    set_limits(env, "/limits", max_pending=1)
    assert post_job(env, "bob").status_code == 429
    assert all(post_job(env, "root", name=f"r{i}").status_code == 201 for i in range(3))


def test_pending_cap_does_not_overshoot_under_concurrent_submissions(env: Env) -> None:
    """16 threads submit at once for one user with a cap of 5: exactly 5 land. (On PostgreSQL each submission counts
    under a lock on the user's row; without it, concurrent counts all see 4 and the cap overshoots.)"""
    set_limits(env, "/users/alice/limits", max_pending=5, submit_rate=10_000, submit_burst=1_000)
    app = env.client.application
    start = threading.Barrier(16)

    def post(i: int) -> int:
        client = app.test_client()
        if i < 16:
            start.wait(30)
        return client.post(f"{API}/jobs", json=EMULATED | {"name": f"c{i}"}, headers=env.auth()).status_code

    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(post, range(64)))
    assert sorted(set(codes)) == [201, 429] and codes.count(201) == 5
    assert pending_of(env.store, "alice") == 5


# ---- submit_rate / submit_burst ------------------------------------------------------------------------------------


def test_submission_rate_is_a_token_bucket_with_retry_after(env: Env, clock: Clock) -> None:
    set_limits(env, "/users/alice/limits", submit_rate=2, submit_burst=3)
    assert [post_job(env, name=f"b{i}", client_token=f"b{i}").status_code for i in range(3)] == [201] * 3
    refused = post_job(env, name="b3")
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"  # half a second, rounded up
    assert refused.json["message"].startswith("submit_rate: alice may submit 2 job(s) a second after a burst of 3")
    assert env.job_count() == 3
    # A retry of a job already stored is no new submission: not refused with the bucket empty, not counted.
    again = post_job(env, name="b0", client_token="b0")
    assert again.status_code == 200
    clock.advance(0.5)  # one token back
    assert post_job(env, name="b0", client_token="b0").status_code == 200  # takes it, then gives it back
    assert post_job(env, name="b4").status_code == 201
    assert post_job(env, name="b5").status_code == 429
    clock.advance(10)  # the bucket refills up to its burst, no further
    assert [post_job(env, name=f"c{i}").status_code for i in range(4)] == [201, 201, 201, 429]
    assert post_job(env, "bob").status_code == 201  # each user has their own bucket
    set_limits(env, "/limits", submit_rate=0.001, submit_burst=1)
    assert all(post_job(env, "root", name=f"r{i}").status_code == 201 for i in range(5))  # admins are exempt


def test_a_flood_is_held_to_the_default_rate(env: Env, clock: Clock) -> None:
    """Issue 25's flood, in miniature: a user sending as fast as they can gets the burst, then the rate."""
    codes = [post_job(env, name=f"f{i}").status_code for i in range(BUILTIN_LIMITS.submit_burst + 20)]
    assert codes.count(201) == BUILTIN_LIMITS.submit_burst and codes[-1] == 429
    clock.advance(1.0)
    codes = [post_job(env, name=f"g{i}").status_code for i in range(20)]
    assert codes.count(201) == int(BUILTIN_LIMITS.submit_rate)


# ---- whatif_per_min ------------------------------------------------------------------------------------------------


@pytest.fixture
def wenv(store: Store, corral_home: Path, clock: Clock) -> WhatIfEnv:
    e = WhatIfEnv(store, config={"CORRAL_CLOCK": clock})
    e.register_nodes()
    e.activate("fifo")
    with store.session() as s:
        e.tokens["bob"] = create_token(s, "bob")
    return e


def test_whatifs_a_minute_are_limited_with_retry_after(wenv: WhatIfEnv, clock: Clock) -> None:
    resp = wenv.client.patch(f"{API}/users/alice/limits", json={"whatif_per_min": 2},
                             headers={"Authorization": f"Bearer {wenv.tokens['root']}"})
    assert resp.status_code == 200, resp.json
    assert [wenv.post({"seeds": 1}).status_code for _ in range(2)] == [200, 200]
    refused = wenv.post({"seeds": 1})
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "30"  # 2 a minute: one every 30 s
    assert refused.json["message"].startswith("whatif_per_min: alice may run 2 what-if(s) a minute")
    assert wenv.post({"seeds": 1}, who="bob").status_code == 200  # bob has his own
    clock.advance(30)
    assert wenv.post({"seeds": 1}).status_code == 200
    assert wenv.post({"seeds": 1}).status_code == 429
    assert all(wenv.post({"seeds": 1}, who="root").status_code == 200 for _ in range(3))  # admins are exempt


# ---- the what-if budget counts the request, not everybody's queue ---------------------------------------------------


def flood(wenv: WhatIfEnv, n: int) -> None:
    """`n` pending jobs of alice's, written as the API would have (issue 25: 3,025 of them were pending)."""
    now = time.time()
    with wenv.store.session() as s:
        s.add_all([Job(user_id=wenv.alice, name=f"flood-{i}", kind="emulated", model=MODEL, num_gpus=1,
                       duration_s=600, submitted_at=now - 100 + i * 0.01, queued_since=now - 100,
                       state=JobState.PENDING, env={}) for i in range(n)])


@pytest.mark.slow
def test_another_users_queue_does_not_fail_a_whatif(wenv: WhatIfEnv) -> None:
    """Issue 25: with 3,025 of one user's jobs pending, every other non-admin's what-if failed with 422 ("3025 jobs
    exceed the budget"). Now it succeeds, simulating the first pending jobs in queue order and saying how many it
    left out; the budget still bounds what the request itself brings."""
    flood(wenv, 3025)
    out = wenv.ok({}, who="bob")
    assert out["bounds"] == {"budget": 2500, "request_job_seeds": 0, "queue_cap": 100, "pending_total": 3025,
                             "pending_simulated": 100, "pending_left_out": 2925}
    assert out["jobs"]["pending"] == 100 and out["metrics"]["jobs_completed"]["per_seed"] == [100] * 5
    assert any("2925 of the 3025 pending job(s) were left out" in n and "optimistic" in n for n in out["notes"])
    one = wenv.ok({"seeds": 1, "jobs": [{"model": MODEL, "num_gpus": 2, "duration_s": 300}]}, who="bob")
    assert one["bounds"]["pending_simulated"] == 100 and one["bounds"]["request_job_seeds"] == 1
    assert one["hypothetical"][0]["completed_in"] == 1
    admin = wenv.ok({"seeds": 1}, who="root")  # admins simulate the whole queue
    assert admin["bounds"]["pending_simulated"] == 3025 and admin["bounds"]["pending_left_out"] == 0
    assert admin["bounds"]["budget"] is None and admin["bounds"]["queue_cap"] is None


def test_the_budget_names_the_requests_own_fields_only(store: Store, corral_home: Path) -> None:
    wenv = WhatIfEnv(store, config={"CORRAL_WHATIF_BUDGET": 100})
    wenv.register_nodes()
    wenv.activate("fifo")
    flood(wenv, 500)
    jobs = [{"model": MODEL, "num_gpus": 1, "duration_s": 60}] * 30
    resp = wenv.post({"jobs": jobs, "seeds": 4})  # 30 of its own jobs x 4 seeds = 120 > 100
    assert resp.status_code == 422 and "at most 3 seeds" in resp.json["errors"]["json"]["seeds"][0]
    out = wenv.ok({"jobs": jobs, "seeds": 3})  # 90 fit, whatever the queue
    assert out["bounds"]["request_job_seeds"] == 90 and out["bounds"]["pending_left_out"] == 500 - 100


# ---- setting limits: API and CLI ------------------------------------------------------------------------------------


def test_admins_set_and_show_defaults_and_overrides(env: Env) -> None:
    builtin = {"max_pending": 1000, "submit_rate": 10.0, "submit_burst": 100, "whatif_per_min": 60,
               "request_rate": 50.0, "request_burst": 200}
    everything_built_in = dict.fromkeys(builtin, "built-in")
    got = env.get("/limits", "root").json
    assert got == {"user": None, "exempt": False, **builtin, "sources": everything_built_in}
    got = set_limits(env, "/limits", max_pending=500, whatif_per_min=30)
    assert got["max_pending"] == 500 and got["sources"]["max_pending"] == "cluster"
    got = set_limits(env, "/users/alice/limits", submit_rate=2.5, max_pending=20)
    assert got["user"] == "alice" and got["submit_rate"] == 2.5 and got["max_pending"] == 20
    assert got["whatif_per_min"] == 30 and got["submit_burst"] == 100
    assert got["sources"] == {"max_pending": "user", "submit_rate": "user", "submit_burst": "built-in",
                              "whatif_per_min": "cluster", "request_rate": "built-in", "request_burst": "built-in",
                              "max_priority": "built-in", "allow_nonpreemptible": "built-in",
                              "priority_classes": "built-in"}  # her ceiling
    assert env.get("/users/alice/limits", "root").json == got
    cleared = set_limits(env, "/users/alice/limits", max_pending=None)  # back to the cluster's default
    assert cleared["max_pending"] == 500 and cleared["sources"]["max_pending"] == "cluster"
    assert set_limits(env, "/limits", max_pending=None)["sources"]["max_pending"] == "built-in"
    bob = env.get("/users/bob/limits", "root").json
    assert bob["sources"] == everything_built_in | {"whatif_per_min": "cluster", "max_priority": "built-in",
                                                    "allow_nonpreemptible": "built-in", "priority_classes": "built-in"}
    assert env.get("/users/root/limits", "root").json["exempt"] is True
    assert env.get("/users/nobody/limits", "root").status_code == 404
    assert patch(env, "/users/nobody/limits", {"max_pending": 3}).status_code == 404
    for method, path in [("GET", "/limits"), ("PATCH", "/limits"), ("GET", "/users/alice/limits"),
                         ("PATCH", "/users/alice/limits"), ("PATCH", "/users/bob/limits")]:
        resp = env.client.open(API + path, method=method, json={"max_pending": 100000}, headers=env.auth("alice"))
        assert resp.status_code == 403 and "not an admin" in resp.json["message"], (method, path)
    assert env.get("/users/alice/limits", "root").json["max_pending"] == 1000  # nothing changed


@pytest.mark.parametrize(("body", "field"), [
    ({"max_pending": 0}, "max_pending"), ({"max_pending": -1}, "max_pending"), ({"max_pending": 2**40}, "max_pending"),
    ({"max_pending": 2.5}, "max_pending"), ({"max_pending": "10"}, "max_pending"),
    ({"submit_rate": 0}, "submit_rate"), ({"submit_rate": "fast"}, "submit_rate"),
    ({"submit_rate": 1e9}, "submit_rate"),
    ({"submit_burst": 0}, "submit_burst"), ({"submit_burst": True}, "submit_burst"),
    ({"whatif_per_min": 0}, "whatif_per_min"), ({"whatif_per_min": False}, "whatif_per_min"),
    ({"request_rate": 0}, "request_rate"), ({"request_rate": 1e9}, "request_rate"),
    ({"request_burst": 0}, "request_burst"), ({"request_burst": 2.5}, "request_burst"),
    ({"max_pending": 5, "bogus": 1}, "bogus"), ({}, "_schema"),
])
@pytest.mark.parametrize("path", ["/limits", "/users/alice/limits"])
def test_bad_values_are_422_naming_the_field_and_change_nothing(env: Env, path: str, body: dict[str, Any],
                                                                field: str) -> None:
    resp = patch(env, path, body)
    assert resp.status_code == 422, resp.json
    assert field in resp.json["errors"]["json"]
    assert field in resp.json["message"] or field == "_schema"
    with env.store.session() as s:
        assert s.scalar(select(func.count()).select_from(LimitDefaults)) == 0
        assert s.scalar(select(func.count()).select_from(UserLimits)) == 0


def test_the_cli_sets_and_shows_limits(server: Server) -> None:  # noqa: F811 (the fixture)
    with server.store.session() as s:
        root = create_token(s, "root", admin=True)
    shown = corral(server, "user", "limits", "alice", token=root)
    assert shown.exit_code == 0, shown.output
    assert "user alice" in shown.output and "built-in" in shown.output
    out = corral(server, "user", "limits", "alice", "--max-pending", "7", "--submit-rate", "2.5", token=root)
    assert out.exit_code == 0, out.output
    res = corral(server, "user", "limits", "alice", "--json", token=root)
    got = __import__("json").loads(res.output)
    assert got["max_pending"] == 7 and got["submit_rate"] == 2.5 and got["sources"]["max_pending"] == "user"
    out = corral(server, "limits", "--whatif-per-min", "30", "--submit-burst", "40", token=root)
    assert out.exit_code == 0 and "cluster-wide defaults" in out.output and "cluster" in out.output
    got = __import__("json").loads(corral(server, "user", "limits", "alice", "--json", token=root).output)
    assert got["whatif_per_min"] == 30 and got["sources"]["whatif_per_min"] == "cluster"
    cleared = corral(server, "user", "limits", "alice", "--clear", "max-pending", "--json", token=root)
    assert __import__("json").loads(cleared.output)["sources"]["max_pending"] == "built-in"
    bad = corral(server, "user", "limits", "alice", "--max-pending", "0", token=root)  # refused before the request
    assert bad.exit_code == 2 and "--max-pending" in bad.output and len(bad.output.strip().splitlines()) == 1
    denied = corral(server, "limits", "--max-pending", "5")  # alice is no admin
    assert denied.exit_code == 1 and "HTTP 403" in denied.output
    unknown = corral(server, "user", "limits", "nobody", token=root)
    assert unknown.exit_code == 1 and "HTTP 404" in unknown.output
    with server.store.session() as s:
        assert queries.limits_of(s, queries.user_by_name(s, "alice").id).max_pending == 1000  # type: ignore[union-attr]

"""The teams API through Flask's test client, on SQLite and on PostgreSQL (the `store` fixture): creating, listing,
changing and deleting teams, each team's usage figures computed by hand, moving users, every bad input refused by
name with nothing changed, admins only for writes, and jobs carrying their submitter's team."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select

from scheduler.live.store import JobState, Store
from scheduler.live.store.models import Allocation, Gpu, Job, Node, Team, User
from scheduler.live.store.queries import create_token
from web import create_app

API = "/api/v1"
JOB = {"name": "train", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 600}


@dataclass
class Env:
    client: FlaskClient
    store: Store
    tokens: dict[str, str]
    notified: list[float] = field(default_factory=list)

    def call(self, method: str, path: str, body: Any = None, who: str = "root", **kw: Any) -> Any:
        return self.client.open(API + path, method=method, json=body,
                                headers={"Authorization": f"Bearer {self.tokens[who]}"}, **kw)

    def raw(self, method: str, path: str, text: str, who: str = "root") -> Any:
        """A body json.dumps would not write (NaN, Infinity, huge integers): what a careless client may send."""
        return self.client.open(API + path, method=method, data=text, headers={
            "Authorization": f"Bearer {self.tokens[who]}", "Content-Type": "application/json"})

    def ok(self, method: str, path: str, body: Any = None, who: str = "root", status: int = 200) -> Any:
        resp = self.call(method, path, body, who)
        assert resp.status_code == status, resp.json
        return resp.json

    def user(self, name: str, team: str | None = None) -> None:
        with self.store.session() as s:
            self.tokens[name] = create_token(s, name, team=team)

    def submit(self, who: str, **overrides: Any) -> dict[str, Any]:
        return self.ok("POST", "/jobs", JOB | overrides, who, status=201)  # type: ignore[no-any-return]


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    with store.session() as s:
        tokens = {"root": create_token(s, "root", admin=True), "alice": create_token(s, "alice")}
    e = Env(client=None, store=store, tokens=tokens)  # type: ignore[arg-type]
    e.client = create_app(store, notify=lambda: e.notified.append(time.time())).test_client()
    return e


def teams_in_store(store: Store) -> dict[str, tuple[float, float | None]]:
    """Every team as stored: name -> (quota, borrowing limit). Re-read after each refusal: nothing may change."""
    with store.session() as s:
        return {t.name: (t.quota_gpus, t.borrow_limit_gpus) for t in s.scalars(select(Team))}


def user_teams(store: Store) -> dict[str, str]:
    with store.session() as s:
        return {u.name: u.team for u in s.scalars(select(User))}


def register_gpus(store: Store, nodes: int, per_node: int) -> None:
    """The cluster as the controller records it when it starts."""
    with store.session() as s:
        for n in range(nodes):
            node = Node(name=f"node-{n}", index=n, preset="dgx-v100", alive=True, updated_at=time.time())
            node.gpus = [Gpu(index=n * per_node + i, local_index=i, gpu_type="V100-32GB", mem_gb=32.0)
                         for i in range(per_node)]
            s.add(node)


def run(store: Store, job_id: int, gpus: list[int], share: float = 1.0) -> None:
    """Put a job in the state the controller leaves a running one: attempt 1, open allocations."""
    now = time.time()
    with store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        job.state, job.attempt, job.started_at, job.first_started_at = JobState.RUNNING, 1, now, now
        for rank, gpu in enumerate(gpus):
            s.add(Allocation(job_id=job_id, attempt=1, rank=rank, node=f"node-{gpu // 4}", gpu=gpu,
                             local_gpu=gpu % 4, share=share, allocated_at=now))


def finish(store: Store, job_id: int) -> None:
    with store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        job.state, job.finished_at = JobState.SUCCEEDED, time.time()


def errors_of(resp: Any) -> dict[str, list[str]]:
    return resp.json["errors"]["json"]  # type: ignore[no-any-return]


# ---- create, read, change, delete ----------------------------------------------------------------------------------


def test_create_list_show_patch_and_delete_round_trip(env: Env) -> None:
    created = env.ok("POST", "/teams", {"name": "vision", "quota_gpus": 4, "borrow_limit_gpus": 2}, status=201)
    assert {k: created[k] for k in ("name", "quota_gpus", "borrow_limit_gpus", "in_use_gpus", "pending_jobs")} == {
        "name": "vision", "quota_gpus": 4, "borrow_limit_gpus": 2, "in_use_gpus": 0, "pending_jobs": 0}
    assert created["created_at"] == created["updated_at"] > 0
    env.ok("POST", "/teams", {"name": "nlp.v2_x-1", "quota_gpus": 2.5}, status=201)  # no limit when absent
    assert len(env.notified) == 2
    assert teams_in_store(env.store) == {"default": (0.0, None), "vision": (4.0, 2.0), "nlp.v2_x-1": (2.5, None)}

    listing = env.ok("GET", "/teams", who="alice")  # any user may read them
    assert [t["name"] for t in listing["teams"]] == ["default", "nlp.v2_x-1", "vision"]
    assert listing["cluster_gpus"] == 0
    assert set(listing["teams"][0]) == {"name", "quota_gpus", "borrow_limit_gpus", "created_at", "updated_at",
                                        "in_use_gpus", "borrowed_gpus", "lent_gpus", "pending_jobs", "running_jobs",
                                        "priority_ceiling", "ceiling_sources"}
    assert env.ok("GET", "/teams/vision", who="alice")["borrow_limit_gpus"] == 2
    assert env.call("GET", "/teams/nope").status_code == 404

    patched = env.ok("PATCH", "/teams/vision", {"quota_gpus": 6})  # the limit is left alone
    assert (patched["quota_gpus"], patched["borrow_limit_gpus"]) == (6, 2)
    assert patched["updated_at"] >= created["updated_at"]
    assert env.ok("PATCH", "/teams/vision", {"borrow_limit_gpus": None})["borrow_limit_gpus"] is None
    assert env.ok("PATCH", "/teams/vision", {"borrow_limit_gpus": 0.5, "quota_gpus": 0})["quota_gpus"] == 0
    assert teams_in_store(env.store)["vision"] == (0.0, 0.5)
    assert len(env.notified) == 5
    env.ok("PATCH", "/teams/vision", {})  # nothing to change: no wake-up
    assert len(env.notified) == 5
    assert env.call("PATCH", "/teams/nope", {"quota_gpus": 1}).status_code == 404

    env.user("vic", "vision")
    env.user("val", "vision")
    gone = env.ok("DELETE", "/teams/vision")
    assert gone["moved_users"] == ["val", "vic"] and "moved to 'default'" in gone["message"]
    assert "vision" not in teams_in_store(env.store)
    assert user_teams(env.store) == {"root": "default", "alice": "default", "vic": "default", "val": "default"}
    assert len(env.notified) == 6
    assert env.call("DELETE", "/teams/vision").status_code == 404


def test_a_taken_name_is_409_and_changes_nothing(env: Env) -> None:
    env.ok("POST", "/teams", {"name": "vision", "quota_gpus": 4}, status=201)
    before, woken = teams_in_store(env.store), len(env.notified)
    for name in ("vision", "default"):
        resp = env.call("POST", "/teams", {"name": name, "quota_gpus": 1})
        assert resp.status_code == 409 and resp.json["message"] == f"team {name!r} already exists"
    assert teams_in_store(env.store) == before and len(env.notified) == woken


# ---- usage ---------------------------------------------------------------------------------------------------------


def test_usage_counts_in_use_borrowed_and_lent_by_hand(env: Env) -> None:
    """8 GPUs; quotas vision 4, nlp 2, speech 1 (7 assigned, 1 in no team's quota). Running: vision 4 + 2 GPUs,
    nlp 0.5, default 0.5. Borrowed: vision 6 - 4 = 2, default 0.5 - 0 = 0.5; 2.5 in all, of which the 1 unassigned GPU
    covers 1, so 1.5 is lent by the teams with idle quota, nlp (1.5 idle) and speech (1 idle), in proportion:
    nlp 1.5 * 1.5 / 2.5 = 0.9, speech 1.5 * 1 / 2.5 = 0.6."""
    register_gpus(env.store, 2, 4)
    for name, quota in (("vision", 4), ("nlp", 2), ("speech", 1)):
        env.ok("POST", "/teams", {"name": name, "quota_gpus": quota}, status=201)
    for who, team in (("vic", "vision"), ("nat", "nlp"), ("sam", "speech")):
        env.user(who, team)
    big, mid, _vision_waits = (env.submit("vic", num_gpus=n)["id"] for n in (4, 2, 1))
    half = env.submit("nat", num_gpus=0.5)["id"]
    env.submit("sam", num_gpus=1)
    spare = env.submit("alice", num_gpus=0.5)["id"]  # alice is in `default`
    run(env.store, big, [0, 1, 2, 3])
    run(env.store, mid, [4, 5])
    run(env.store, half, [6], share=0.5)
    run(env.store, spare, [6], share=0.5)

    listing = env.ok("GET", "/teams", who="alice")
    assert listing["cluster_gpus"] == 8
    got = {t["name"]: {k: t[k] for k in ("in_use_gpus", "borrowed_gpus", "lent_gpus", "pending_jobs",
                                          "running_jobs")} for t in listing["teams"]}
    assert got == {
        "default": {"in_use_gpus": 0.5, "borrowed_gpus": 0.5, "lent_gpus": 0, "pending_jobs": 0, "running_jobs": 1},
        "nlp": {"in_use_gpus": 0.5, "borrowed_gpus": 0, "lent_gpus": pytest.approx(0.9), "pending_jobs": 0,
                "running_jobs": 1},
        "speech": {"in_use_gpus": 0, "borrowed_gpus": 0, "lent_gpus": pytest.approx(0.6), "pending_jobs": 1,
                   "running_jobs": 0},
        "vision": {"in_use_gpus": 6, "borrowed_gpus": 2, "lent_gpus": 0, "pending_jobs": 1, "running_jobs": 2},
    }
    assert env.ok("GET", "/teams/nlp")["lent_gpus"] == pytest.approx(0.9)

    # vision's 2-GPU job ends: it is back at its quota, and default's 0.5 fits in the unassigned GPU: nobody lends.
    finish(env.store, mid)
    after = {t["name"]: t for t in env.ok("GET", "/teams")["teams"]}
    assert [after[n]["lent_gpus"] for n in ("default", "nlp", "speech", "vision")] == [0, 0, 0, 0]
    assert (after["vision"]["in_use_gpus"], after["vision"]["borrowed_gpus"], after["vision"]["running_jobs"]) == (
        4, 0, 1)
    assert after["default"]["borrowed_gpus"] == 0.5


# ---- bad input: a 422 naming the field, and nothing changed --------------------------------------------------------


BAD_CREATES = [
    ({"name": "x", "quota_gpus": -1}, "quota_gpus", "must be >= 0, got -1"),
    ({"name": "x", "quota_gpus": 1, "borrow_limit_gpus": -0.5}, "borrow_limit_gpus", "must be >= 0"),
    ({"name": "x", "quota_gpus": "4"}, "quota_gpus", "a finite number is required"),
    ({"name": "x", "quota_gpus": True}, "quota_gpus", "a finite number is required"),
    ({"name": "x", "quota_gpus": None}, "quota_gpus", "null"),
    ({"name": "x"}, "quota_gpus", "required"),
    ({"name": "x", "quota_gpus": 2_000_000}, "quota_gpus", "at most 1000000"),
    ({"name": "x", "quota_gpus": 1, "borrow_limit_gpus": [1]}, "borrow_limit_gpus", "a finite number is required"),
    ({"name": "-x", "quota_gpus": 1}, "name", "starts with '-'"),
    ({"name": "", "quota_gpus": 1}, "name", "must not be empty"),
    ({"name": "a b", "quota_gpus": 1}, "name", "letters, digits"),
    ({"name": "x" * 65, "quota_gpus": 1}, "name", "1 to 64"),
    ({"name": "x\x00", "quota_gpus": 1}, "name", "NUL"),
    ({"quota_gpus": 1}, "name", "required"),
    ({"name": "x", "quota_gpus": 1, "quota": 2}, "quota", "Unknown field"),
]


@pytest.mark.parametrize(("body", "field", "says"), BAD_CREATES)
def test_a_bad_team_is_refused_naming_the_field(env: Env, body: dict[str, Any], field: str, says: str) -> None:
    before, woken = teams_in_store(env.store), len(env.notified)
    resp = env.call("POST", "/teams", body)
    assert resp.status_code == 422, resp.json
    assert says in " ".join(errors_of(resp)[field]) and resp.json["message"].startswith(f"{field}: ")
    assert teams_in_store(env.store) == before and len(env.notified) == woken


@pytest.mark.parametrize(("text", "field"), [
    ('{"name": "x", "quota_gpus": NaN}', "quota_gpus"),
    ('{"name": "x", "quota_gpus": Infinity}', "quota_gpus"),
    ('{"name": "x", "quota_gpus": 1, "borrow_limit_gpus": -Infinity}', "borrow_limit_gpus"),
    ('{"name": "x", "quota_gpus": 1e999}', "quota_gpus"),  # parses as inf
    ('{"name": "x", "quota_gpus": 1' + "0" * 400 + "}", "quota_gpus"),  # an int no float holds
])
def test_non_finite_numbers_are_refused(env: Env, text: str, field: str) -> None:
    before = teams_in_store(env.store)
    resp = env.raw("POST", "/teams", text)
    assert resp.status_code == 422, resp.json
    assert "a finite number is required" in errors_of(resp)[field][0]
    assert teams_in_store(env.store) == before and env.notified == []


@pytest.mark.parametrize(("body", "field", "says"), [
    ({"quota_gpus": -2}, "quota_gpus", "must be >= 0"),
    ({"quota_gpus": None}, "quota_gpus", "null"),
    ({"borrow_limit_gpus": "none"}, "borrow_limit_gpus", "a finite number is required"),
    ({"name": "renamed"}, "name", "Unknown field"),  # a team's name is in its jobs' history: no renames
    ({"quota_gpus": 1, "colour": "red"}, "colour", "Unknown field"),
])
def test_a_bad_change_is_refused_naming_the_field(env: Env, body: dict[str, Any], field: str, says: str) -> None:
    env.ok("POST", "/teams", {"name": "vision", "quota_gpus": 4, "borrow_limit_gpus": 1}, status=201)
    before, woken = teams_in_store(env.store), len(env.notified)
    resp = env.call("PATCH", "/teams/vision", body)
    assert resp.status_code == 422, resp.json
    assert says in " ".join(errors_of(resp)[field])
    assert teams_in_store(env.store) == before and len(env.notified) == woken
    resp = env.raw("PATCH", "/teams/vision", '{"borrow_limit_gpus": NaN}')
    assert resp.status_code == 422 and "borrow_limit_gpus" in errors_of(resp)
    assert teams_in_store(env.store) == before


def test_quotas_may_not_add_up_to_more_than_the_registered_gpus(env: Env) -> None:
    env.ok("POST", "/teams", {"name": "big", "quota_gpus": 100}, status=201)  # no GPUs registered: no size to check
    env.ok("DELETE", "/teams/big")
    register_gpus(env.store, 2, 4)
    env.ok("POST", "/teams", {"name": "vision", "quota_gpus": 5}, status=201)
    before, woken = teams_in_store(env.store), len(env.notified)

    resp = env.call("POST", "/teams", {"name": "nlp", "quota_gpus": 3.5})
    assert resp.status_code == 422
    assert errors_of(resp)["quota_gpus"] == [
        "the teams' quotas would add up to 8.5 GPUs, more than the cluster's 8 GPUs"]
    resp = env.call("PATCH", "/teams/vision", {"quota_gpus": 9, "borrow_limit_gpus": 1})
    assert resp.status_code == 422 and "add up to 9 GPUs" in errors_of(resp)["quota_gpus"][0]
    assert teams_in_store(env.store) == before and len(env.notified) == woken  # the limit did not change either

    env.ok("POST", "/teams", {"name": "nlp", "quota_gpus": 3}, status=201)  # exactly the cluster: fine
    env.ok("PATCH", "/teams/vision", {"quota_gpus": 4})
    with env.store.session() as s:  # the cluster shrank under the quotas: lowering one is still allowed
        s.delete(s.scalars(select(Node).where(Node.name == "node-1")).one())
    env.ok("PATCH", "/teams/nlp", {"quota_gpus": 2})
    resp = env.call("PATCH", "/teams/nlp", {"quota_gpus": 2.5})
    assert resp.status_code == 422 and "add up to 6.5 GPUs, more than the cluster's 4 GPUs" in resp.json["message"]
    assert teams_in_store(env.store) == {"default": (0.0, None), "vision": (4.0, None), "nlp": (2.0, None)}


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/teams/a%00b", None), ("PATCH", "/teams/a%00b", {"quota_gpus": 1}), ("DELETE", "/teams/a%00b", None),
    ("PATCH", "/users/a%00b", {"team": "default"}), ("GET", "/teams/" + "x" * 65, None),
])
def test_a_name_no_team_or_user_can_have_is_404(env: Env, method: str, path: str, body: Any) -> None:
    """Not a query: PostgreSQL refuses a NUL byte in a string (this was a 500 there)."""
    resp = env.call(method, path, body)
    assert resp.status_code == 404 and "not found" in resp.json["message"]


# ---- who may write -------------------------------------------------------------------------------------------------


def test_non_admins_get_403_on_every_write_whatever_they_send(env: Env) -> None:
    env.ok("POST", "/teams", {"name": "vision", "quota_gpus": 4}, status=201)
    before, users, woken = teams_in_store(env.store), user_teams(env.store), len(env.notified)
    for method, path, body in [
        ("POST", "/teams", {"name": "mine", "quota_gpus": 1}),
        ("POST", "/teams", {"name": "-bad", "quota_gpus": -1}),  # invalid too: still 403, not 422
        ("PATCH", "/teams/vision", {"quota_gpus": 8}),
        ("DELETE", "/teams/vision", None),
        ("DELETE", "/teams/nope", None),
        ("PATCH", "/users/alice", {"team": "vision"}),
        ("GET", "/users", None),
    ]:
        resp = env.call(method, path, body, who="alice")
        assert resp.status_code == 403, (method, path, resp.json)
        assert resp.json["message"] == "user 'alice' is not an admin"
    assert teams_in_store(env.store) == before and user_teams(env.store) == users and len(env.notified) == woken
    assert env.client.get(f"{API}/teams").status_code == 401


# ---- deleting and moving while jobs are active ---------------------------------------------------------------------


def test_a_team_with_active_jobs_cannot_be_deleted(env: Env) -> None:
    env.ok("POST", "/teams", {"name": "vision", "quota_gpus": 4}, status=201)
    env.user("vic", "vision")
    running, pending = env.submit("vic")["id"], env.submit("vic")["id"]
    run(env.store, running, [0])
    before, woken = teams_in_store(env.store), len(env.notified)
    resp = env.call("DELETE", "/teams/vision")
    assert resp.status_code == 409
    assert resp.json["message"] == ("team 'vision' has 2 job(s) pending or running; delete it when they have "
                                    "finished or been cancelled")
    assert teams_in_store(env.store) == before and user_teams(env.store)["vic"] == "vision"  # rolled back
    finish(env.store, running)
    assert "1 job(s)" in env.call("DELETE", "/teams/vision").json["message"]
    env.ok("POST", f"/jobs/{pending}/cancel", who="vic")
    assert env.ok("DELETE", "/teams/vision")["moved_users"] == ["vic"]
    with env.store.session() as s:  # finished jobs keep their team in their history
        assert set(s.scalars(select(Job.team))) == {"vision"}
    assert len(env.notified) > woken

    resp = env.call("DELETE", "/teams/default")
    assert resp.status_code == 409 and "'default' team cannot be deleted" in resp.json["message"]
    assert "default" in teams_in_store(env.store)


def test_moving_a_user(env: Env) -> None:
    env.ok("POST", "/teams", {"name": "vision", "quota_gpus": 4}, status=201)
    env.ok("POST", "/teams", {"name": "nlp", "quota_gpus": 2}, status=201)
    woken = len(env.notified)
    moved = env.ok("PATCH", "/users/alice", {"team": "vision"})
    assert moved == {"name": "alice", "team": "vision", "admin": False, "created_at": moved["created_at"],
                     "active_jobs": 0}
    assert user_teams(env.store)["alice"] == "vision" and len(env.notified) == woken + 1

    job = env.submit("alice")["id"]
    before = user_teams(env.store)
    resp = env.call("PATCH", "/users/alice", {"team": "nlp"})
    assert resp.status_code == 409
    assert resp.json["message"] == ("user 'alice' has 1 job(s) pending or running in team 'vision'; move them when "
                                    "those have finished or been cancelled")
    assert env.ok("PATCH", "/users/alice", {"team": "vision"})["active_jobs"] == 1  # where she is: nothing to refuse

    unknown = "team 'nope' does not exist; the teams are default, nlp, vision"
    for body, name, says in [({"team": "nope"}, "team", unknown), ({}, "team", "required"),
                             ({"team": ""}, "team", "between 1 and 64"),
                             ({"team": "nlp", "admin": True}, "admin", "Unknown field")]:
        resp = env.call("PATCH", "/users/alice", body)
        assert resp.status_code == 422, resp.json
        assert says in " ".join(errors_of(resp)[name])
    assert env.call("PATCH", "/users/nobody", {"team": "nlp"}).status_code == 404
    assert user_teams(env.store) == before and len(env.notified) == woken + 2  # the submission woke it, no move did

    env.ok("POST", f"/jobs/{job}/cancel", who="alice")
    env.ok("PATCH", "/users/alice", {"team": "nlp"})
    users = {u["name"]: u for u in env.ok("GET", "/users")["users"]}
    assert [u for u in users] == ["alice", "root"]
    assert (users["alice"]["team"], users["alice"]["active_jobs"], users["root"]["admin"]) == ("nlp", 0, True)


# ---- jobs carry their team -----------------------------------------------------------------------------------------


def test_jobs_carry_the_submitters_team_and_filter_by_it(env: Env) -> None:
    env.ok("POST", "/teams", {"name": "vision", "quota_gpus": 4}, status=201)
    env.user("vic", "vision")
    first = env.submit("vic")
    assert first["team"] == "vision" and env.submit("alice")["team"] == "default"
    assert env.ok("GET", f"/jobs/{first['id']}", who="vic")["team"] == "vision"

    env.ok("POST", f"/jobs/{first['id']}/cancel", who="vic")
    env.ok("PATCH", "/users/vic", {"team": "default"})  # read at submission: no stale team from the token cache
    second = env.submit("vic")
    assert second["team"] == "default"
    only = env.ok("GET", "/jobs?team=vision")
    assert [j["id"] for j in only["jobs"]] == [first["id"]] and only["total"] == 1
    assert env.ok("GET", "/jobs?team=default")["total"] == 2
    assert env.ok("GET", "/jobs?team=default", who="vic")["total"] == 1  # a user's own jobs only
    assert env.call("GET", "/jobs?team=").status_code == 422

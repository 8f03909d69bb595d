"""The REST API through Flask's test client, on SQLite and on PostgreSQL (the `store` fixture): authentication,
validation (each bad field refused by name, nothing stored), idempotent submission, listing, ownership, cancel, logs,
the cluster view, models, policies and the OpenAPI document."""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select, update

from scheduler.core.generic import GENERIC_MODEL
from scheduler.core.workloads import catalog
from scheduler.live.job_accounts import JobAccounts
from scheduler.live.job_files import log_path
from scheduler.live.store import JobState, Store, queries
from scheduler.live.store.models import Allocation, Decision, Gpu, Job, Node, PolicyVersion
from scheduler.live.store.queries import create_token
from web import create_app

API = "/api/v1"
EMULATED = {"name": "resnet", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 2, "duration_s": 120}
COMMAND = {"name": "train", "kind": "command", "model": "Transformer-XL", "num_gpus": 0.5,
           "entrypoint": "python train.py --epochs 3", "workdir": "/data", "env": {"SEED": "1"}}


@dataclass
class Env:
    client: FlaskClient
    store: Store
    tokens: dict[str, str]
    notified: list[float] = field(default_factory=list)

    def auth(self, who: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def get(self, path: str, who: str = "alice", **kw: Any) -> Any:
        return self.client.get(API + path, headers=self.auth(who), **kw)

    def post(self, path: str, body: Any = None, who: str = "alice") -> Any:
        return self.client.post(API + path, json=body, headers=self.auth(who))

    def put(self, path: str, body: Any, who: str = "alice") -> Any:
        return self.client.put(API + path, json=body, headers=self.auth(who))

    def submit(self, who: str = "alice", **overrides: Any) -> dict[str, Any]:
        resp = self.post("/jobs", EMULATED | overrides, who)
        assert resp.status_code == 201, resp.json
        return resp.json  # type: ignore[no-any-return]

    def job_count(self) -> int:
        with self.store.session() as s:
            return s.scalar(select(func.count()).select_from(Job)) or 0


def make_env(store: Store, **config: Any) -> Env:
    with store.session() as s:
        tokens = {"alice": create_token(s, "alice"), "bob": create_token(s, "bob"),
                  "root": create_token(s, "root", admin=True)}
    env = Env(client=None, store=store, tokens=tokens)  # type: ignore[arg-type]
    app = create_app(store, notify=lambda: env.notified.append(time.time()), config=config)
    env.client = app.test_client()
    return env


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    return make_env(store)


def field_errors(resp: Any) -> dict[str, Any]:
    return resp.json["errors"]["json"]  # type: ignore[no-any-return]


# ---- health, auth, documentation --------------------------------------------------------------------------------


def test_health_needs_no_token(env: Env) -> None:
    resp = env.client.get(f"{API}/health")
    assert resp.status_code == 200
    assert resp.json["status"] == "ok" and resp.json["database"] == "ok"


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer corral_not-a-token", "Basic dXNlcjpwYXNz"])
def test_protected_routes_refuse_missing_or_bad_tokens(env: Env, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    for method, path in [("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/jobs/1"), ("GET", "/cluster"),
                         ("GET", "/models"), ("GET", "/policies"), ("PUT", "/policies/active")]:
        resp = env.client.open(API + path, method=method, headers=headers, json=EMULATED)
        assert resp.status_code == 401, (method, path)
        assert resp.is_json and resp.json["message"]
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert env.job_count() == 0


def test_a_revoked_token_is_refused_at_once_although_cached(store: Store, corral_home: Path) -> None:
    """Two servers on one database (replicas, or the API and `corral token revoke`): a revocation written by either
    stops the token on both at the next request, despite the token cache."""
    one = make_env(store)
    other = make_env(store)
    other.tokens = one.tokens
    for e in (one, other):
        assert e.get("/jobs", "bob").status_code == 200  # warms both caches
    with store.session() as s:
        (tok,) = queries.find_tokens(s, one.tokens["bob"][: len(queries.TOKEN_PREFIX) + 6])
        queries.revoke_token(s, tok)  # what `corral token revoke` does, on the database
    assert one.get("/jobs", "bob").status_code == 401 and other.get("/jobs", "bob").status_code == 401
    assert one.get("/jobs", "alice").status_code == 200  # nobody else's token is affected


def test_admins_list_and_revoke_tokens_through_the_api(env: Env) -> None:
    assert env.get("/tokens", "alice").status_code == 403
    listing = env.get("/tokens", "root")
    assert listing.status_code == 200
    rows = listing.json["tokens"]
    assert [r["user"] for r in rows] == ["alice", "bob", "root"] and rows[2]["admin"]
    for token in env.tokens.values():  # never the token itself, only its first characters
        assert token not in listing.get_data(as_text=True)
    bob = rows[1]
    assert env.get("/jobs", "bob").status_code == 200  # cached from here on
    assert env.client.delete(f"{API}/tokens/{bob['id']}", headers=env.auth("alice")).status_code == 403
    resp = env.client.delete(f"{API}/tokens/{bob['id']}", headers=env.auth("root"))
    assert resp.status_code == 200 and resp.json["revoked"] and resp.json["revoked_at"] is not None
    assert env.get("/jobs", "bob").status_code == 401
    assert env.client.delete(f"{API}/tokens/99999", headers=env.auth("root")).status_code == 404


def test_no_token_ever_reaches_a_log_line(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with env.store.session() as s:
        fresh = create_token(s, "erin")
    env.get("/jobs", "alice")
    env.client.get(f"{API}/jobs", headers={"Authorization": f"Bearer {fresh}x"})  # a wrong one
    env.client.get(f"{API}/jobs", headers={"Authorization": f"Bearer {fresh}"})
    env.client.delete(f"{API}/tokens/1", headers=env.auth("root"))
    env.get("/jobs", "alice")  # refused now
    text = caplog.text
    for token in (*env.tokens.values(), fresh):
        assert token not in text and token[len(queries.TOKEN_PREFIX):] not in text


def test_openapi_document_lists_every_path_with_bearer_auth(env: Env) -> None:
    resp = env.client.get(f"{API}/openapi.json")
    assert resp.status_code == 200
    spec = resp.json
    assert spec["openapi"].startswith("3.")
    assert {f"{API}{p}" for p in ("/health", "/jobs", "/jobs/{job_id}", "/jobs/{job_id}/cancel",
                                  "/jobs/{job_id}/logs", "/cluster", "/models", "/policies",
                                  "/policies/active")} <= set(spec["paths"])
    assert spec["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http", "scheme": "bearer", "description": spec["components"]["securitySchemes"]["bearerAuth"][
            "description"]}
    assert spec["security"] == [{"bearerAuth": []}]
    assert spec["paths"][f"{API}/health"]["get"]["security"] == []
    body = spec["paths"][f"{API}/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("JobSubmit")
    docs = env.client.get("/api/docs")
    assert docs.status_code == 200 and b"swagger-ui" in docs.data
    # Its assets are served by Corral itself (no CDN: the docs must work offline).
    assert b"/api/docs/assets/swagger-ui-bundle.js" in docs.data and b"https://" not in docs.data
    asset = env.client.get("/api/docs/assets/swagger-ui-bundle.js")
    assert asset.status_code == 200 and len(asset.data) > 100_000


def test_kind_defaults_to_emulated_and_the_spec_lists_exactly_the_required_fields(env: Env) -> None:
    """The API, `corral submit` and the docs agree: kind defaults to emulated. The OpenAPI document says which fields
    a submission must have, and nothing else."""
    body = {k: v for k, v in EMULATED.items() if k != "kind"}
    resp = env.post("/jobs", body)
    assert resp.status_code == 201, resp.json
    assert resp.json["kind"] == "emulated"
    without_duration = env.post("/jobs", {k: v for k, v in body.items() if k != "duration_s"})
    assert without_duration.status_code == 422 and set(field_errors(without_duration)) == {"duration_s"}
    spec = env.client.get(f"{API}/openapi.json").json
    submit = spec["components"]["schemas"]["JobSubmit"]
    assert sorted(submit["required"]) == ["name", "num_gpus"]  # model: for emulated jobs only (below)
    assert submit["properties"]["kind"]["default"] == "emulated"
    for name in ("model", "name", "num_gpus"):  # each refused by name when left out of an emulated job
        resp = env.post("/jobs", {k: v for k, v in body.items() if k != name})
        assert resp.status_code == 422 and name in field_errors(resp), resp.json


def test_unknown_route_is_a_json_error(env: Env) -> None:
    resp = env.get("/nope")
    assert resp.status_code == 404 and resp.is_json


# ---- submission --------------------------------------------------------------------------------------------------


def test_submit_emulated_and_command_jobs(store: Store, corral_home: Path) -> None:
    env = make_env(store, CORRAL_COMMAND_JOBS="everyone")
    a = env.post("/jobs", EMULATED)
    assert a.status_code == 201
    assert a.json["id"] > 0 and a.json["state"] == "pending" and a.json["user"] == "alice"
    assert a.json["num_gpus"] == 2 and isinstance(a.json["num_gpus"], int)
    assert a.json["allocation"] == [] and a.json["restart_policy"] == "requeue" and a.json["max_restarts"] == 3

    c = env.post("/jobs", COMMAND)
    assert c.status_code == 201
    assert c.json["num_gpus"] == 0.5 and c.json["duration_s"] == 3600  # the default estimate
    assert c.json["entrypoint"] == COMMAND["entrypoint"] and c.json["env"] == {"SEED": "1"}

    with env.store.session() as s:
        stored = {j.id: j for j in s.scalars(select(Job)).all()}
        assert set(stored) == {a.json["id"], c.json["id"]}
        cmd = stored[c.json["id"]]
        assert (cmd.kind, cmd.model, cmd.num_gpus, cmd.workdir, cmd.state) == (
            "command", "Transformer-XL", 0.5, "/data", JobState.PENDING)
        assert [e.kind for e in cmd.events] == ["submitted"]
    assert len(env.notified) == 2


def test_a_command_job_may_name_no_model_and_gets_the_generic_profile(store: Store, corral_home: Path) -> None:
    env = make_env(store, CORRAL_COMMAND_JOBS="everyone")
    own = {k: v for k, v in COMMAND.items() if k != "model"}
    c = env.post("/jobs", own)
    assert c.status_code == 201 and c.json["model"] == GENERIC_MODEL, c.json
    assert env.post("/jobs", COMMAND | {"model": GENERIC_MODEL}).json["model"] == GENERIC_MODEL  # or names it
    emulated = env.post("/jobs", {k: v for k, v in EMULATED.items() if k != "model"})  # it runs at a model's rate
    assert emulated.status_code == 422 and list(field_errors(emulated)) == ["model"], emulated.json
    assert env.job_count() == 2


@pytest.mark.parametrize(("field", "body"), [
    ("name", {"name": ""}),
    ("name", {"name": "x" * 201}),
    ("name", {"name": None}),
    ("kind", {"kind": "gpu"}),
    ("model", {"model": "NoSuchNet"}),
    ("num_gpus", {"num_gpus": 1.5}),
    ("num_gpus", {"num_gpus": 0}),
    ("num_gpus", {"num_gpus": -1}),
    ("num_gpus", {"num_gpus": "x"}),
    ("num_gpus", {"num_gpus": True}),
    ("num_gpus", {"num_gpus": 1.0000001}),
    ("duration_s", {"duration_s": 0}),
    ("duration_s", {"duration_s": -5}),
    ("duration_s", {"duration_s": None}),
    ("entrypoint", {"entrypoint": "sleep 1"}),
    ("entrypoint", {"kind": "command"}),
    ("entrypoint", {"kind": "command", "entrypoint": "   "}),
    ("env", {"env": {"A": 1}}),
    ("env", {"env": ["A=1"]}),
    ("priority", {"priority": "high"}),
    ("priority", {"priority": 1.5}),
    ("client_token", {"client_token": "t" * 201}),
    ("slo_ms", {"slo_ms": 0}),
    ("restart_policy", {"restart_policy": "never"}),
    ("max_restarts", {"max_restarts": 101}),
    ("max_restarts", {"max_restarts": -1}),
    ("gpus", {"gpus": 2}),  # unknown fields are refused, not ignored
])
def test_invalid_field_is_refused_by_name_and_nothing_is_stored(env: Env, field: str, body: dict[str, Any]) -> None:
    payload = {k: v for k, v in (EMULATED | body).items() if v is not None}
    resp = env.post("/jobs", payload)
    assert resp.status_code == 422, resp.json
    assert field in field_errors(resp), resp.json
    assert field in resp.json["message"]
    assert env.job_count() == 0
    assert env.notified == []


def test_a_job_the_cluster_can_never_hold_is_refused_at_submit(env: Env) -> None:
    """Once the controller has recorded the cluster (here 2 nodes x 4 GPUs of 12 GB), a job that could never be placed
    is a 422 naming the field and the cluster's size, not a 201 followed by a failure."""
    with env.store.session() as s:
        for n in range(2):
            node = Node(name=f"node{n}", index=n, preset="pcie-t4", alive=True, updated_at=time.time())
            node.gpus = [Gpu(index=4 * n + i, local_index=i, gpu_type="K80", mem_gb=12.0) for i in range(4)]
            s.add(node)
    resp = env.post("/jobs", EMULATED | {"num_gpus": 16})
    assert resp.status_code == 422
    assert field_errors(resp)["num_gpus"] == ["needs 16 GPUs, the cluster has 8 (2 nodes)"]
    big = max(catalog().values(), key=lambda m: m.mem_gb)
    assert big.mem_gb > 12
    resp = env.post("/jobs", EMULATED | {"num_gpus": 1, "model": big.name})
    assert resp.status_code == 422 and "the largest GPU has 12 GB" in field_errors(resp)["model"][0]
    assert env.job_count() == 0
    assert env.post("/jobs", EMULATED | {"num_gpus": 8}).status_code == 201  # the whole cluster is fine


def test_a_node_that_is_down_still_counts_at_submit(env: Env) -> None:
    """The controller's model keeps a node that is down (its GPUs closed: `control.intake`), so a gang only the whole
    cluster holds waits for it to come back there: the API accepts it too (a node restarting must not turn such jobs
    away), and refuses only what no recorded node set could hold, saying how many nodes are down."""
    with env.store.session() as s:
        for n, alive in enumerate([True, True, False]):
            node = Node(name=f"node{n}", index=n, preset="pcie-t4", alive=alive, updated_at=time.time())
            node.gpus = [Gpu(index=4 * n + i, local_index=i, gpu_type="A100-80GB", mem_gb=80.0) for i in range(4)]
            s.add(node)
    resp = env.post("/jobs", EMULATED | {"num_gpus": 16})
    assert resp.status_code == 422
    assert field_errors(resp)["num_gpus"] == ["needs 16 GPUs, the cluster has 12 (3 nodes, 1 of them down)"]
    assert env.job_count() == 0
    waits = env.post("/jobs", EMULATED | {"num_gpus": 12})
    assert waits.status_code == 201 and waits.json["num_gpus"] == 12 and waits.json["state"] == "pending"
    pinned = env.post("/jobs", EMULATED | {"num_gpus": 4, "constraints": {"nodes": ["node2"]}})
    assert pinned.status_code == 201  # the down node's 4 GPUs: it waits for node2
    too_big = env.post("/jobs", EMULATED | {"num_gpus": 5, "constraints": {"nodes": ["node2"]}})
    assert too_big.status_code == 422 and "constraints.nodes" in field_errors(too_big), too_big.json


@pytest.mark.parametrize("num_gpus", [1.5, 2.25, 0.0, -1])
def test_a_gpu_count_that_no_placement_gives_is_refused(env: Env, num_gpus: float) -> None:
    resp = env.post("/jobs", EMULATED | {"num_gpus": num_gpus})
    assert resp.status_code == 422 and "whole number of GPUs" in field_errors(resp)["num_gpus"][0]
    assert env.job_count() == 0


def test_unknown_model_error_lists_the_choices(env: Env) -> None:
    resp = env.post("/jobs", EMULATED | {"model": "NoSuchNet"})
    assert "ResNet-50-bs64" in " ".join(field_errors(resp)["model"])


def test_missing_required_fields_are_each_named(env: Env) -> None:
    resp = env.post("/jobs", {})
    assert resp.status_code == 422
    # kind has a default, emulated, which needs a model and its duration as well
    assert set(field_errors(resp)) == {"name", "num_gpus", "model", "duration_s"}
    # A field given but refused is refused for what it is, not also called missing.
    bad = env.post("/jobs", EMULATED | {"model": "NoSuchNet", "duration_s": -5})
    assert bad.status_code == 422 and set(field_errors(bad)) == {"model", "duration_s"}
    assert not any("Required" in m for f in ("model", "duration_s") for m in field_errors(bad)[f]), bad.json


def test_malformed_json_is_400(env: Env) -> None:
    resp = env.client.post(f"{API}/jobs", data=b'{"name": "x",', headers=env.auth() | {
        "Content-Type": "application/json"})
    assert resp.status_code == 400 and resp.is_json
    assert env.job_count() == 0


def test_body_over_one_mebibyte_is_413(env: Env) -> None:
    big = json.dumps(EMULATED | {"env": {"PAD": "x" * (1024 * 1024)}})
    resp = env.client.post(f"{API}/jobs", data=big, headers=env.auth() | {"Content-Type": "application/json"})
    assert resp.status_code == 413 and resp.is_json and resp.json["message"]
    assert env.job_count() == 0


def test_client_token_makes_submission_idempotent(env: Env) -> None:
    first = env.post("/jobs", EMULATED | {"client_token": "run-42"})
    again = env.post("/jobs", EMULATED | {"client_token": "run-42", "name": "changed"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json["id"] == first.json["id"] and again.json["name"] == "resnet"
    assert env.job_count() == 1
    assert len(env.notified) == 1
    # Client tokens are per user: bob's "run-42" is another job.
    other = env.post("/jobs", EMULATED | {"client_token": "run-42"}, who="bob")
    assert other.status_code == 201 and other.json["id"] != first.json["id"]
    assert env.job_count() == 2


# ---- listing, showing, ownership ----------------------------------------------------------------------------------


def test_list_filters_paginates_and_counts(env: Env) -> None:
    mine = [env.submit(name=f"a{i}")["id"] for i in range(5)]
    theirs = [env.submit("bob", name=f"b{i}")["id"] for i in range(2)]
    env.post(f"/jobs/{mine[1]}/cancel")

    page = env.get("/jobs?limit=2").json
    assert page["total"] == 5 and [j["id"] for j in page["jobs"]] == [mine[4], mine[3]]
    page = env.get("/jobs?limit=2&offset=4").json
    assert page["total"] == 5 and [j["id"] for j in page["jobs"]] == [mine[0]]
    page = env.get("/jobs?state=cancelled").json
    assert page["total"] == 1 and page["jobs"][0]["id"] == mine[1]
    page = env.get("/jobs?state=pending&user=alice").json
    assert page["total"] == 4 and all(j["user"] == "alice" for j in page["jobs"])

    assert env.get("/jobs?user=bob").status_code == 403  # another user's list: admins only
    everyone = env.get("/jobs", who="root").json
    assert everyone["total"] == 7 and {j["id"] for j in everyone["jobs"]} == set(mine + theirs)
    assert {j["id"] for j in env.get("/jobs?user=bob", who="root").json["jobs"]} == set(theirs)
    assert env.get("/jobs?user=nobody", who="root").json == {"jobs": [], "total": 0}


@pytest.mark.parametrize(("query", "field"), [("state=sleeping", "state"), ("limit=0", "limit"),
                                              ("limit=1001", "limit"), ("offset=-1", "offset"),
                                              ("limit=many", "limit")])
def test_list_refuses_bad_filters(env: Env, query: str, field: str) -> None:
    resp = env.get(f"/jobs?{query}")
    assert resp.status_code == 422
    assert field in resp.json["errors"]["query"]


def test_unknown_job_is_404_naming_it(env: Env) -> None:
    for path in ("/jobs/9999", "/jobs/9999/logs"):
        resp = env.get(path)
        assert resp.status_code == 404 and "9999" in resp.json["message"]
    assert env.post("/jobs/9999/cancel").status_code == 404


def test_other_users_job_is_403_unless_admin(env: Env) -> None:
    job = env.submit()
    for path in (f"/jobs/{job['id']}", f"/jobs/{job['id']}/logs"):
        assert env.get(path, who="bob").status_code == 403
        assert env.get(path, who="root").status_code == 200
    assert env.post(f"/jobs/{job['id']}/cancel", who="bob").status_code == 403
    assert env.get(f"/jobs/{job['id']}").json["state"] == "pending"  # bob's attempt changed nothing
    assert env.post(f"/jobs/{job['id']}/cancel", who="root").json["state"] == "cancelled"


def _run(store: Store, job_id: int, allocs: list[tuple[int, str, int, int, float]], attempt: int = 1) -> None:
    """Put a job in the state the controller leaves a running one: attempt, started, open allocations."""
    now = time.time()
    with store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        job.state, job.attempt, job.started_at, job.first_started_at = JobState.RUNNING, attempt, now, now
        job.progress, job.predicted_slowdown = 0.25, 1.12
        for rank, node, gpu, local, share in allocs:
            s.add(Allocation(job_id=job_id, attempt=attempt, rank=rank, node=node, gpu=gpu, local_gpu=local,
                             share=share, allocated_at=now))


def test_show_includes_placement_events_and_decisions(env: Env) -> None:
    job = env.submit()
    _run(env.store, job["id"], [(0, "node-0", 0, 0, 1.0), (0, "node-0", 1, 1, 1.0)])
    with env.store.session() as s:
        for i in range(12):
            s.add(Decision(job_id=job["id"], at=time.time() + i, policy="tiresias", action="place",
                           reason=f"r{i}", gpus=[0, 1], share=1.0, predicted_slowdown=1.1,
                           candidates=[{"gpus": [0, 1], "share": 1.0, "slowdown": 1.1}]))
    body = env.get(f"/jobs/{job['id']}").json
    assert body["state"] == "running" and body["progress"] == 0.25
    assert body["allocation"] == [{"rank": 0, "node": "node-0", "gpu": 0, "local_gpu": 0, "share": 1.0},
                                  {"rank": 0, "node": "node-0", "gpu": 1, "local_gpu": 1, "share": 1.0}]
    assert [e["kind"] for e in body["events"]] == ["submitted"]
    assert set(body["events"][0]) == {"at", "kind", "message", "data"}
    assert [d["reason"] for d in body["decisions"]] == [f"r{i}" for i in range(2, 12)]  # the latest, in order
    assert body["decisions"][-1]["candidates"] == [{"gpus": [0, 1], "share": 1.0, "slowdown": 1.1}]
    listed = env.get("/jobs").json["jobs"][0]
    assert listed["allocation"] == body["allocation"]


# ---- cancel ------------------------------------------------------------------------------------------------------


def test_cancel_pending_job_cancels_it_with_an_event(env: Env) -> None:
    job = env.submit()
    env.notified.clear()
    resp = env.post(f"/jobs/{job['id']}/cancel")
    assert resp.status_code == 200
    assert resp.json["state"] == "cancelled" and resp.json["finished_at"] is not None
    assert len(env.notified) == 1
    kinds = [e["kind"] for e in env.get(f"/jobs/{job['id']}").json["events"]]
    assert kinds == ["submitted", "cancelled"]
    # Cancelling again changes nothing and does not wake the controller.
    assert env.post(f"/jobs/{job['id']}/cancel").json["state"] == "cancelled"
    assert len(env.notified) == 1


def test_cancel_running_job_flags_it_for_the_controller(env: Env) -> None:
    job = env.submit()
    _run(env.store, job["id"], [(0, "node-0", 0, 0, 1.0)])
    resp = env.post(f"/jobs/{job['id']}/cancel")
    assert resp.json["state"] == "running" and resp.json["cancel_requested"] is True
    assert env.get(f"/jobs/{job['id']}").json["events"][-1]["kind"] == "cancel_requested"


# ---- logs --------------------------------------------------------------------------------------------------------


def test_logs_read_worker_files_under_corral_home(env: Env, corral_home: Path) -> None:
    job = env.submit()
    jid = job["id"]
    _run(env.store, jid, [(0, "node-0", 0, 0, 1.0), (1, "node-1", 4, 0, 1.0), (2, "node-2", 8, 0, 1.0)], attempt=2)
    for rank in (0, 1):
        path = log_path(env.store.id, jid, 2, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"rank {rank} line {i}\n" for i in range(500)))
    old = log_path(env.store.id, jid, 1, 0)
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_text("first attempt\n")
    assert str(log_path(env.store.id, jid, 2, 0)).startswith(str(corral_home))

    res = env.get(f"/jobs/{jid}/logs?tail=3").json
    assert res["job_id"] == jid and res["attempt"] == 2
    assert [entry["rank"] for entry in res["logs"]] == [0, 1, 2]
    assert res["logs"][1]["text"] == "rank 1 line 497\nrank 1 line 498\nrank 1 line 499\n"
    assert res["logs"][1]["path"] == f"job-{jid}/attempt-2/rank-1.log"  # no server folder (issue 46)
    assert res["logs"][2]["text"] == ""  # an allocated rank that wrote nothing yet
    assert env.get(f"/jobs/{jid}/logs").json["logs"][0]["text"].count("\n") == 200  # the default tail

    only = env.get(f"/jobs/{jid}/logs?rank=1&tail=1").json["logs"]
    assert only == [{"rank": 1, "path": f"job-{jid}/attempt-2/rank-1.log", "text": "rank 1 line 499\n",
                     "end": log_path(env.store.id, jid, 2, 1).stat().st_size}]  # where a follower starts
    # An earlier run: no allocation rows for it, but its files are found.
    first = env.get(f"/jobs/{jid}/logs?attempt=1").json
    assert first["attempt"] == 1 and first["current_attempt"] == 2
    assert first["logs"] == [{"rank": 0, "path": f"job-{jid}/attempt-1/rank-0.log", "text": "first attempt\n",
                              "end": 14}]
    assert env.get(f"/jobs/{jid}/logs?tail=0").status_code == 422


def test_no_logs_answer_holds_a_server_folder(env: Env, corral_home: Path) -> None:
    """Issue 46: the logs answer carried each log's absolute path on the server. Every kind of answer (tails, one
    rank, an earlier run, a follow, a log not written yet) names logs by `job-N/attempt-A/rank-R.log` alone."""
    jid = env.submit()["id"]
    _run(env.store, jid, [(0, "node-0", 0, 0, 1.0), (1, "node-1", 4, 0, 1.0)])
    path = log_path(env.store.id, jid, 1, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("hello\n")
    answers = [env.get(f"/jobs/{jid}/logs{query}") for query in (
        "", "?tail=1", "?rank=1", "?attempt=1", "?attempt=7", "?rank=0&offset=0", "?rank=0&offset=3", "?rank=1&offset=0")]
    assert all(a.status_code == 200 for a in answers)
    assert [e["path"] for e in answers[0].json["logs"]] == [f"job-{jid}/attempt-1/rank-0.log",
                                                            f"job-{jid}/attempt-1/rank-1.log"]
    for answer in answers:
        assert str(corral_home).encode() not in answer.data and env.store.id.encode() not in answer.data


def test_a_rank_the_job_never_has_is_a_422_naming_it(env: Env) -> None:
    """An empty answer for rank 7 of a 2-GPU job would read as a log not written yet (and a follower would wait on it
    for good): it is refused, naming the field and the ranks there are; nothing else changes."""
    jid = env.submit(num_gpus=2)["id"]
    for query in ("?rank=7", "?rank=2&offset=0", "?rank=2&offset=0&wait_s=5"):
        answer = env.get(f"/jobs/{jid}/logs{query}")
        assert answer.status_code == 422, query
        assert answer.json["errors"] == {"query": {"rank": [f"job {jid} has 2 workers (ranks 0-1)"]}}
    assert env.get(f"/jobs/{jid}/logs?rank=1").status_code == 200  # one it has, written or not
    lone = env.submit(num_gpus=0.5)["id"]
    assert env.get(f"/jobs/{lone}/logs?rank=1").json["errors"] == {
        "query": {"rank": [f"job {lone} has one worker (rank 0)"]}}


def test_logs_of_a_job_that_never_ran_are_empty(env: Env) -> None:
    job = env.submit()
    assert env.get(f"/jobs/{job['id']}/logs").json == {"job_id": job["id"], "attempt": 0, "state": "pending",
                                                       "current_attempt": 0, "logs": []}


# ---- cluster, models, policies ------------------------------------------------------------------------------------


def test_cluster_reports_nodes_gpus_tenants_and_totals(env: Env) -> None:
    now = time.time()
    with env.store.session() as s:
        for n in range(2):
            node = Node(name=f"node-{n}", index=n, preset="dgx-v100", alive=n == 0, address=f"10.0.0.{n}",
                        updated_at=now - 60 * n)
            node.gpus = [Gpu(index=n * 2 + i, local_index=i, gpu_type="V100-32GB", mem_gb=32.0) for i in range(2)]
            s.add(node)
    whole, half_a, half_b, done = (env.submit(name=n)["id"] for n in ("whole", "half-a", "half-b", "done"))
    env.submit("bob", name="waiting")
    _run(env.store, whole, [(0, "node-0", 0, 0, 1.0)])
    _run(env.store, half_a, [(0, "node-0", 1, 1, 0.5)])
    _run(env.store, half_b, [(0, "node-0", 1, 1, 0.25)])
    _run(env.store, done, [(0, "node-1", 2, 0, 1.0)])
    with env.store.session() as s:  # a released allocation holds nothing
        s.execute(update(Allocation).where(Allocation.job_id == done).values(released_at=now))
        s.execute(update(Job).where(Job.id == done).values(state=JobState.SUCCEEDED))
        s.add(PolicyVersion(name="tiresias", active=True, created_at=now, activated_at=now))

    c = env.get("/cluster").json
    assert [n["name"] for n in c["nodes"]] == ["node-0", "node-1"]
    n0, n1 = c["nodes"]
    assert (n0["alive"], n1["alive"], n0["preset"], n0["address"]) == (True, False, "dgx-v100", "10.0.0.0")
    assert (n0["since"], n1["since"]) == (now, now - 60)  # up since, down since
    g0, g1 = n0["gpus"]
    assert g0["tenants"] == [{"job_id": whole, "name": "whole", "share": 1.0, "user": "alice",
                               "team": "default"}]
    assert g0["free_share"] == 0
    assert [t["job_id"] for t in g1["tenants"]] == [half_a, half_b] and g1["free_share"] == 0.25
    assert all(g["tenants"] == [] and g["free_share"] == 1 for g in n1["gpus"])
    assert (g1["index"], g1["local_index"], g1["gpu_type"], g1["mem_gb"]) == (1, 1, "V100-32GB", 32.0)
    # node-1 is down: its GPUs are closed to new jobs and out of the usable count; node-0's are both taken.
    assert all(g["closed"] == "node node-1 is down" for g in n1["gpus"]) and g0["closed"] is None
    assert c["totals"] == {"nodes": 2, "gpus": 4, "gpus_usable": 2, "gpus_free": 0, "gpus_allocated": 2,
                           "gpus_shared": 1, "share_allocated": 1.75}
    assert c["queue"] == {"pending": 1, "running": 3}
    assert c["active_policy"] == "tiresias"


@pytest.mark.parametrize("show_others", [False, True])
def test_the_cluster_map_names_other_users_jobs_only_where_allowed(store: Store, corral_home: Path,
                                                                   show_others: bool) -> None:
    """Issue 46: `/cluster` showed every user other users' job names and users. Another user's job now shows its
    id, share and team only, unless the caller is an admin or the operator allows it (`--show-others-jobs`)."""
    env = make_env(store, CORRAL_SHOW_OTHERS_JOBS=show_others)
    with env.store.session() as s:
        node = Node(name="node-0", index=0, preset="dgx-v100", alive=True, address="10.0.0.0", updated_at=time.time())
        node.gpus = [Gpu(index=i, local_index=i, gpu_type="V100-32GB", mem_gb=32.0) for i in range(2)]
        s.add(node)
    hers, his = env.submit(name="secret-project")["id"], env.submit("bob", name="bobs-run")["id"]
    _run(env.store, hers, [(0, "node-0", 0, 0, 1.0)])
    _run(env.store, his, [(0, "node-0", 1, 1, 1.0)])

    def seen(who: str) -> dict[int, dict[str, Any]]:
        c = env.get("/cluster", who=who).json
        return {t["job_id"]: t for n in c["nodes"] for g in n["gpus"] for t in g["tenants"]}

    hidden = {"name": None, "user": None}
    named = {hers: {"name": "secret-project", "user": "alice"}, his: {"name": "bobs-run", "user": "bob"}}
    for who, mine, other in (("alice", hers, his), ("bob", his, hers)):
        tenants = seen(who)
        assert {k: tenants[mine][k] for k in ("name", "user")} == named[mine]
        assert {k: tenants[other][k] for k in ("name", "user")} == (named[other] if show_others else hidden)
        assert (tenants[other]["share"], tenants[other]["team"]) == (1.0, "default")  # the map still draws it
    assert {j: {k: t[k] for k in ("name", "user")} for j, t in seen("root").items()} == named  # admins see all


def test_models_lists_the_catalog(env: Env) -> None:
    models = env.get("/models").json["models"]
    assert [m["name"] for m in models] == [*catalog(), GENERIC_MODEL]  # the generic profile last
    assert models[-1]["source"].startswith("generic: no model named")
    resnet = next(m for m in models if m["name"] == "ResNet-50-bs64")
    profile = catalog()["ResNet-50-bs64"]
    assert resnet["kind"] == profile.kind.value and resnet["compute_ms"] == profile.compute_ms
    assert set(resnet) == {"name", "kind", "compute_ms", "sm", "membw", "mem_gb", "grad_mb", "overlap",
                           "latency_ms", "slo_ms", "source"}


def test_policies_list_and_switch(env: Env) -> None:
    got = env.get("/policies").json
    assert {"tiresias", "contention-greedy", "rl:default", "deepshare:deepshare"} <= set(got["available"])
    assert not any(n.endswith(":NAME") for n in got["available"])
    assert got["active"] is None

    resp = env.put("/policies/active", {"name": "tiresias"})
    assert resp.status_code == 403
    for bad in ("no-such-policy", "rl:no-such-agent"):
        resp = env.put("/policies/active", {"name": bad}, who="root")
        assert resp.status_code == 422 and "name" in field_errors(resp), resp.json
        assert bad in resp.json["message"]
    assert env.put("/policies/active", {}, who="root").status_code == 422
    assert env.notified == []

    for name in ("tiresias", "fifo"):
        resp = env.put("/policies/active", {"name": name}, who="root")
        assert resp.status_code == 200 and resp.json == {"active": name}
        assert env.get("/policies").json["active"] == name
    assert len(env.notified) == 2
    with env.store.session() as s:
        rows = {p.name: p for p in s.scalars(select(PolicyVersion)).all()}
        assert {n: p.active for n, p in rows.items()} == {"tiresias": False, "fifo": True}
        assert rows["fifo"].activated_by == "root" and rows["fifo"].activated_at is not None
    assert env.get("/cluster").json["active_policy"] == "fifo"


def test_concurrent_submissions_all_land_and_a_shared_client_token_makes_one_job(env: Env) -> None:
    app = env.client.application

    def post(body: dict[str, Any]) -> tuple[int, int]:
        resp = app.test_client().post(f"{API}/jobs", json=body, headers=env.auth())
        return resp.status_code, resp.json["id"]

    with ThreadPoolExecutor(8) as pool:
        distinct = list(pool.map(post, [EMULATED | {"name": f"j{i}"} for i in range(40)]))
        same = list(pool.map(post, [EMULATED | {"client_token": "once"}] * 16))
    assert [code for code, _ in distinct] == [201] * 40 and len({i for _, i in distinct}) == 40
    assert sorted(code for code, _ in same) == [200] * 15 + [201]
    assert len({i for _, i in same}) == 1
    assert env.job_count() == 41


@pytest.mark.slow
def test_idempotency_holds_under_a_burst_of_retries(env: Env) -> None:
    """400 concurrent submissions over 50 client tokens (eight retries each, interleaved), while another process's
    connections (the controller's, a replica's) keep committing writes: never an error, one job per token, and every
    retry answers with the first job. (On SQLite a submission that read before another connection's commit used to
    fail its insert with "database is locked", which no busy timeout waits out.)"""
    app = env.client.application
    # 400 requests, 16 at once, by one user: past the request limits (tests/test_request_limits.py), lifted here
    app.config["CORRAL_MAX_IN_FLIGHT"] = 16
    lifted = env.client.patch(f"{API}/users/alice/limits", json={"request_rate": 10_000, "request_burst": 10_000},
                              headers=env.auth("root"))
    assert lifted.status_code == 200
    tokens = [f"retry-{i}" for i in range(50)]
    bodies = [EMULATED | {"name": f"j-{t}", "client_token": t} for _ in range(8) for t in tokens]
    other = Store.open(env.store.url, migrate=False)
    stop = threading.Event()

    def controller_like_writes() -> None:
        while not stop.is_set():
            with other.session(write=True) as s:
                s.execute(update(Job).where(Job.state == JobState.PENDING).values(pending_reason="waiting"))

    def post(body: dict[str, Any]) -> tuple[str, int, int]:
        resp = app.test_client().post(f"{API}/jobs", json=body, headers=env.auth())
        return body["client_token"], resp.status_code, (resp.json or {}).get("id", -1)

    writer = threading.Thread(target=controller_like_writes)
    writer.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(post, bodies))
    finally:
        stop.set()
        writer.join(30)
        other.close()
    assert sorted({code for _, code, _ in results}) == [200, 201]
    by_token: dict[str, set[int]] = {}
    for token, _, job_id in results:
        by_token.setdefault(token, set()).add(job_id)
    assert all(len(ids) == 1 for ids in by_token.values())
    assert sum(code == 201 for _, code, _ in results) == 50 and env.job_count() == 50


def test_admins_can_keep_command_jobs_to_themselves(store: Store, corral_home: Path) -> None:
    """`corral serve --command-jobs admins`: a user's command job is a 403 naming `kind`, nothing stored; emulated
    jobs and admins' command jobs are unaffected."""
    env = make_env(store, CORRAL_COMMAND_JOBS="admins")
    resp = env.post("/jobs", COMMAND, "alice")
    assert resp.status_code == 403 and resp.json["message"].startswith("kind: command jobs")
    assert env.job_count() == 0
    assert env.post("/jobs", EMULATED, "alice").status_code == 201
    assert env.post("/jobs", COMMAND, "root").status_code == 201
    assert make_env(store, CORRAL_COMMAND_JOBS="everyone").post("/jobs", COMMAND, "bob").status_code == 201


def test_non_admins_command_jobs_need_an_account_other_than_the_servers(store: Store, corral_home: Path) -> None:
    """Secure by default: with no job accounts configured a non-admin's command job would run as the server's own OS
    user (which can read the store and make itself admin), so it is a 403 saying how to enable them; an admin's is
    taken. With one OS account per user (or a map), it is taken; a user the map lacks, or whose name the pattern
    cannot make an account of, is refused naming the reason."""
    env = make_env(store)
    resp = env.post("/jobs", COMMAND, "alice")
    assert resp.status_code == 403 and "--job-user-pattern" in resp.json["message"]
    assert env.job_count() == 0
    assert env.post("/jobs", COMMAND, "root").status_code == 201

    per_user = make_env(store, CORRAL_JOB_ACCOUNTS=JobAccounts(pattern="corral-{user}"))
    assert per_user.post("/jobs", COMMAND, "alice").status_code == 201
    mapped = make_env(store, CORRAL_JOB_ACCOUNTS=JobAccounts(mapping={"bob": "bob"}, mapping_file="users.yaml"))
    assert mapped.post("/jobs", COMMAND, "bob").status_code == 201
    refused = mapped.post("/jobs", COMMAND, "alice")
    assert refused.status_code == 403 and "no OS account in the job-user map" in refused.json["message"]
    with store.session() as s:
        token = create_token(s, "Carol")
    resp = per_user.client.post(f"{API}/jobs", json=COMMAND, headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 403 and "not a valid OS account name" in resp.json["message"]
    assert env.job_count() == 3

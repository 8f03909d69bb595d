"""Security review, issue 25 (items 3 and 5), through Flask's test client on SQLite and PostgreSQL: every number and
size a request carries is bounded (422 naming the field, nothing stored), no response is invalid JSON, lists are
paged and light, log reads are bounded in bytes whatever a worker wrote, malformed requests are 4xx (never 500),
and every response carries the security headers without ever showing where the server keeps its files."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update
from test_api import COMMAND, EMULATED, Env, _run, field_errors, make_env

from scheduler.core.paths import corral_home
from scheduler.live.job_files import log_path
from scheduler.live.store import Store
from scheduler.live.store.models import Gpu, Job, Node, Team
from web import limits
from web.api.logread import truncation_marker

API = "/api/v1"


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    return make_env(store)


def strict_json(data: bytes) -> Any:
    """JSON as a strict parser reads it (a browser's JSON.parse): NaN and Infinity are not JSON."""
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")
    return json.loads(data, parse_constant=refuse)


def raw(env: Env, method: str, path: str, text: str, who: str = "alice") -> Any:
    return env.client.open(API + path, method=method, data=text,
                           headers=env.auth(who) | {"Content-Type": "application/json"})


def teams(store: Store) -> int:
    with store.session() as s:
        return s.scalar(select(func.count()).select_from(Team)) or 0


# ---- (a) numbers: bounded on the way in, never NaN/Infinity on the way out ---------------------------------------


@pytest.mark.parametrize(("field", "value"), [
    ("duration_s", 5e-324),  # once accepted: its observed slowdown was Infinity
    ("duration_s", 0.5),
    ("duration_s", limits.MAX_JOB_SECONDS + 1),
    ("num_gpus", 1e-9),
    ("num_gpus", 0.001),
    ("num_gpus", limits.MAX_JOB_GPUS + 1),
    ("num_gpus", 10**400),  # an int no float holds
    ("slo_ms", 0.001),
    ("slo_ms", limits.MAX_SLO_MS * 2),
    ("priority", limits.MAX_PRIORITY + 1),
    ("priority", -limits.MAX_PRIORITY - 1),
])
def test_every_number_of_a_submission_is_bounded(env: Env, field: str, value: float) -> None:
    resp = env.post("/jobs", EMULATED | {field: value})
    assert resp.status_code == 422, resp.json
    assert field in field_errors(resp) and resp.json["message"].startswith(f"{field}: ")
    assert env.job_count() == 0 and env.notified == []


def test_the_bounds_are_the_documented_ones(env: Env) -> None:
    """At each bound a submission is taken, and the OpenAPI document states the bound (clients and the fuzzer read
    it)."""
    for body in ({"duration_s": limits.MIN_JOB_SECONDS}, {"duration_s": limits.MAX_JOB_SECONDS},
                 {"num_gpus": limits.MIN_GPU_SHARE}, {"slo_ms": limits.MIN_SLO_MS},
                 {"priority": -limits.MAX_PRIORITY}):
        assert env.post("/jobs", EMULATED | body).status_code == 201, body
    spec = env.client.get(f"{API}/openapi.json").json
    submit = spec["components"]["schemas"]["JobSubmit"]["properties"]
    assert (submit["duration_s"]["minimum"], submit["duration_s"]["maximum"]) == (1, limits.MAX_JOB_SECONDS)
    assert (submit["num_gpus"]["minimum"], submit["num_gpus"]["maximum"]) == (limits.MIN_GPU_SHARE,
                                                                               limits.MAX_JOB_GPUS)
    assert submit["priority"]["maximum"] == limits.MAX_PRIORITY
    assert submit["slo_ms"]["maximum"] == limits.MAX_SLO_MS
    assert submit["entrypoint"]["maxLength"] == limits.MAX_ENTRYPOINT
    assert submit["env"]["maxProperties"] == limits.MAX_ENV_VARS
    assert submit["name"]["maxLength"] == limits.MAX_NAME


def test_a_non_finite_number_in_the_store_is_written_as_null(env: Env) -> None:
    """Values already stored (before the bounds, or by a controller's arithmetic) must not make a response invalid
    JSON: the dashboard's JSON.parse failed on the whole queue for one job's `Infinity`."""
    job = env.submit()
    with env.store.session() as s:  # SQLite stores NaN as NULL, PostgreSQL keeps it: Infinity is there on both
        s.execute(update(Job).where(Job.id == job["id"]).values(
            state="succeeded", observed_slowdown=math.inf, predicted_slowdown=-math.inf,
            predicted_slowdown_avg=math.nan))
    for path in ("/jobs", f"/jobs/{job['id']}", f"/jobs/{job['id']}/explain"):
        resp = env.get(path)
        assert resp.status_code == 200
        body = strict_json(resp.data)  # raises on NaN/Infinity
        got = body["jobs"][0] if path == "/jobs" else body
        assert got["observed_slowdown"] is None, path
        if "predicted_slowdown" in got:
            assert got["predicted_slowdown"] is None


# ---- (b) sizes: per-field limits, light and paged lists ----------------------------------------------------------


@pytest.mark.parametrize(("field", "body"), [
    ("entrypoint", {"entrypoint": "x" * (limits.MAX_ENTRYPOINT + 1)}),
    ("env", {"env": {f"V{i}": "1" for i in range(limits.MAX_ENV_VARS + 1)}}),
    ("env", {"env": {"V" * (limits.MAX_ENV_NAME + 1): "1"}}),
    ("env", {"env": {"V": "x" * (limits.MAX_ENV_VALUE + 1)}}),
    ("env", {"env": {f"V{i}": "x" * 4000 for i in range(9)}}),  # each value fits, not all of them
    ("env", {"env": {"A=B": "1"}}),
    ("env", {"env": {"1X": "1"}}),
    ("env", {"env": {"": "1"}}),
    ("workdir", {"workdir": "/" * (limits.MAX_WORKDIR + 1)}),
    ("name", {"name": "x" * (limits.MAX_NAME + 1)}),
    ("client_token", {"client_token": "t" * (limits.MAX_NAME + 1)}),
])
def test_an_oversized_field_is_refused_by_name(env: Env, field: str, body: dict[str, Any]) -> None:
    resp = env.post("/jobs", COMMAND | body, who="root")
    assert resp.status_code == 422, resp.json
    assert field in field_errors(resp) and field in resp.json["message"]
    assert env.job_count() == 0 and env.notified == []


def test_lists_leave_out_the_large_fields_which_the_job_shows(env: Env) -> None:
    big = {"entrypoint": "e" * limits.MAX_ENTRYPOINT,
           "env": {f"V{i}": "x" * 1000 for i in range(30)}, "workdir": "/w" * 1000}
    ids = [env.post("/jobs", COMMAND | big | {"name": f"big{i}"}, who="root").json["id"] for i in range(5)]
    listing = env.get("/jobs?limit=1000", who="root")
    assert listing.status_code == 200 and len(listing.json["jobs"]) == 5
    assert len(listing.data) < 10_000  # 5 jobs of ~50 KB each, listed in a few KB
    for j in listing.json["jobs"]:
        assert not {"entrypoint", "env", "workdir"} & set(j)
    for jid in ids[:1]:
        shown = env.get(f"/jobs/{jid}", who="root").json
        assert shown["entrypoint"] == big["entrypoint"] and shown["env"] == big["env"]
        assert shown["workdir"] == big["workdir"]


@pytest.mark.parametrize("path", ["/jobs", "/tokens", "/users", "/teams"])
def test_every_list_is_paged_with_a_documented_maximum(env: Env, path: str) -> None:
    key = path.strip("/")
    env.submit("alice"), env.submit("bob")
    env.post("/teams", {"name": "vision", "quota_gpus": 1}, who="root")
    whole = env.get(path, who="root").json
    assert whole["total"] >= 2 and len(whole[key]) == whole["total"]
    first = env.get(f"{path}?limit=1", who="root").json
    second = env.get(f"{path}?limit=1&offset=1", who="root").json
    assert first["total"] == whole["total"] and first[key] == whole[key][:1] and second[key] == whole[key][1:2]
    too_many = env.get(f"{path}?limit={limits.MAX_PAGE + 1}", who="root")
    assert too_many.status_code == 422 and "limit" in too_many.json["errors"]["query"]
    spec = env.client.get(f"{API}/openapi.json").json
    params = {p["name"]: p for p in spec["paths"][API + path]["get"]["parameters"]}
    assert params["limit"]["schema"]["maximum"] == limits.MAX_PAGE


# ---- (c) logs: read from the end, bounded in bytes ---------------------------------------------------------------


def _log(env: Env, rank: int = 0) -> tuple[int, Path]:
    job = env.submit()
    _run(env.store, job["id"], [(rank, f"node-{rank}", rank, 0, 1.0)])
    path = log_path(env.store.id, job["id"], 1, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    return job["id"], path


def test_the_tail_of_a_huge_line_is_read_from_the_end_and_bounded(env: Env) -> None:
    """A worker printed 50 MB without a newline: `?tail=1` answers its last bytes behind a marker, and serving it
    allocates a few MB, not the file."""
    jid, path = _log(env)
    with path.open("wb") as f:
        for _ in range(50):
            f.write(b"y" * (1024 * 1024))
        f.write(b"THE END")
    tracemalloc.start()
    try:
        resp = env.get(f"/jobs/{jid}/logs?tail=1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert resp.status_code == 200
    text = resp.json["logs"][0]["text"]
    marker = truncation_marker(limits.MAX_LOG_RESPONSE_BYTES)
    assert text.startswith(marker) and text.endswith("THE END")
    assert len(text) == len(marker) + limits.MAX_LOG_RESPONSE_BYTES
    assert len(resp.data) < limits.MAX_LOG_RESPONSE_BYTES + 4096
    assert peak < 12 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB while serving a 50 MiB line"


def test_many_lines_are_cut_at_the_byte_budget_shared_by_the_ranks(env: Env) -> None:
    jid, path = _log(env)
    line = "z" * 99 + "\n"
    path.write_text(line * 30_000)  # 3 MB
    other = log_path(env.store.id, jid, 1, 1)
    other.write_text("short\n")
    logs = env.get(f"/jobs/{jid}/logs?tail=100000").json["logs"]
    per_rank = limits.MAX_LOG_RESPONSE_BYTES // 2
    text = logs[0]["text"]
    assert text.startswith(truncation_marker(per_rank))
    assert len(text) <= len(truncation_marker(per_rank)) + per_rank and text.endswith(line)
    assert logs[1]["text"] == "short\n"
    # Under the budget, nothing changes: whole lines, no marker.
    assert env.get(f"/jobs/{jid}/logs?tail=3&rank=0").json["logs"][0]["text"] == line * 3


def test_an_unreadable_log_is_said_without_its_path(env: Env) -> None:
    jid, path = _log(env)
    path.mkdir()  # a folder where the log should be: open() fails (IsADirectoryError was a 500)
    resp = env.get(f"/jobs/{jid}/logs")
    assert resp.status_code == 200
    text = resp.json["logs"][0]["text"]
    assert "cannot be read" in text and str(corral_home()) not in text


# ---- (d) malformed requests: always 4xx, never 500 ---------------------------------------------------------------

DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 50_000 + "1" + "}" * 50_000
LONG_INT = "9" * 5000
JSON_ENDPOINTS = [("POST", "/jobs"), ("PUT", "/policies/active"), ("POST", "/whatif"), ("POST", "/teams"),
                  ("PATCH", "/teams/default"), ("PATCH", "/users/alice"), ("PUT", "/nodes/node-0/health")]


@pytest.mark.parametrize(("method", "path"), JSON_ENDPOINTS)
@pytest.mark.parametrize(("text", "says"), [(DEEP_ARRAY, "nested"), (DEEP_OBJECT, "nested"),
                                            ('{"priority": ' + LONG_INT + "}", "5000 digits")])
def test_a_body_no_field_could_take_is_a_400_on_every_json_endpoint(env: Env, method: str, path: str, text: str,
                                                                    says: str) -> None:
    resp = raw(env, method, path, text, who="root")
    assert resp.status_code == 400, (resp.status_code, resp.get_data(as_text=True)[:300])
    assert says in resp.json["message"]
    assert env.job_count() == 0 and teams(env.store) == 1


SURROGATE = "\ud800"


@pytest.mark.parametrize(("method", "path", "body", "field"), [
    ("POST", "/jobs", EMULATED | {"name": f"a{SURROGATE}"}, "name"),
    ("POST", "/jobs", EMULATED | {"client_token": SURROGATE}, "client_token"),
    ("POST", "/jobs", COMMAND | {"entrypoint": f"echo {SURROGATE}"}, "entrypoint"),
    ("POST", "/jobs", COMMAND | {"env": {"SEED": SURROGATE}}, "env"),  # the worker died inside Popen on it
    ("POST", "/jobs", COMMAND | {"env": {f"K{SURROGATE}": "1"}}, "env"),
    ("PATCH", "/users/alice", {"team": SURROGATE}, "team"),
    ("POST", "/teams", {"name": SURROGATE, "quota_gpus": 1}, "name"),
    ("PUT", "/policies/active", {"name": SURROGATE}, "name"),
])
def test_a_lone_surrogate_is_a_422_naming_the_field(env: Env, method: str, path: str, body: dict[str, Any],
                                                    field: str) -> None:
    text = json.dumps(body)  # ensure_ascii: the surrogate travels as the escape \ud800, as a client would send it
    assert "\\ud800" in text
    resp = raw(env, method, path, text, who="root")
    assert resp.status_code == 422, (resp.status_code, resp.get_data(as_text=True)[:300])
    assert "surrogate" in " ".join(map(str, resp.json["errors"]["json"][field]))
    assert resp.json["message"].startswith(f"{field}: ")
    assert env.job_count() == 0 and teams(env.store) == 1
    with env.store.session() as s:
        from scheduler.live.store import queries
        assert queries.user_by_name(s, "alice").team == "default"  # type: ignore[union-attr]


@pytest.mark.parametrize(("path", "field"), [(f"/jobs/{LONG_INT}", "job_id"), (f"/jobs/{LONG_INT}/logs", "job_id"),
                                             (f"/jobs?offset={LONG_INT}", "offset"),
                                             (f"/jobs/1/logs?tail={LONG_INT}", "tail")])
def test_a_5000_digit_number_in_a_path_or_query_is_a_422(env: Env, path: str, field: str) -> None:
    env.submit()
    resp = env.get(path)
    assert resp.status_code == 422, (resp.status_code, resp.get_data(as_text=True)[:300])
    assert field in resp.json["message"]


# ---- (e) security headers, and no server path in an error --------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/static/js/app.js", "/api/docs", "/api/docs/assets/swagger-ui.css",
                                  f"{API}/openapi.json", f"{API}/health", f"{API}/jobs", f"{API}/nope"])
def test_every_response_carries_the_security_headers(env: Env, path: str) -> None:
    resp = env.client.get(path)  # no token: the 401 of /jobs gets them too
    assert resp.status_code in (200, 401, 404)
    csp = dict(d.strip().split(" ", 1) for d in resp.headers["Content-Security-Policy"].split(";"))
    assert csp["frame-ancestors"] == "'none'" and csp["default-src"] == "'self'"
    assert "'unsafe-inline'" not in csp["script-src"] and "'unsafe-eval'" not in csp["script-src"]
    assert resp.headers["X-Frame-Options"] == "DENY"
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["Referrer-Policy"] == "no-referrer"


def test_an_inline_script_is_allowed_on_swagger_uis_page_only() -> None:
    """A page that reflected a request's text into an inline <script> must not get it allowed by hash: only Swagger
    UI's page (flask-smorest's template) has its inline script hashed into the policy."""
    from flask import Flask

    from web import security

    app = Flask(__name__)
    security.init_app(app)
    page = "<html><script>alert(1)</script></html>"
    app.add_url_rule("/echo", "echo", lambda: page)
    app.add_url_rule(security.SWAGGER_PAGE, "docs", lambda: page)
    client = app.test_client()
    assert "sha256-" not in client.get("/echo").headers["Content-Security-Policy"]
    assert "sha256-" in client.get(security.SWAGGER_PAGE).headers["Content-Security-Policy"]


def test_the_pages_scripts_are_all_allowed_by_the_policy(env: Env) -> None:
    """The dashboard has no inline script (its scripts come from 'self'); Swagger UI's page has one, allowed by its
    hash and nothing else, and every asset either page names is served from this origin."""
    for path in ("/", "/api/docs"):
        resp = env.client.get(path)
        page = resp.get_data()
        script_src = resp.headers["Content-Security-Policy"].split("script-src ")[1].split(";")[0]
        inline = re.findall(rb"<script>(.*?)</script>", page, re.DOTALL)
        hashes = {f"'sha256-{base64.b64encode(hashlib.sha256(s).digest()).decode()}'" for s in inline}
        assert set(script_src.split()) == {"'self'"} | hashes
        assert bool(inline) == (path == "/api/docs")
        for src in re.findall(rb'(?:src|href)="([^"#]+)"', page):
            if src.startswith(b"data:"):
                continue
            assert src.startswith(b"/"), src  # this origin, no CDN
            assert env.client.get(src.decode()).status_code == 200, src


def test_an_error_names_the_problem_never_the_servers_folders(env: Env) -> None:
    """A what-if trace that does not exist: the message names the trace in $CORRAL_HOME/traces, not the folder."""
    with env.store.session() as s:  # what-if needs the live cluster the controller would have registered
        node = Node(name="node-0", index=0, preset="dgx-a100", alive=True, updated_at=0.0)
        node.gpus = [Gpu(index=i, local_index=i, gpu_type="A100-80GB", mem_gb=80.0) for i in range(8)]
        s.add(node)
    traces = corral_home() / "traces"
    traces.mkdir(parents=True)
    (traces / "broken.csv").write_text("garbage\n1,2\n")
    for name in ("missing.csv", "broken.csv", "../etc/passwd"):
        resp = env.post("/whatif", {"trace": name}, who="root")
        assert resp.status_code == 422, resp.json
        text = resp.get_data(as_text=True)
        assert str(corral_home()) not in text and "$CORRAL_HOME/traces" in text, text
    assert "missing.csv does not exist" in env.post("/whatif", {"trace": "missing.csv"}, who="root").json["message"]


@pytest.mark.parametrize("name", ["rl:no-such-agent", "deepshare:no-such-agent", "rl:../agent"])
def test_an_agent_that_cannot_load_is_named_not_its_folder(env: Env, name: str) -> None:
    """The policy layer says where it looked for an agent; the API says it with names ($CORRAL_HOME, <corral>)."""
    resp = env.put("/policies/active", {"name": name}, who="root")
    assert resp.status_code == 422
    text = resp.get_data(as_text=True)
    code_dir = str(Path(__file__).resolve().parents[1])
    assert code_dir not in text and str(corral_home()) not in text and "agents/zoo" in text, text

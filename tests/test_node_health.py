"""Issue 14: GPU health reaches the service. A node agent started with `--api URL` pushes each health reading to
`PUT /api/v1/nodes/<name>/health` (an admin's token from CORRAL_TOKEN); the API validates it, keeps the last one on
the node's row (migration 0006) and `GET /cluster` shows it with its age, stale after 3 of the agent's reporting
intervals. Here: the endpoint on SQLite and PostgreSQL (validation, auth, unknown nodes, staleness), the migration,
and the agent's push against a stand-in HTTP server (what it sends, that the real API's schema takes it, and that a
failing API never stops the agent). The real agent pushing from a real Ray node is in tests/test_node_agent.py; the
dashboard's badges in tests/test_dashboard.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, select, text, update

from scheduler.live.cluster import build_live_cluster
from scheduler.live.node.daemon import AgentOptions, NodeAgent
from scheduler.live.node.report import MAX_XIDS, HealthPusher, payload
from scheduler.live.nodes import STALE_INTERVALS, register_nodes
from scheduler.live.runs import NodeInfo
from scheduler.live.store import Store
from scheduler.live.store.db import alembic_config
from scheduler.live.store.models import Node
from scheduler.live.store.queries import create_token
from tests.test_node_agent import StandIn, fake_pynvml
from web import create_app
from web.schemas.nodes import NodeHealthArgs

API = "/api/v1"
GPUS = 2


def reading(index: int, status: str = "ok", **kw: Any) -> dict[str, Any]:
    return {"index": index, "status": status, "temperature_c": 40 + index, "ecc_uncorrected": 0, "xid_errors": [],
            "error": "", **kw}


def report(*gpus: dict[str, Any], interval_s: float = 10.0, agent: str = "running") -> dict[str, Any]:
    return {"agent": agent, "updated_at": time.time(), "interval_s": interval_s,
            "gpus": list(gpus) or [reading(i) for i in range(GPUS)],
            "mps": {"enabled": True, "daemon_running": False, "clients": 0}}


class Api:
    def __init__(self, store: Store) -> None:
        self.store = store
        with store.session() as s:
            self.tokens = {"root": create_token(s, "root", admin=True), "alice": create_token(s, "alice")}
        names = ["n0", "n1"]
        with store.session() as s:
            register_nodes(s, [NodeInfo(n, GPUS, True, n, "") for n in names],
                           build_live_cluster("dgx-a100", [GPUS, GPUS]), names, ["dgx-a100"] * 2, time.time())
        self.client = create_app(store).test_client()

    def put(self, node: str, body: Any, who: str | None = "root") -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return self.client.put(f"{API}/nodes/{node}/health", json=body, headers=headers)

    def nodes(self) -> dict[str, dict[str, Any]]:
        resp = self.client.get(f"{API}/cluster", headers={"Authorization": f"Bearer {self.tokens['alice']}"})
        assert resp.status_code == 200, resp.json
        return {n["name"]: n for n in resp.json["nodes"]}

    def stored(self, node: str) -> tuple[Any, Any]:
        with self.store.session() as s:
            row = s.scalars(select(Node).where(Node.name == node)).one()
            return row.health, row.health_at


@pytest.fixture
def api(store: Store) -> Api:
    return Api(store)


# ---- the endpoint ------------------------------------------------------------------------------------------------


def test_a_report_is_stored_and_the_cluster_map_shows_it(api: Api) -> None:
    assert api.nodes()["n0"]["health"] is None and api.nodes()["n0"]["health_at"] is None  # never reported
    before = time.time()
    resp = api.put("n0", report(reading(0), reading(1, "degraded", ecc_uncorrected=2, xid_errors=[48])))
    assert resp.status_code == 200, resp.json
    assert resp.json["status"] == "degraded" and resp.json["stale"] is False  # derived from the GPUs'
    node = api.nodes()["n0"]
    assert before <= node["health_at"] <= time.time()
    health = node["health"]
    assert (health["status"], health["stale"], health["agent"], health["interval_s"]) == ("degraded", False,
                                                                                          "running", 10.0)
    assert health["gpus"][1] == reading(1, "degraded", ecc_uncorrected=2, xid_errors=[48], temperature_c=41)
    assert health["mps"] == {"enabled": True, "daemon_running": False, "clients": 0}
    assert api.nodes()["n1"]["health"] is None  # only the node it was about
    # The next report replaces it: the GPU recovered (ECC counts reset with a driver reload).
    assert api.put("n0", report()).status_code == 200
    assert api.nodes()["n0"]["health"]["status"] == "ok"


def test_virtual_gpus_are_healthy_and_an_unreachable_one_is_not(api: Api) -> None:
    assert api.put("n0", report(reading(0, "virtual"), reading(1, "virtual"))).json["status"] == "ok"
    bad = api.put("n0", report(reading(0), reading(1, "unreachable", temperature_c=None, error="GPU is lost")))
    assert bad.json["status"] == "degraded" and bad.json["gpus"][1]["error"] == "GPU is lost"


def test_a_report_older_than_three_intervals_is_stale(api: Api) -> None:
    assert api.put("n0", report(interval_s=10.0)).status_code == 200
    for age, stale in ((STALE_INTERVALS * 10.0 - 1.0, False), (STALE_INTERVALS * 10.0 + 1.0, True)):
        with api.store.session() as s:
            s.execute(update(Node).where(Node.name == "n0").values(health_at=time.time() - age))
        health = api.nodes()["n0"]["health"]
        assert health["stale"] is stale, (age, health)
        assert health["age_s"] == pytest.approx(age, abs=2.0)
    # The interval is each agent's own: a node reporting every second is stale after 3 s.
    assert api.put("n1", report(interval_s=1.0)).status_code == 200
    with api.store.session() as s:
        s.execute(update(Node).where(Node.name == "n1").values(health_at=time.time() - 3.5))
    assert api.nodes()["n1"]["health"]["stale"] is True


@pytest.mark.parametrize(("body", "field", "words"), [
    ({k: v for k, v in report().items() if k != "gpus"}, ("gpus",), "Missing data"),
    ({**report(), "gpus": []}, ("gpus",), "Length must be between 1 and 64"),
    (report(reading(0, "melted"), reading(1)), ("gpus", "0", "status"), "Must be one of"),
    (report(reading(0), reading(0)), ("gpus", "1", "index"), "reported twice"),
    (report(reading(-1)), ("gpus", "0", "index"), "greater than or equal to 0"),
    (report(reading(0, temperature_c="hot")), ("gpus", "0", "temperature_c"), "Not a valid integer"),
    (report(reading(0, xid_errors=list(range(MAX_XIDS + 1)))), ("gpus", "0", "xid_errors"),
     f"Longer than maximum length {MAX_XIDS}"),
    ({**report(), "interval_s": 0.01}, ("interval_s",), "greater than or equal to 0.2"),
    ({**report(), "agent": "dreaming"}, ("agent",), "Must be one of"),
    ({**report(), "status": "ok"}, ("status",), "Unknown field"),  # derived by the API, not taken from the node
    ({**report(), "mps": {"clients": 1}}, ("mps", "enabled"), "Missing data"),
    (report(reading(0, error="a\x00b")), ("gpus",), "NUL"),
])
def test_a_bad_report_is_a_422_naming_the_field_and_stores_nothing(api: Api, body: dict[str, Any],
                                                                     field: tuple[str, ...], words: str) -> None:
    resp = api.put("n0", body)
    assert resp.status_code == 422, resp.json
    errors: Any = resp.json["errors"]["json"]
    for key in field:
        errors = errors[key]
    assert words in json.dumps(errors), resp.json
    assert api.stored("n0") == (None, None)


def test_a_reading_for_a_gpu_the_node_does_not_have_is_a_422(api: Api) -> None:
    resp = api.put("n0", report(reading(0), reading(GPUS)))
    assert resp.status_code == 422
    why = f"node 'n0' has {GPUS} GPU(s), numbered 0 to 1; got {GPUS}"
    assert resp.json["errors"]["json"]["gpus"]["1"]["index"] == [why]
    assert resp.json["message"].startswith("gpus.1.index: ")
    assert api.stored("n0") == (None, None)


def test_unknown_nodes_are_404(api: Api) -> None:
    for name in ("nope", "a%00b", "x" * 65):  # a NUL byte or an overlong name must not reach PostgreSQL as a 500
        resp = api.put(name, report())
        assert resp.status_code == 404, (name, resp.json)
    assert "not found" in api.put("nope", report()).json["message"]


def test_only_admins_report_health(api: Api) -> None:
    assert api.put("n0", report(), who=None).status_code == 401
    refused = api.put("n0", report(), who="alice")
    assert refused.status_code == 403 and "not an admin" in refused.json["message"]
    assert api.put("n0", {"junk": 1}, who="alice").status_code == 403  # before validation: nothing learnt
    assert api.stored("n0") == (None, None)


def test_the_endpoint_is_in_the_openapi_document(api: Api) -> None:
    spec = api.client.get(f"{API}/openapi.json").json
    op = spec["paths"]["/api/v1/nodes/{name}/health"]["put"]
    assert {"200", "422"} <= set(op["responses"]) and op["requestBody"]["required"] is True
    node = spec["components"]["schemas"]["Node"]["properties"]
    assert {"health", "health_at"} <= set(node)


# ---- the migration -------------------------------------------------------------------------------------------------


def test_migration_0006_keeps_the_nodes_and_adds_empty_health(db_url: str) -> None:
    engine = create_engine(db_url)
    cfg = alembic_config(db_url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0005")
        conn.execute(text("INSERT INTO nodes (name, \"index\", preset, alive, updated_at) "
                          "VALUES ('old', 0, 'pcie-t4', true, 1.0)"))
        command.upgrade(cfg, "0006")
        assert conn.execute(text("SELECT name, health, health_at FROM nodes")).all() == [("old", None, None)]
        command.downgrade(cfg, "0005")
        assert conn.execute(text("SELECT name FROM nodes")).all() == [("old",)]
    engine.dispose()


# ---- the agent's push, against a stand-in API ------------------------------------------------------------------------


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn([200])
    yield server
    server.close()


def agent(tmp_path: Path, api: str | None, token: str | None = "s3cret", **kw: Any) -> tuple[NodeAgent, list[str]]:
    lines: list[str] = []
    opts = AgentOptions(address="127.0.0.1:1", name="n1", gpus=None, node_dir=tmp_path / "n1", mps_control="none",
                        health_interval_s=5.0, api=api, api_token=token)
    return NodeAgent(opts, out=lines.append, **kw), lines


def test_the_agent_pushes_each_reading_with_its_token_in_the_api_s_schema(tmp_path: Path, stand_in: StandIn) -> None:
    nv = fake_pynvml([("NVIDIA A100-SXM4-80GB", 81920)] * 2, ecc={1: 3}, xids=[(1, 79)])
    node, lines = agent(tmp_path, stand_in.url, nvml_module=nv)
    node.prepare()
    assert f"  health: pushed to {stand_in.url}/api/v1/nodes/n1/health every 5 s" in lines
    written = node.report_health()
    node.close()  # its last report says the agent stopped
    assert [r["path"] for r in stand_in.requests] == ["/api/v1/nodes/n1/health"] * 2
    assert {r["auth"] for r in stand_in.requests} == {"Bearer s3cret"}
    first, last = (r["body"] for r in stand_in.requests)
    assert first == payload(written, 5.0)
    assert NodeHealthArgs().load(first) == first  # what the API validates, taken as it is
    assert (first["agent"], last["agent"]) == ("running", "stopped")
    assert first["interval_s"] == 5.0 and first["updated_at"] == written["updated_at"]
    assert first["gpus"][1]["status"] == "degraded" and first["gpus"][1]["ecc_uncorrected"] == 3
    assert first["gpus"][1]["xid_errors"] == [79] and first["gpus"][0]["status"] == "ok"
    assert node.pusher is not None and node.pusher.pushed == 2


def test_a_failing_api_is_logged_once_retried_and_never_stops_the_agent(tmp_path: Path) -> None:
    server = StandIn([404, 404, 500, 200, 200])
    try:
        node, lines = agent(tmp_path, server.url, nvml_module=fake_pynvml([("Tesla T4", 15360)]))
        node.prepare()
        for _ in range(5):
            node.report_health()  # never raises
        failures = [x for x in lines if "failed" in x]
        # One line per change of outcome: the 404 (said once for two readings), the 500, then the recovery.
        assert len(failures) == 2 and "HTTP 404: node 'n1' not found" in failures[0] and "HTTP 500" in failures[1]
        assert lines[-1] == f"  health: reaches {server.url}/api/v1/nodes/n1/health again"
        assert len(server.requests) == 5 and node.pusher is not None and node.pusher.pushed == 2
        node.close()
    finally:
        server.close()
    # Nobody listens any more: the readings go on, health.json is written, one line says why the push failed.
    node, lines = agent(tmp_path, server.url, nvml_module=fake_pynvml([("Tesla T4", 15360)]))
    node.prepare()
    for _ in range(3):
        assert node.report_health()["status"] == "ok"
    assert sum("no answer from the API" in x for x in lines) == 1
    node.close()


def test_without_a_token_the_agent_says_so_and_does_not_push(tmp_path: Path, stand_in: StandIn) -> None:
    node, lines = agent(tmp_path, stand_in.url, token=None, nvml_module=fake_pynvml([("Tesla T4", 15360)]))
    node.prepare()
    node.report_health()
    node.close()
    assert any("not pushed" in x and "CORRAL_TOKEN is not set" in x and "corral token create" in x for x in lines)
    assert node.pusher is None and stand_in.requests == []


def test_a_refused_token_says_what_token_is_needed(tmp_path: Path) -> None:
    server = StandIn([403])
    try:
        out: list[str] = []
        pusher = HealthPusher(server.url, "t", "n1", out.append)
        assert pusher.push({"agent": "running", "updated_at": 1.0, "gpus": [reading(0)]}, 10.0) is False
        assert "HTTP 403" in out[0] and "admin" in out[0]
    finally:
        server.close()

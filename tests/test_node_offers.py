"""What a node offers jobs, as users see it before they submit: the labels a constraint matches on each node (its
hardware's with its operator's, listed by `GET /cluster` by the core's one mapping), and the virtual environments its
operator declared (`CORRAL_VENVS`), which its agent advertises as it does its labels, the controller writes to the
store, and a submission naming one is checked against (a 422 naming `environment.venv` rather than a launch that
fails). Constraints' own rule is tests/test_constraints.py's; environments' tests/test_environments.py's."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import StartingBackend
from sqlalchemy import func, select
from test_api import Env, field_errors, make_env

from policies import make_policy
from scheduler.core.constraints import Constraints
from scheduler.live.cluster import ModelNode, model_cluster
from scheduler.live.controller import Controller
from scheduler.live.node import environments as node_envs
from scheduler.live.node.daemon import AgentOptions, NodeAgent
from scheduler.live.nodes import register_nodes
from scheduler.live.ray_backend import advertised_venvs
from scheduler.live.runs import NodeInfo, node_resources
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job as JobRow

# name -> (preset, operator's labels, venvs declared); t1's operator says its interconnect is RoCE: the operator's
# label wins over the hardware's, in the model and in the listing alike.
NODES: dict[str, tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "h0": ("hgx-h100", (("zone", "a"),), ("torch",)),
    "h1": ("hgx-h100", (("zone", "b"),), ()),
    "t0": ("pcie-t4", (), ("jax", "torch")),
    "t1": ("pcie-t4", (("interconnect", "roce"),), ()),
}
GPUS = {"hgx-h100": 8, "pcie-t4": 4}


def _register(store: Store, venvs: dict[str, tuple[str, ...]] | None = None, down: tuple[str, ...] = ()) -> None:
    venvs = venvs if venvs is not None else {n: v for n, (_, _, v) in NODES.items()}
    reported = [NodeInfo(n, GPUS[p], n not in down, n, "", p, None, labels, venvs[n])
                for n, (p, labels, _) in NODES.items()]
    cluster = model_cluster([ModelNode(n, GPUS[p], p, None, labels) for n, (p, labels, _) in NODES.items()])
    with store.session(write=True) as s:
        register_nodes(s, reported, cluster, list(NODES), [p for p, _, _ in NODES.values()], time.time())


@pytest.fixture
def api(store: Store, corral_home: Path) -> Env:
    return make_env(store, CORRAL_COMMAND_JOBS="everyone")


def _jobs(store: Store) -> int:
    with store.session() as s:
        return int(s.scalar(select(func.count(JobRow.id))) or 0)


# ---- the labels a constraint matches -------------------------------------------------------------------------------


def test_the_cluster_map_lists_the_labels_a_constraint_matches_on_each_node(api: Env) -> None:
    _register(api.store)
    nodes = {n["name"]: n for n in api.get("/cluster").json["nodes"]}
    assert nodes["h0"]["constraint_labels"] == {"gpu": "h100", "interconnect": "nvlink", "zone": "a"}
    assert nodes["t0"]["constraint_labels"] == {"gpu": "t4", "interconnect": "pcie"}
    assert nodes["t1"]["constraint_labels"] == {"gpu": "t4", "interconnect": "roce"}
    assert nodes["h0"]["labels"] == {"zone": "a"} and nodes["t0"]["labels"] == {}  # still the operator's alone
    # The listing is the model's own labelling, by which the controller matches, node for node.
    model = model_cluster([ModelNode(n, GPUS[p], p, None, labels) for n, (p, labels, _) in NODES.items()])
    for i, name in enumerate(model.node_names):
        assert nodes[name]["constraint_labels"] == dict(model.node_labels[i]), name
        made = Constraints.make(labels=nodes[name]["constraint_labels"])
        assert made is not None and made.matches(name, model.node_labels[i], model.node_gpu_types[i])


@pytest.mark.parametrize("labels", [{"gpu": "t4"}, {"gpu": "h100", "zone": "b"}, {"interconnect": "roce"},
                                    {"gpu": "h100", "interconnect": "nvlink"}])
def test_a_job_constrained_on_listed_labels_is_accepted(api: Env, labels: dict[str, str]) -> None:
    _register(api.store)
    listed = [n["constraint_labels"] for n in api.get("/cluster").json["nodes"]]
    assert any(labels.items() <= node.items() for node in listed), (labels, listed)
    job = {"name": "x", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 60.0,
           "constraints": {"labels": labels}}
    resp = api.post("/jobs", job)
    assert resp.status_code == 201, resp.json
    assert resp.json["constraints"] == {"labels": labels}
    unlisted = api.post("/jobs", {**job, "constraints": {"labels": {"gpu": "a100"}}})
    assert unlisted.status_code == 422 and "constraints.labels" in field_errors(unlisted), unlisted.json


# ---- the virtual environments a node declares: advertised, stored, checked at submission ---------------------------


def test_a_node_advertises_the_venvs_its_operator_declared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = node_resources("t0", 2, venvs=("jax", "torch"))
    assert res["corral_venv_jax"] == res["corral_venv_torch"] == 1.0
    assert advertised_venvs(res) == ("jax", "torch") and advertised_venvs(node_resources("t0", 2)) == ()
    monkeypatch.setenv(node_envs.VENVS_VAR, f"torch={tmp_path / 'torch'}, a b={tmp_path / 'x'},jax={tmp_path / 'j'}")
    lines: list[str] = []
    NodeAgent(AgentOptions(address="127.0.0.1:1", name="t0", gpus=2, node_dir=tmp_path / "t0", dry_run=True,
                           mps_control="none"), out=lines.append).run()
    line = next(x for x in lines if x.strip().startswith("resources:"))
    assert advertised_venvs(json.loads(line.split(":", 1)[1])) == ("jax", "torch")
    assert any("virtual environments (CORRAL_VENVS): jax, torch" in x for x in lines), lines
    assert any("note:" in x and "'a b'" in x and "not advertised" in x for x in lines), lines  # no job could name it


COMMAND = {"name": "train", "kind": "command", "model": "ResNet-50-bs64", "num_gpus": 1, "entrypoint": "python t.py"}


def test_a_venv_no_alive_node_declares_is_a_422_naming_the_field_and_those_that_exist(api: Env) -> None:
    _register(api.store)
    with api.store.session() as s:
        assert {n.name: n.venvs for n in q.nodes_with_gpus(s)} == {"h0": ["torch"], "h1": None, "t0": ["jax", "torch"],
                                                                  "t1": None}
    resp = api.post("/jobs", COMMAND | {"environment": {"venv": "tf"}})
    assert resp.status_code == 422, resp.json
    why = " ".join(field_errors(resp)["environment.venv"])
    assert "'tf'" in why and "jax, torch" in why and "CORRAL_VENVS" in why, why
    assert _jobs(api.store) == 0
    ok = api.post("/jobs", COMMAND | {"environment": {"venv": "jax"}})
    assert ok.status_code == 201 and ok.json["environment"] == {"venv": "jax"}, ok.json
    again = api.post(f"/jobs/{ok.json['id']}/resubmit", {"environment": {"venv": "tf"}})
    assert again.status_code == 422 and "environment.venv" in field_errors(again), again.json  # checked alike


def test_a_venv_declared_only_on_a_node_that_is_down_is_refused(api: Env) -> None:
    _register(api.store, down=("t0",))  # jax is t0's alone
    resp = api.post("/jobs", COMMAND | {"environment": {"venv": "jax"}})
    assert resp.status_code == 422, resp.json
    assert "torch" in " ".join(field_errors(resp)["environment.venv"])  # what the alive nodes do declare
    _register(api.store)  # t0 is back
    assert api.post("/jobs", COMMAND | {"environment": {"venv": "jax"}}).status_code == 201


@pytest.mark.parametrize(("asked", "status", "words"), [
    ({"constraints": {"labels": {"zone": "b"}}}, 422, "only h0 and t0"),  # torch is on h0 (zone a) and t0 (none)
    ({"constraints": {"labels": {"zone": "a"}}}, 201, ""),
    ({"constraints": {"exclude": ["h0"]}, "num_gpus": 2}, 201, ""),  # t0 has 4 GPUs
    ({"constraints": {"exclude": ["h0"]}, "num_gpus": 8}, 422, "needs 8 GPUs"),  # t0 alone has 4
    ({"constraints": {"gpu_type": "t4"}, "num_gpus": 4}, 201, ""),
    ({"num_gpus": 12}, 201, ""),  # h0 and t0: 8 + 4 GPUs that declare it
    ({"num_gpus": 16}, 422, "needs 16 GPUs"),  # the cluster has 24, the nodes that declare it 12
])
def test_a_venv_must_be_on_nodes_the_constraints_allow_with_room_for_the_job(api: Env, asked: dict[str, Any],
                                                                           status: int, words: str) -> None:
    _register(api.store)
    resp = api.post("/jobs", COMMAND | {"environment": {"venv": "torch"}} | asked)
    assert resp.status_code == status, resp.json
    if status == 422:
        errors = field_errors(resp)
        assert list(errors) == ["environment.venv"] and words in errors["environment.venv"][0], errors


def test_an_unmeetable_constraint_is_named_before_the_venv(api: Env) -> None:
    _register(api.store)
    resp = api.post("/jobs", COMMAND | {"environment": {"venv": "tf"}, "constraints": {"labels": {"zone": "c"}}})
    assert resp.status_code == 422 and list(field_errors(resp)) == ["constraints.labels"], resp.json


def test_with_no_node_recorded_the_controller_decides(api: Env) -> None:
    assert api.post("/jobs", COMMAND | {"environment": {"venv": "tf"}}).status_code == 201


class Declaring(StartingBackend):
    """Each node reports the venvs `venvs` says (the test may change one, as an agent restarted would)."""

    def __init__(self) -> None:
        super().__init__(["a", "b"], 2)
        self.venvs: dict[str, tuple[str, ...]] = {"a": ("torch",), "b": ()}

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(n.name, n.gpus, True, n.ray_node_id, n.address, None, None, (), self.venvs[n.name])
                for n in super().nodes()]


def test_the_controller_writes_what_each_node_declares_and_follows_a_restarted_agent(store: Store,
                                                                                      corral_home: Path) -> None:
    backend = Declaring()
    ctl = Controller(store, backend, model_cluster([ModelNode(n, 2, "dgx-a100") for n in "ab"]), ["a", "b"],
                     make_policy, default_policy="fifo", tick_s=0.1, preset="dgx-a100")
    ctl.recover()

    def stored() -> dict[str, list[str] | None]:
        with store.session() as s:
            return {n.name: n.venvs for n in q.nodes_with_gpus(s)}

    assert stored() == {"a": ["torch"], "b": None}
    backend.venvs["b"] = ("jax",)  # b's agent restarted with CORRAL_VENVS=jax=...
    backend.venvs["a"] = ()
    for _ in range(2):
        ctl._last_poll = ctl.health.last_nodes = 0.0
        ctl.step()
    assert stored() == {"a": None, "b": ["jax"]}


def test_migration_0027_adds_the_venvs_column_and_takes_it_away(db_url: str) -> None:
    import sqlalchemy as sa
    from alembic import command

    from scheduler.live.store.db import alembic_config, make_engine

    Store.open(db_url).close()
    engine = make_engine(db_url)

    def columns() -> set[str]:
        return {c["name"] for c in sa.inspect(engine).get_columns("nodes")}

    try:
        assert "venvs" in columns()
        command.downgrade(alembic_config(db_url), "0026")
        assert "venvs" not in columns() and "labels" in columns()
        command.upgrade(alembic_config(db_url), "head")
        assert "venvs" in columns()
    finally:
        engine.dispose()

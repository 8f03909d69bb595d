"""Issue 30, live part: a node says which rack it sits in. It advertises the rack as a marker resource
(`corral_rack_<rack>`, as its preset), `corral node start --rack` and `corral node-resources --rack` refuse a name that
is no rack name, the controller models nodes naming one rack in that rack (consecutive nodes of one preset, GPU count
and rack are one group) and follows a node that names another rack when it comes back, the store records each node's
rack (migration 0013) and `GET /cluster` and `corral cluster` show it. A gang under `topology` lands in one rack. The
real Ray path (the marker in Ray's node table, the whole service) is tests/test_live_racks.py; these need no Ray."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from alembic import command
from click.testing import CliRunner
from conftest import StartingBackend, served
from pydantic import ValidationError
from sqlalchemy import create_engine, text

from policies import make_policy
from scheduler.cli.commands import main
from scheduler.cli.serve import ServeConfig, build_controller, discover
from scheduler.core.errors import SpecError
from scheduler.core.model import NodeGroupSpec
from scheduler.core.workloads import catalog
from scheduler.live import whatif
from scheduler.live.cluster import ModelNode, build_live_cluster, model_cluster, node_rack, racks_of
from scheduler.live.controller import Controller
from scheduler.live.history import read_history
from scheduler.live.node.daemon import AgentError, AgentOptions, NodeAgent
from scheduler.live.nodes import register_nodes
from scheduler.live.ray_backend import advertised_rack
from scheduler.live.runs import NodeInfo, check_rack, node_resources
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.db import alembic_config
from web import create_app

GOOD = ["r1", "R-12", "row3.rack_7", "-", "_x", ".", "a" * 64]
BAD = ["", "a" * 65, "rack 1", "r/1", "../etc", "r;rm -rf", "rack\n1", "räck", "r:1", "$(id)"]


# ---- the name ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rack", GOOD)
def test_a_rack_name_is_what_the_cluster_model_accepts(rack: str) -> None:
    assert check_rack(rack) == rack
    assert NodeGroupSpec(count=1, preset="dgx-a100", rack=rack).rack == rack


@pytest.mark.parametrize("rack", BAD)
def test_anything_else_is_refused_naming_the_flag_and_the_name(rack: str) -> None:
    with pytest.raises(SpecError) as err:
        check_rack(rack)
    assert str(err.value).startswith(f"--rack {rack!r}: a rack name is 1 to 64 letters, digits")
    with pytest.raises(ValidationError):  # the model refuses it too: the two rules are one
        NodeGroupSpec(count=1, preset="dgx-a100", rack=rack)
    with pytest.raises(SpecError, match="--rack"):
        node_resources("n1", 2, rack=rack)


def test_a_node_that_advertises_no_rack_name_joins_in_no_named_rack() -> None:
    assert node_rack("r1") == ("r1", None)
    assert node_rack(None) == (None, None)
    rack, why = node_rack("rack 1")  # a marker made by hand (`ray start --resources`): the node still joins
    assert rack is None and why is not None and "'rack 1'" in why and "no named rack" in why


# ---- the marker ----------------------------------------------------------------------------------------------------


def test_the_marker_names_the_rack_beside_the_preset() -> None:
    res = node_resources("n-1.a", 1, "pcie-t4", "row3.r_7")
    assert res == {"corral_node_n-1.a": 1.0, "corral_gpu_n-1.a_0": 1.0, "corral_preset_pcie-t4": 1.0,
                   "corral_rack_row3.r_7": 1.0}
    assert advertised_rack(res) == "row3.r_7"
    assert advertised_rack(node_resources("n", 1, "pcie-t4")) is None
    assert advertised_rack({**res, "corral_rack_other": 1.0}) is None  # two markers: ambiguous, so none


def test_node_resources_command_takes_a_rack_and_checks_it() -> None:
    ok = CliRunner().invoke(main, ["node-resources", "--name", "t1", "--gpus", "2", "--rack", "r7"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output) == node_resources("t1", 2, rack="r7")
    bad = CliRunner().invoke(main, ["node-resources", "--name", "t1", "--gpus", "2", "--rack", "r/7"])
    assert bad.exit_code == 2 and "--rack" in bad.output and "'r/7'" in bad.output


def agent_options(tmp_path: Path, rack: str | None) -> AgentOptions:
    return AgentOptions(address="127.0.0.1:1", name="n1", gpus=2, rack=rack, node_dir=tmp_path / "n1", dry_run=True,
                        mps_control="none")


def test_the_node_agent_advertises_its_rack(tmp_path: Path) -> None:
    lines: list[str] = []
    NodeAgent(agent_options(tmp_path, "r9"), out=lines.append).run()
    line = next(x for x in lines if x.strip().startswith("resources:"))
    assert json.loads(line.split(":", 1)[1]) == node_resources("n1", 2, rack="r9")
    assert lines[0] == "corral node n1: 2 virtual GPU(s), rack r9"


def test_the_node_agent_refuses_a_bad_rack_before_it_writes_anything(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match=r"--rack '\.\./x': a rack name is"):
        NodeAgent(agent_options(tmp_path, "../x")).prepare()
    assert not (tmp_path / "n1").exists()
    result = CliRunner().invoke(main, ["node", "start", "--address", "127.0.0.1:1", "--name", "n1", "--gpus", "2",
                                       "--state-dir", str(tmp_path / "n1"), "--rack", "a b", "--dry-run"])
    assert result.exit_code == 1 and "--rack 'a b'" in result.output


# ---- the model -----------------------------------------------------------------------------------------------------


def test_nodes_naming_one_rack_share_it_and_the_others_fill_racks_in_order() -> None:
    """Consecutive nodes of one preset, GPU count and rack are one group; r1's nodes share a rack though r2's node
    sits between them; the nodes naming none fill a rack of their own (16 nodes a rack, as before)."""
    nodes = [ModelNode("a", 2, "dgx-a100", "r1"), ModelNode("b", 2, "dgx-a100", "r1"),
             ModelNode("c", 2, "dgx-a100", "r2"), ModelNode("d", 2, "dgx-a100", "r1"),
             ModelNode("e", 2, "dgx-a100"), ModelNode("f", 2, "dgx-a100")]
    cluster = model_cluster(nodes)
    assert [(g.count, g.rack) for g in cluster.spec.groups] == [(2, "r1"), (1, "r2"), (1, "r1"), (2, None)]
    assert [int(r) for r in cluster.node_rack] == [0, 0, 1, 0, 2, 2]
    assert racks_of(cluster) == ["r1", "r1", "r2", "r1", None, None]
    # Racks number no GPU: the GPUs are where they were without racks (allocations record them so).
    plain = build_live_cluster("dgx-a100", [2] * 6)
    assert cluster.node_first_gpu.tolist() == plain.node_first_gpu.tolist()
    assert racks_of(plain) == [None] * 6 and plain.num_racks == 1
    with pytest.raises(ValueError, match="1 racks for 2 nodes"):
        build_live_cluster([("dgx-a100", 2)] * 2, racks=["r1"])


class Reported:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self._nodes = nodes

    def nodes(self) -> list[NodeInfo]:
        return self._nodes


def info(name: str, rack: str | None = None, alive: bool = True) -> NodeInfo:
    return NodeInfo(name, 2, alive, name, "", "dgx-a100", rack)


def test_serve_models_each_node_in_the_rack_it_names(caplog: pytest.LogCaptureFixture) -> None:
    """A node Ray has is in the rack it names now (a stored node that moved, too: racks number no GPU); a stored node
    Ray does not have stays in its recorded rack; a marker that is no rack name puts its node in none, saying so."""
    backend = Reported([info("new", "r2"), info("moved", "r3"), info("odd", "rack 1"), info("plain")])
    known = [ModelNode("moved", 2, "dgx-a100", "r1"), ModelNode("gone", 2, "dgx-a100", "r1")]
    nodes, cluster = discover(backend, ServeConfig(ray_address="127.0.0.1:1"), known)  # type: ignore[arg-type]
    assert [(n.name, n.rack) for n in nodes] == [("moved", "r3"), ("gone", "r1"), ("new", "r2"), ("odd", None),
                                                 ("plain", None)]
    assert racks_of(cluster) == ["r3", "r1", "r2", None, None]
    assert any("node odd: its rack 'rack 1'" in r.message and "no named rack" in r.message for r in caplog.records)


# ---- the store, the API and the CLI --------------------------------------------------------------------------------


def test_the_store_records_each_node_s_rack_and_the_api_and_cli_show_it(store: Store, corral_home: Path) -> None:
    nodes = [ModelNode("a", 2, "dgx-a100", "r1"), ModelNode("b", 2, "dgx-a100")]
    with store.session() as s:
        register_nodes(s, [info("a", "r1"), info("b")], model_cluster(nodes), ["a", "b"], ["dgx-a100"] * 2,
                       time.time())
        token = q.create_token(s, "alice")
    with store.session() as s:
        assert [(n.name, n.rack) for n in q.nodes_with_gpus(s)] == [("a", "r1"), ("b", None)]
    client = create_app(store).test_client()
    body = client.get("/api/v1/cluster", headers={"Authorization": f"Bearer {token}"}).get_json()
    assert [(n["name"], n["rack"]) for n in body["nodes"]] == [("a", "r1"), ("b", None)]
    # A node moved to another rack: the next registration writes it.
    with store.session() as s:
        register_nodes(s, [info("a", "r2"), info("b")], model_cluster([nodes[0]._replace(rack="r2"), nodes[1]]),
                       ["a", "b"], ["dgx-a100"] * 2, time.time())
        assert [n.rack for n in q.nodes_with_gpus(s)] == ["r2", None]


def test_corral_cluster_names_each_node_s_rack(corral_home: Path) -> None:
    store = Store.open()
    with store.session() as s:
        register_nodes(s, [info("a", "r1"), info("b")],
                       model_cluster([ModelNode("a", 2, "dgx-a100", "r1"), ModelNode("b", 2, "dgx-a100")]),
                       ["a", "b"], ["dgx-a100"] * 2, time.time())
        token = q.create_token(s, "alice")
    with served(create_app(store)) as url:
        env = {"CORRAL_URL": url, "CORRAL_TOKEN": token}
        result = CliRunner().invoke(main, ["cluster", "--gpus"], env=env)
        lines = CliRunner().invoke(main, ["cluster"], env=env)
    store.close()
    assert result.exit_code == 0, result.output
    assert "a (rack r1, dgx-a100, alive)" in result.output
    assert "b (dgx-a100, alive)" in result.output
    rows = {ln.split()[0]: ln.split() for ln in lines.output.splitlines() if ln.split()[:1] in (["a"], ["b"])}
    assert rows["a"][1:3] == ["r1", "dgx-a100"] and rows["b"][1:3] == ["-", "dgx-a100"]  # a line a node: its rack


def test_migration_0013_keeps_the_nodes_in_no_named_rack(db_url: str) -> None:
    engine = create_engine(db_url)
    cfg = alembic_config(db_url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0012")
        conn.execute(text("INSERT INTO nodes (name, \"index\", preset, alive, updated_at, drain_evict) "
                          "VALUES ('old', 0, 'pcie-t4', true, 1.0, false)"))
        command.upgrade(cfg, "0013")
        assert conn.execute(text("SELECT name, rack FROM nodes")).all() == [("old", None)]
        conn.execute(text("UPDATE nodes SET rack = 'r1'"))
        command.downgrade(cfg, "0012")
        assert conn.execute(text("SELECT name FROM nodes")).all() == [("old",)]
    engine.dispose()


# ---- the controller ------------------------------------------------------------------------------------------------


class Racked(StartingBackend):
    """Workers start at the next poll; each node reports the rack `racks` says (the test may move one), and
    `joined` nodes appear when the test says."""

    def __init__(self, racks: dict[str, str | None], gpus: int = 2) -> None:
        super().__init__(list(racks), gpus)
        self.racks = racks
        self.joined: list[NodeInfo] = []

    def nodes(self) -> list[NodeInfo]:
        return [*(NodeInfo(n.name, n.gpus, True, n.ray_node_id, n.address, None, self.racks[n.name])
                  for n in super().nodes()), *self.joined]


def controller(store: Store, racks: dict[str, str | None], policy: str = "topology") -> tuple[Controller, Racked]:
    backend = Racked(racks)
    nodes = [ModelNode(name, 2, "dgx-a100", rack) for name, rack in racks.items()]
    ctl = Controller(store, backend, model_cluster(nodes), list(racks), make_policy, default_policy=policy,
                     tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    return ctl, backend


def submit(store: Store, name: str, num_gpus: float, model: str = "ResNet-50-bs64") -> int:
    with store.session(write=True) as s:
        user = q.ensure_user(s, "ann")
        return q.submit(s, user, {"name": name, "kind": "emulated", "model": model, "num_gpus": num_gpus,
                                  "duration_s": 600.0})[0].id


def steps(ctl: Controller, n: int = 1) -> None:
    for _ in range(n):
        ctl._last_poll = ctl.health.last_nodes = 0.0  # read the node table at every pass
        ctl.step()


def placed_nodes(ctl: Controller, job_id: int) -> set[str]:
    return {ctl.node_names[int(ctl.cluster.gpu_node[g])] for g in ctl.running[job_id].placement.gpus}


@pytest.mark.parametrize(("racks", "want"), [
    ({"n0": "r1", "n1": "r2", "n2": "r1", "n3": "r2"}, {"n1", "n3"}),
    ({"n0": None, "n1": None, "n2": None, "n3": None}, {"n1", "n2"}),
], ids=["racks", "no-racks"])
def test_a_gang_goes_to_the_one_rack_that_holds_it(store: Store, corral_home: Path, racks: dict[str, str | None],
                                                   want: set[str]) -> None:
    """r1 (n0, n2) has 3 free GPUs once a 1-GPU job runs on n0, r2 (n1, n3) all 4: the 4-GPU gang goes to r2. Without
    racks the same cluster puts it on n1 and n2 (the emptiest nodes first), across both: the racks decided it."""
    ctl, _ = controller(store, racks)
    busy = submit(store, "busy", 1)
    steps(ctl, 2)
    assert placed_nodes(ctl, busy) == {"n0"}
    gang = submit(store, "gang", 4)
    steps(ctl, 2)
    assert placed_nodes(ctl, gang) == want


def test_a_node_joining_in_a_rack_is_modelled_and_stored_in_it(store: Store, corral_home: Path) -> None:
    ctl, backend = controller(store, {"n0": "r1", "n1": "r2"})
    backend.joined = [NodeInfo("n2", 2, True, "n2", "", None, "r1"), NodeInfo("n3", 2, True, "n3", "", None, "a b")]
    steps(ctl)
    assert ctl.node_names == ["n0", "n1", "n2", "n3"]
    assert racks_of(ctl.cluster) == ["r1", "r2", "r1", None]  # "a b" is no rack name: in none
    assert [int(r) for r in ctl.cluster.node_rack] == [0, 1, 0, 2]
    with store.session() as s:
        assert [n.rack for n in q.nodes_with_gpus(s)] == ["r1", "r2", "r1", None]


def test_a_node_that_names_another_rack_is_moved_there(store: Store, corral_home: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A server moved (or its agent restarted with another --rack): the model and the store follow, the runs keep
    their GPUs (a rack numbers none)."""
    caplog.set_level(logging.INFO)
    ctl, backend = controller(store, {"n0": "r1", "n1": "r1", "n2": "r2", "n3": "r2"})
    running = submit(store, "running", 2)
    steps(ctl, 2)
    before = ctl.running[running].placement
    backend.racks["n1"] = "r2"
    steps(ctl)
    assert racks_of(ctl.cluster) == ["r1", "r2", "r2", "r2"]
    assert ctl.running[running].placement == before
    with store.session() as s:
        assert [n.rack for n in q.nodes_with_gpus(s)] == ["r1", "r2", "r2", "r2"]
    assert any("node(s) moved: n1 to r2" in r.message for r in caplog.records)
    backend.racks["n1"] = None  # restarted naming none: in no named rack
    steps(ctl)
    assert racks_of(ctl.cluster) == ["r1", None, "r2", "r2"]


def test_a_standby_taking_the_store_s_numbering_keeps_the_racks_its_nodes_name(store: Store,
                                                                                corral_home: Path) -> None:
    """The store's numbering brings a node only the store knows in its recorded rack; a node this replica has keeps
    the rack it names now."""
    racks = {"n0": "r1", "n1": "r2"}
    with store.session() as s:
        stored = [ModelNode("n0", 2, "dgx-a100", "old"), ModelNode("n1", 2, "dgx-a100", "r2"),
                  ModelNode("n2", 2, "dgx-a100", "r3")]
        register_nodes(s, [info(n.name, n.rack) for n in stored], model_cluster(stored), ["n0", "n1", "n2"],
                       ["dgx-a100"] * 3, time.time())
    backend = Racked(racks)
    ctl = Controller(store, backend, model_cluster([ModelNode(n, 2, "dgx-a100", r) for n, r in racks.items()]),
                     ["n0", "n1"], make_policy, default_policy="fifo", preset="dgx-a100", nodes_from_store=True)
    ctl.recover()
    assert ctl.node_names == ["n0", "n1", "n2"] and racks_of(ctl.cluster) == ["r1", "r2", "r3"]


def test_serve_builds_its_controller_with_the_racks_and_what_if_and_history_model_them(store: Store,
                                                                                      corral_home: Path) -> None:
    backend = Reported([info("a", "r1"), info("b", "r2"), info("c", "r1")])
    ctl = build_controller(store, backend, ServeConfig(ray_address="127.0.0.1:1", policy="fifo"))  # type: ignore[arg-type]
    assert racks_of(ctl.cluster) == ["r1", "r2", "r1"]
    ctl._register_nodes(time.time())  # as its start does
    world = whatif._world(whatif.snapshot(store), whatif.WhatIfRequest.parse({}), catalog())
    assert [int(r) for r in world.cluster.node_rack] == [0, 1, 0]
    history = read_history(store)
    assert history.cluster is not None and racks_of(history.cluster) == ["r1", "r2", "r1"]

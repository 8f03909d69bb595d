"""Issue 30, live part: `corral serve --fabric NAME` puts the live cluster model on a fabric preset. The store records
it (migration 0014), so the controller (at every start, and as nodes join), what-if, the network figure, the history
and `GET /cluster` rebuild one model; a restart without the flag keeps it, `--fabric none` clears it, and an unknown
name is refused naming the flag and the choices. The real service on Ray takes the flag in tests/test_live_racks.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from alembic import command
from click.testing import CliRunner
from conftest import StartingBackend
from sqlalchemy import create_engine, inspect, text
from test_node_racks import Reported, steps
from test_node_racks import submit as submit_job

from policies import make_policy
from scheduler.cli.commands import main
from scheduler.cli.serve import ServeConfig, build_controller
from scheduler.core.errors import SpecError
from scheduler.core.fabric import FABRICS
from scheduler.core.model import LinkKind
from scheduler.core.workloads import catalog
from scheduler.live import whatif
from scheduler.live.cluster import ModelNode, build_live_cluster, check_fabric, model_cluster, modelled_fabric
from scheduler.live.controller import Controller
from scheduler.live.figures import network_load
from scheduler.live.history import read_history
from scheduler.live.nodes import register_nodes
from scheduler.live.runs import NodeInfo
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.db import alembic_config
from scheduler.live.store.models import Decision, Job
from web import create_app

HGX = "hgx-h100"


# ---- the name and the model ----------------------------------------------------------------------------------------


def test_the_flag_takes_a_fabric_preset_or_none_and_refuses_anything_else() -> None:
    assert check_fabric("fat-tree-3:1") == "fat-tree-3:1"
    assert check_fabric("none") is None and check_fabric(None) is None
    for bad in ["torus", "../fat-tree", "fat-tree-3:1 ", ""]:
        with pytest.raises(SpecError) as err:
            check_fabric(bad)
        assert str(err.value) == f"--fabric: unknown fabric {bad!r}; choose one of {', '.join(FABRICS)}"
    # A store written by a newer server, recording a preset this version lacks: modelled on none, said so.
    why = f"the store records --fabric: unknown fabric 'torus'; choose one of {', '.join(FABRICS)}; the cluster is " \
          "modelled on no fabric"
    assert modelled_fabric("torus") == (None, why)


def test_nodes_keep_the_racks_they_name_on_a_fabric_and_the_others_fill_its_leaf_groups() -> None:
    """Two HGX nodes naming r1, one naming r2, three naming none: on a 3:1 fat-tree (a leaf of 64 ports takes 6
    eight-NIC servers) the named racks stay as they are, the unnamed fill one leaf group; every rack gets its own
    uplinks. Without a fabric the same nodes have one aggregate uplink a rack and no fabric links."""
    shape = [(HGX, 8)] * 6
    racks = ["r1", "r1", "r2", None, None, None]
    cluster = build_live_cluster(shape, racks=racks, fabric="fat-tree-3:1")
    assert cluster.fabric is not None and cluster.fabric.oversubscription == (3.0,)
    assert [int(r) for r in cluster.node_rack] == [0, 0, 1, 2, 2, 2]
    for rack, nodes in [(0, 2), (1, 1), (2, 3)]:
        links = cluster.rack_links(rack)
        # 8 NIC ports a server, a third as many uplinks, as many downlinks
        assert len(links) == 2 * round(8 * nodes / 3)
        assert {cluster.link_kind[int(k)] for k in links} == {LinkKind.UPLINK, LinkKind.DOWNLINK}
    plain = build_live_cluster(shape, racks=racks)
    assert plain.fabric is None and len(plain.fabric_links) == 0
    assert [len(plain.rack_links(r)) for r in range(3)] == [1, 1, 1]
    rails = build_live_cluster(shape, racks=racks, fabric="rail-optimised")
    assert rails.fabric is not None and rails.fabric.tiers == ("rail",)
    assert len({int(g) for g in rails.fabric.nic_group[0]}) == 3 * 8  # a leaf per rail per rack
    with pytest.raises(SpecError, match="--fabric: unknown fabric 'torus'"):
        build_live_cluster(shape, racks=racks, fabric="torus")


# ---- the store -----------------------------------------------------------------------------------------------------


def test_the_store_records_the_fabric_and_a_new_store_has_none(store: Store) -> None:
    with store.session() as s:
        assert q.fabric(s) is None
        q.set_fabric(s, "rail-optimised")
    with store.session() as s:
        assert q.fabric(s) == "rail-optimised"
        q.set_fabric(s, None)
    with store.session() as s:
        assert q.fabric(s) is None


def test_migration_0014_adds_the_one_row_on_no_fabric(db_url: str) -> None:
    engine = create_engine(db_url)
    cfg = alembic_config(db_url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0013")
        conn.execute(text("INSERT INTO nodes (name, \"index\", preset, alive, updated_at, drain_evict) "
                          "VALUES ('old', 0, 'hgx-h100', true, 1.0, false)"))
        command.upgrade(cfg, "0014")
        assert conn.execute(text("SELECT id, name FROM cluster_fabric")).all() == [(1, None)]
        assert conn.execute(text("SELECT name FROM nodes")).all() == [("old",)]
        command.downgrade(cfg, "0013")
        assert conn.execute(text("SELECT name FROM nodes")).all() == [("old",)]
    engine.dispose()
    # The inspector reads this test's own schema (its search_path): other workers' schemas in the same
    # PostgreSQL database hold their own cluster_fabric tables at the same time.
    check = create_engine(db_url)
    tables = inspect(check).get_table_names()
    check.dispose()
    assert "nodes" in tables and "cluster_fabric" not in tables


# ---- the controller ------------------------------------------------------------------------------------------------


class Racked(StartingBackend):
    """HGX nodes of 8 GPUs, each reporting the rack `racks` names; `joined` nodes appear when the test says."""

    def __init__(self, racks: dict[str, str | None]) -> None:
        super().__init__(list(racks), 8)
        self.racks = racks
        self.joined: list[NodeInfo] = []

    def nodes(self) -> list[NodeInfo]:
        return [*(NodeInfo(n.name, n.gpus, True, n.ray_node_id, n.address, HGX, self.racks[n.name])
                  for n in super().nodes()), *self.joined]


RACKS: dict[str, str | None] = {"n0": "r1", "n1": "r1", "n2": "r2", "n3": "r2"}


def controller(store: Store, fabric: str | None) -> tuple[Controller, Racked]:
    backend = Racked(dict(RACKS))
    nodes = [ModelNode(name, 8, HGX, rack) for name, rack in RACKS.items()]
    ctl = Controller(store, backend, model_cluster(nodes, fabric), list(RACKS), make_policy,
                     default_policy="topology", tick_s=0.1, preset=HGX, node_presets=[HGX] * 4, fabric=fabric)
    ctl.recover()
    return ctl, backend


def submit(store: Store, name: str, num_gpus: float) -> int:
    return submit_job(store, name, num_gpus, model="GPT-1.3B")  # an LLM gang, as fabrics are for


def reason(store: Store, job_id: int) -> str:
    with store.session() as s:
        rows = s.query(Decision).filter(Decision.job_id == job_id, Decision.action == "place").all()
        assert len(rows) == 1
        return rows[0].reason


@pytest.mark.parametrize("fabric", ["fat-tree-3:1", None])
def test_a_gang_the_racks_cannot_hold_is_explained_by_the_tier_it_crosses(store: Store, corral_home: Path,
                                                                         fabric: str | None) -> None:
    """Racks of 16 GPUs: a 16-GPU gang goes in one rack, saying nothing of the fabric; a 24-GPU gang spans both, and
    on the 3:1 fat-tree its decision names the tier and what it costs; without the fabric the model has no spine to
    name. A node joining later keeps the model on the fabric."""
    ctl, backend = controller(store, fabric)
    small = submit(store, "small", 16)
    steps(ctl, 2)
    assert {int(ctl.cluster.node_rack[ctl.cluster.gpu_node[g]]) for g in ctl.running[small].placement.gpus} in (
        {0}, {1})
    assert "spine" not in reason(store, small)
    with store.session(write=True) as s:
        q.cancel(s, s.get(Job, small))  # type: ignore[arg-type]
    steps(ctl, 3)
    big = submit(store, "big", 24)
    steps(ctl, 2)
    assert len({int(ctl.cluster.node_rack[ctl.cluster.gpu_node[g]]) for g in ctl.running[big].placement.gpus}) == 2
    words = reason(store, big)
    if fabric is None:
        assert "spine" not in words
    else:
        assert words.startswith("spans 2 racks: ") and words.endswith("x from the spine at 3:1"), words
        assert float(words.split(": ")[1].split("x")[0]) >= 1.0
    backend.joined = [NodeInfo("n4", 8, True, "n4", "", HGX, "r3")]
    steps(ctl)
    assert ctl.node_names[-1] == "n4"
    assert (ctl.cluster.fabric is None) == (fabric is None)
    assert ctl.cluster.num_racks == 3


def test_serve_what_if_the_figures_the_history_and_the_api_model_the_store_s_fabric(store: Store,
                                                                                  corral_home: Path) -> None:
    """The store records the rail fabric (as `corral serve --fabric rail-optimised` writes it): the controller
    `corral serve` builds sits on it, and what-if, the network figure, the history and `GET /cluster` rebuild the
    same model from the store."""
    with store.session() as s:
        q.set_fabric(s, "rail-optimised")
        token = q.create_token(s, "alice")
    backend = Reported([NodeInfo(n, 8, True, n, "", HGX, "r1" if n < "c" else "r2") for n in "abc"])
    ctl = build_controller(store, backend, ServeConfig(ray_address="127.0.0.1:1", policy="fifo",  # type: ignore[arg-type]
                                                       preset=HGX))
    assert ctl.fabric == "rail-optimised"
    assert ctl.cluster.fabric is not None and ctl.cluster.fabric.tiers == ("rail",)
    ctl._register_nodes(time.time())  # as its start does
    snap = whatif.snapshot(store)
    assert snap.fabric == "rail-optimised"
    world = whatif._world(snap, whatif.WhatIfRequest.parse({"extra_nodes": 1}), catalog())
    assert world.cluster.fabric is not None and world.cluster.num_nodes == 4
    assert len(world.cluster.fabric_links) > len(ctl.cluster.fabric_links)  # the extra node's rack leaves have more
    assert "on the rail-optimised fabric, as the controller models the cluster" in world.notes
    history = read_history(store)
    assert history.cluster is not None and history.cluster.fabric is not None
    net = network_load(store)
    assert net["fabric"] == "rail-optimised" and [u["name"] for u in net["uplinks"]] == ["r1", "r2"]
    assert all(u["load"] == 0.0 and u["jobs"] == [] for u in net["uplinks"])  # nothing runs
    client = create_app(store).test_client()
    auth = {"Authorization": f"Bearer {token}"}
    assert client.get("/api/v1/cluster", headers=auth).get_json()["fabric"] == "rail-optimised"
    assert client.get("/api/v1/stats/network", headers=auth).get_json()["fabric"] == "rail-optimised"
    with store.session() as s:
        q.set_fabric(s, None)
    assert build_controller(store, backend, ServeConfig(ray_address="127.0.0.1:1", policy="fifo",  # type: ignore[arg-type]
                                                        preset=HGX)).cluster.fabric is None


def test_the_network_figure_puts_a_rack_crossing_gang_on_its_racks_leaf_ports(store: Store,
                                                                                corral_home: Path) -> None:
    """A running 24-GPU gang over both racks (16 GPUs each) on the 3:1 fat-tree: both racks' busiest leaf port
    carries it, with a load above 0."""
    with store.session() as s:
        q.set_fabric(s, "fat-tree-3:1")
    ctl, _ = controller(store, "fat-tree-3:1")
    ctl._register_nodes(time.time())
    big = submit(store, "big", 24)
    steps(ctl, 2)
    assert big in ctl.running
    net = network_load(store)
    assert net["fabric"] == "fat-tree-3:1"
    loads = {u["name"]: u for u in net["uplinks"]}
    assert set(loads) == {"r1", "r2"}
    for rack in loads.values():
        assert rack["jobs"] == [big] and rack["load"] > 0.0


# ---- the CLI -------------------------------------------------------------------------------------------------------


def test_corral_serve_refuses_an_unknown_fabric_before_anything_starts(corral_home: Path) -> None:
    result = CliRunner().invoke(main, ["serve", "--fabric", "torus", "--port", "0"])
    assert result.exit_code == 2, result.output
    assert f"--fabric: unknown fabric 'torus'; choose one of {', '.join(FABRICS)}" in result.output
    assert not (corral_home / "corral.db").exists()


def test_corral_serve_help_names_every_fabric_preset() -> None:
    result = CliRunner().invoke(main, ["serve", "--help"], terminal_width=400)
    assert result.exit_code == 0
    for name in FABRICS:
        assert name in result.output


def test_corral_cluster_says_which_fabric(store: Store, corral_home: Path) -> None:
    from conftest import served

    with store.session() as s:
        register_nodes(s, [NodeInfo("a", 8, True, "a", "", HGX, "r1")], model_cluster([ModelNode("a", 8, HGX, "r1")]),
                       ["a"], [HGX], time.time())
        q.set_fabric(s, "fat-tree-3:1")
        token = q.create_token(s, "alice")
    with served(create_app(store)) as url:
        result = CliRunner().invoke(main, ["cluster"], env={"CORRAL_URL": url, "CORRAL_TOKEN": token},
                                    terminal_width=400)
    assert result.exit_code == 0, result.output
    assert "fabric: fat-tree-3:1" in result.output

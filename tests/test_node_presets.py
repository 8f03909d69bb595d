"""Issue 14: a node's preset travels with the node. Each Ray node advertises its server model as a marker resource
(`corral_preset_<preset>`), the controller models each node as its own preset (`corral serve --preset` only for a node
that advertises none), the store records each node's, and a restarted controller, the history and what-if model the
same mixed cluster from the store. The real Ray paths (the marker in Ray's node table, a node joining mid-run) are in
tests/test_controller.py and tests/test_node_agent.py; these need no Ray."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import StartingBackend
from sqlalchemy import select, update

from policies import make_policy
from scheduler.cli.commands import main
from scheduler.cli.serve import ServeConfig, discover
from scheduler.core.model import GPU_TYPES, PRESETS, ClusterSpec, NodeGroupSpec, build_cluster
from scheduler.core.workloads import catalog
from scheduler.live import whatif
from scheduler.live.cluster import ModelNode, build_live_cluster, node_preset, node_type, presets_text
from scheduler.live.controller import Controller
from scheduler.live.history import read_history
from scheduler.live.nodes import register_nodes
from scheduler.live.ray_backend import advertised_preset
from scheduler.live.runs import NodeInfo, node_resources
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Gpu, Node

A100, T4 = GPU_TYPES["A100-80GB"], GPU_TYPES["T4"]


def gpu_types(cluster: Any) -> list[str]:
    return [cluster.gpu_types[int(t)].name for t in cluster.gpu_type]


# ---- the model -----------------------------------------------------------------------------------------------------


def test_one_preset_builds_exactly_the_cluster_it_always_did() -> None:
    """The per-node builder, given nodes of one preset, is the old `build_live_cluster(preset, gpus_by_node)`: the
    same groups (consecutive nodes with as many GPUs), the same name, the same arrays."""
    old = build_cluster(ClusterSpec(name="live-dgx-a100", groups=[  # (the live builder names each node, as the
        # model's default does: node<index>, which constraints select by)
        NodeGroupSpec(count=2, node=node_type("dgx-a100", 8), names=["node0", "node1"]),
        NodeGroupSpec(count=1, node=node_type("dgx-a100", 4), names=["node2"]),
        NodeGroupSpec(count=1, node=node_type("dgx-a100", 8), names=["node3"])]))
    for new in (build_live_cluster([("dgx-a100", 8), ("dgx-a100", 8), ("dgx-a100", 4), ("dgx-a100", 8)]),
                build_live_cluster("dgx-a100", [8, 8, 4, 8])):
        assert new.name == old.name == "live-dgx-a100"
        assert new.spec == old.spec
        for key, value in vars(old).items():
            if isinstance(value, np.ndarray):
                assert np.array_equal(getattr(new, key), value), key
        assert new.link_kind == old.link_kind and new.reference_speed == old.reference_speed


def test_mixed_presets_model_each_node_as_its_own() -> None:
    cluster = build_live_cluster([("dgx-a100", 8), ("pcie-t4", 4), ("pcie-t4", 4), ("dgx-a100", 2)])
    assert cluster.name == "live-dgx-a100+pcie-t4"
    assert [int(n) for n in cluster.node_num_gpus] == [8, 4, 4, 2]
    assert gpu_types(cluster) == ["A100-80GB"] * 8 + ["T4"] * 8 + ["A100-80GB"] * 2  # in the nodes' order
    assert list(cluster.gpu_mem[8:16]) == [T4.memory_gb] * 8 and cluster.gpu_mem[0] == A100.memory_gb
    assert [bool(x) for x in cluster.node_nvlink] == [True, False, False, True]
    assert len(cluster.spec.groups) == 3  # the two T4 nodes are one group; the last A100 node is not the first's


def test_a_node_is_its_own_preset_unless_it_cannot_be_modelled() -> None:
    assert node_preset("pcie-t4", "dgx-a100", 4) == ("pcie-t4", None)
    assert node_preset(None, "dgx-a100", 4) == ("dgx-a100", None)  # advertises none: serve's --preset
    preset, why = node_preset("h900-future", "dgx-a100", 8)  # a newer agent's preset: the node still joins
    assert preset == "dgx-a100" and why is not None and "h900-future" in why and "modelled as dgx-a100" in why
    preset, why = node_preset("pcie-v100", "dgx-a100", 3)  # two PCIe switches cannot split 3 GPUs
    assert preset == "dgx-a100" and why is not None and "pcie-v100" in why


def test_presets_text() -> None:
    assert presets_text(["dgx-a100"] * 3) == "dgx-a100"
    assert presets_text(["pcie-t4", "dgx-a100", "pcie-t4"]) == "pcie-t4 x 2 + dgx-a100 x 1"
    assert presets_text([]) == ""


# ---- the marker resource -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_marker_names_the_preset_and_nothing_else_reads_it(preset: str) -> None:
    res = node_resources("n-1.a", 2, preset)
    assert res == {"corral_node_n-1.a": 1.0, "corral_gpu_n-1.a_0": 1.0, "corral_gpu_n-1.a_1": 1.0,
                   f"corral_preset_{preset}": 1.0}
    assert advertised_preset(res) == preset
    assert node_resources("n", 2) == {"corral_node_n": 1.0, "corral_gpu_n_0": 1.0, "corral_gpu_n_1": 1.0}
    assert advertised_preset(node_resources("n", 2)) is None
    # Two markers (a node started by hand) are ambiguous: modelled as serve's --preset, not as either.
    assert advertised_preset({**res, "corral_preset_other": 1.0}) is None


def test_node_resources_command_takes_a_preset_and_checks_it() -> None:
    ok = CliRunner().invoke(main, ["node-resources", "--name", "t1", "--gpus", "4", "--preset", "pcie-t4"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output) == node_resources("t1", 4, "pcie-t4")
    bad = CliRunner().invoke(main, ["node-resources", "--name", "t1", "--gpus", "3", "--preset", "pcie-v100"])
    assert bad.exit_code == 2 and "--preset" in bad.output and "pcie-v100" in bad.output
    unknown = CliRunner().invoke(main, ["node-resources", "--name", "t1", "--gpus", "3", "--preset", "nope"])
    assert unknown.exit_code == 2 and "dgx-a100" in unknown.output  # says what the choices are


# ---- discovery: what `corral serve` starts with -------------------------------------------------------------------


class Reported:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self._nodes = nodes

    def nodes(self) -> list[NodeInfo]:
        return self._nodes


def test_serve_models_each_node_as_it_advertises_and_the_store_s_nodes_as_recorded(
        caplog: pytest.LogCaptureFixture) -> None:
    cfg = ServeConfig(ray_address="127.0.0.1:1", preset="dgx-a100")
    backend = Reported([NodeInfo("t", 4, True, "rt", "", "pcie-t4"), NodeInfo("plain", 8, True, "rp", ""),
                        NodeInfo("future", 8, True, "rf", "", "h900-future"),
                        NodeInfo("old", 4, True, "ro", "", "pcie-t4")])
    nodes, cluster = discover(backend, cfg, known=[ModelNode("old", 4, "dgx-a100")])  # type: ignore[arg-type]
    assert nodes == [ModelNode("old", 4, "dgx-a100"), ModelNode("future", 8, "dgx-a100"),
                     ModelNode("plain", 8, "dgx-a100"), ModelNode("t", 4, "pcie-t4")]
    assert gpu_types(cluster) == ["A100-80GB"] * 20 + ["T4"] * 4
    # The store's record wins for a node it knows (its GPU rows and placements were modelled so), and says so.
    assert any("old advertises preset pcie-t4, the store records dgx-a100" in r.message for r in caplog.records)
    assert any("future" in r.message and "h900-future" in r.message for r in caplog.records)


# ---- the store -----------------------------------------------------------------------------------------------------


def stored_nodes(store: Store) -> list[tuple[str, str, list[tuple[str, float]]]]:
    with store.session() as s:
        return [(n.name, n.preset, [(g.gpu_type, g.mem_gb) for g in n.gpus]) for n in q.nodes_with_gpus(s)]


def test_the_store_records_each_node_s_own_preset_and_gpus(store: Store) -> None:
    shape = [ModelNode("a", 2, "dgx-a100"), ModelNode("t", 2, "pcie-t4")]
    cluster = build_live_cluster([(n.preset, n.gpus) for n in shape])
    reported = [NodeInfo(n.name, n.gpus, True, n.name, "") for n in shape]
    with store.session() as s:
        register_nodes(s, reported, cluster, ["a", "t"], ["dgx-a100", "pcie-t4"], time.time())
    assert stored_nodes(store) == [("a", "dgx-a100", [("A100-80GB", A100.memory_gb)] * 2),
                                   ("t", "pcie-t4", [("T4", T4.memory_gb)] * 2)]
    # Modelled as another preset later (a local `corral serve --preset` restarted differently): its GPU rows follow.
    with store.session() as s:
        register_nodes(s, reported, build_live_cluster("dgx-a100", [2, 2]), ["a", "t"], ["dgx-a100"] * 2, time.time())
    assert stored_nodes(store)[1] == ("t", "dgx-a100", [("A100-80GB", A100.memory_gb)] * 2)
    with pytest.raises(ValueError, match="1 presets for 2 nodes"), store.session() as s:
        register_nodes(s, reported, cluster, ["a", "t"], ["dgx-a100"], time.time())


# ---- the controller ------------------------------------------------------------------------------------------------


class Joining(StartingBackend):
    """Workers start at the next poll; `joined` nodes appear in the node table when the test says, `down` ones are
    reported dead, and `presets` says what a first node advertises."""

    def __init__(self, names: list[str], gpus: int) -> None:
        super().__init__(names, gpus)
        self.joined: list[NodeInfo] = []
        self.down: set[str] = set()
        self.presets: dict[str, str] = {}

    def nodes(self) -> list[NodeInfo]:
        first = [NodeInfo(n.name, n.gpus, n.name not in self.down, n.ray_node_id, n.address, self.presets.get(n.name))
                 for n in super().nodes()]
        return [*first, *self.joined]


def submit(store: Store, name: str, num_gpus: float, duration_s: float = 600.0) -> int:
    with store.session(write=True) as s:
        user = q.ensure_user(s, "ann")
        return q.submit(s, user, {"name": name, "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": num_gpus,
                                  "duration_s": duration_s})[0].id


def steps(ctl: Controller, n: int = 1) -> None:
    for _ in range(n):
        ctl._last_poll = ctl.health.last_nodes = 0.0  # read the node table at every pass
        ctl.step()


def test_a_node_joining_with_another_preset_is_modelled_as_its_own(store: Store, corral_home: Path) -> None:
    """Two dgx-a100 nodes run full; a pcie-t4 node and a node advertising no preset join mid-run. Each is appended
    (in name order, after the GPUs already numbered), modelled as what it is, recorded so in the store, and a job
    placed on the T4 node gets a T4's memory for its MPS limit; the runs already going keep their GPUs."""
    backend = Joining(["n0", "n1"], 2)
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [2, 2]), ["n0", "n1"], make_policy,
                     default_policy="fifo", tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    full = [submit(store, f"full{i}", 2) for i in range(2)]
    steps(ctl, 2)
    assert set(ctl.running) == set(full)
    before = {j: ctl.running[j].placement for j in full}
    backend.joined = [NodeInfo("t1", 2, True, "rt", "", "pcie-t4"), NodeInfo("p1", 2, True, "rp", "")]
    steps(ctl, 1)
    assert ctl.node_names == ["n0", "n1", "p1", "t1"]
    assert ctl.node_presets == ["dgx-a100", "dgx-a100", "dgx-a100", "pcie-t4"]
    assert ctl.cluster.name == "live-dgx-a100+pcie-t4"
    assert gpu_types(ctl.cluster) == ["A100-80GB"] * 6 + ["T4"] * 2
    assert {j: ctl.running[j].placement for j in full} == before
    assert stored_nodes(store)[2:] == [("p1", "dgx-a100", [("A100-80GB", A100.memory_gb)] * 2),
                                       ("t1", "pcie-t4", [("T4", T4.memory_gb)] * 2)]
    # p1 comes first in the numbering: a 2-GPU job fills it, and the next job, a share, can only go to t1.
    on_p1 = submit(store, "on-p1", 2)
    on_t4 = submit(store, "t4-share", 0.5)
    steps(ctl, 2)
    assert ctl.running[on_p1].placement.gpus == (4, 5)
    assert ctl.running[on_t4].placement.gpus == (6,)
    (rank,) = backend.launches[on_t4].ranks
    assert (rank.node, rank.local_gpus, rank.gpu_mem_gb) == ("t1", (0,), T4.memory_gb)


def test_a_restarted_or_standby_controller_takes_the_store_s_presets(store: Store, corral_home: Path) -> None:
    """Another replica took in t1 (pcie-t4) while this one stood by with only n0 and n1: taking the store's numbering
    takes each node's recorded preset with it, whatever this replica's --preset."""
    order, presets = ["n0", "n1", "t1"], ["dgx-a100", "dgx-a100", "pcie-t4"]
    backend = Joining(["n0", "n1"], 2)
    backend.joined = [NodeInfo("t1", 2, True, "rt", "", "pcie-t4")]
    with store.session() as s:
        register_nodes(s, backend.nodes(), build_live_cluster(list(zip(presets, [2, 2, 2], strict=True))), order,
                       presets, time.time())
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [2, 2]), ["n0", "n1"], make_policy,
                     default_policy="fifo", preset="dgx-a100", nodes_from_store=True)
    ctl.recover()
    assert ctl.node_names == order and ctl.node_presets == presets
    assert gpu_types(ctl.cluster) == ["A100-80GB"] * 4 + ["T4"] * 2
    assert [p for _, p, _ in stored_nodes(store)] == presets  # and it writes them back unchanged


def test_a_node_that_comes_back_as_another_preset_stays_as_recorded(store: Store, corral_home: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Its GPUs keep their numbering and type (allocations and GPU rows name them); the log says what to do."""
    backend = Joining(["n0", "n1"], 2)
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [2, 2]), ["n0", "n1"], make_policy,
                     default_policy="fifo", tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    backend.down.add("n1")
    steps(ctl)
    assert ctl.health.down == {1}
    backend.down.clear()
    backend.presets["n1"] = "pcie-t4"
    steps(ctl)
    assert ctl.health.down == set() and ctl.node_presets == ["dgx-a100", "dgx-a100"]
    assert gpu_types(ctl.cluster) == ["A100-80GB"] * 4
    assert any("node n1 came back as preset pcie-t4; it stays modelled as dgx-a100" in r.message
               for r in caplog.records)


def test_serve_builds_its_controller_with_each_node_s_preset(store: Store, corral_home: Path) -> None:
    """`corral serve --ray-address` restarted: the nodes the store knows with their recorded presets, the node
    that joined meanwhile with the one it advertises, and the banner names them."""
    from scheduler.cli.serve import banner, build_controller

    with store.session() as s:
        register_nodes(s, [NodeInfo("a", 2, True, "a", "")], build_live_cluster("pcie-t4", [2]), ["a"], ["pcie-t4"],
                       time.time())
    backend = Reported([NodeInfo("a", 2, True, "a", ""), NodeInfo("b", 8, True, "b", "", "dgx-a100")])
    cfg = ServeConfig(ray_address="127.0.0.1:1", preset="pcie-v100", policy="fifo")
    ctl = build_controller(store, backend, cfg)  # type: ignore[arg-type]
    assert (ctl.node_names, ctl.node_presets, ctl.preset) == (["a", "b"], ["pcie-t4", "dgx-a100"], "pcie-v100")
    assert gpu_types(ctl.cluster) == ["T4"] * 2 + ["A100-80GB"] * 8
    text = banner(ctl.cluster, cfg, "fifo", "http://h:1", "sqlite:///x.db", "127.0.0.1:1", None, ctl.node_presets)
    assert "Corral is serving 2 nodes with 2+8 GPUs (10 GPUs) (pcie-t4 x 1 + dgx-a100 x 1)" in text


def test_the_controller_refuses_presets_that_do_not_match_its_nodes(store: Store) -> None:
    with pytest.raises(ValueError, match="1 node presets for a cluster of 2 nodes"):
        Controller(store, Joining(["n0", "n1"], 2), build_live_cluster("dgx-a100", [2, 2]), ["n0", "n1"],
                   make_policy, preset="dgx-a100", node_presets=["dgx-a100"])


# ---- history and what-if read the same mixed cluster from the store ----------------------------------------------


@pytest.fixture
def mixed_store(store: Store) -> Store:
    presets, gpus = ["dgx-a100", "pcie-t4", "pcie-t4"], [8, 4, 4]
    cluster = build_live_cluster(list(zip(presets, gpus, strict=True)))
    names = ["a0", "t0", "t1"]
    with store.session() as s:
        register_nodes(s, [NodeInfo(n, g, True, n, "") for n, g in zip(names, gpus, strict=True)], cluster, names,
                       presets, time.time())
    return store


def test_history_models_each_stored_node_as_its_preset(mixed_store: Store) -> None:
    h = read_history(mixed_store)
    assert h.cluster is not None and gpu_types(h.cluster) == ["A100-80GB"] * 8 + ["T4"] * 8
    assert h.presets_by_node == ["dgx-a100", "pcie-t4", "pcie-t4"] and h.gpus_by_node == [8, 4, 4]
    assert h.preset == "pcie-t4"  # the most common: what a one-preset model (training scenarios) uses
    assert h.cluster_text == "dgx-a100 x 1 + pcie-t4 x 2 nodes"
    assert h.describe()["cluster"]["presets_by_node"] == h.presets_by_node  # type: ignore[index]
    assert any("each is modelled as its own" in n for n in h.notes)


def test_whatif_simulates_the_mixed_cluster_the_controller_models(mixed_store: Store) -> None:
    snap = whatif.snapshot(mixed_store)
    out = whatif.evaluate(snap, whatif.WhatIfRequest.parse({"seeds": 1, "extra_nodes": 1}),
                          lambda name, seed: make_policy(name), default_policy="fifo")
    # The extra node is like the last one: a pcie-t4 of 4 GPUs.
    assert out["cluster"] == {"nodes": 4, "gpus": 20, "down_nodes": 0, "extra_nodes": 1, "name": "live-dgx-a100+pcie-t4"}
    world = whatif._world(snap, whatif.WhatIfRequest.parse({}), catalog())
    assert gpu_types(world.cluster) == ["A100-80GB"] * 8 + ["T4"] * 8


def test_whatif_adds_nodes_like_the_last_alive_one(mixed_store: Store) -> None:
    """The t nodes down: they stay in the model (their GPUs closed), and an extra node is like a0, the last alive."""
    with mixed_store.session() as s:
        s.execute(update(Node).where(Node.name.in_(["t0", "t1"])).values(alive=False))
    snap = whatif.snapshot(mixed_store)
    world = whatif._world(snap, whatif.WhatIfRequest.parse({"extra_nodes": 1}), catalog())
    assert gpu_types(world.cluster) == ["A100-80GB"] * 8 + ["T4"] * 8 + ["A100-80GB"] * 8
    assert any("1 extra dgx-a100 node(s) of 8 GPUs join" in n for n in world.notes), world.notes
    assert len(world.outages) == 8  # the down nodes' GPUs take no job


def test_gpu_rows_tell_the_api_each_gpu_s_type(mixed_store: Store) -> None:
    with mixed_store.session() as s:
        rows = s.execute(select(Node.name, Gpu.gpu_type).join(Gpu).order_by(Gpu.index)).all()
    assert [t for _, t in rows] == ["A100-80GB"] * 8 + ["T4"] * 8

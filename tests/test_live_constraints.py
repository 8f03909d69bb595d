"""Constraints in the live service: node labels from `corral node start --label` reach the controller's cluster model
and the store, a submission's constraints are stored and honoured, one no node could ever satisfy is a 422 naming
the field, and a job that waits for its nodes says so. The rule itself is tests/test_constraints.py's."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import StartingBackend, served
from sqlalchemy import func, select

from policies import make_policy
from scheduler.cli.commands import main
from scheduler.cli.serve import ServeConfig, discover
from scheduler.core.reasons import Code
from scheduler.live.cluster import ModelNode, labels_of, model_cluster
from scheduler.live.controller import Controller
from scheduler.live.node.daemon import AgentError, AgentOptions, NodeAgent
from scheduler.live.nodes import register_nodes
from scheduler.live.ray_backend import advertised_labels
from scheduler.live.runs import NodeInfo, node_resources
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job as JobRow
from web import create_app

ZONES = {"n0": (("zone", "a"),), "n1": (("zone", "a"),), "n2": (("zone", "b"),), "n3": ()}


# ---- the node's labels: flag, marker, model, store ------------------------------------------------------------------


def test_a_label_travels_as_a_marker_and_comes_back() -> None:
    res = node_resources("n1", 1, "pcie-t4", labels={"zone": "a", "team.io/owner": "ml-1"})
    assert res["corral_label_zone=a"] == 1.0 and res["corral_label_team.io/owner=ml-1"] == 1.0
    assert advertised_labels(res) == (("team.io/owner", "ml-1"), ("zone", "a"))
    ok = CliRunner().invoke(main, ["node-resources", "--name", "t1", "--gpus", "2", "--label", "zone=a"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output) == node_resources("t1", 2, labels={"zone": "a"})
    bad = CliRunner().invoke(main, ["node-resources", "--name", "t1", "--gpus", "2", "--label", "zone"])
    assert bad.exit_code == 2 and "--label" in bad.output and "KEY=VALUE" in bad.output


def test_corral_node_start_advertises_its_labels_and_refuses_bad_ones(tmp_path: Path) -> None:
    lines: list[str] = []
    opts = AgentOptions(address="127.0.0.1:1", name="n1", gpus=2, labels=(("zone", "a"),), node_dir=tmp_path / "n1",
                        dry_run=True, mps_control="none")
    NodeAgent(opts, out=lines.append).run()
    line = next(x for x in lines if x.strip().startswith("resources:"))
    assert json.loads(line.split(":", 1)[1]) == node_resources("n1", 2, labels={"zone": "a"})
    assert lines[0] == "corral node n1: 2 virtual GPU(s), labels zone=a"
    with pytest.raises(AgentError, match="--label"):
        NodeAgent(AgentOptions(address="127.0.0.1:1", name="n1", gpus=2, labels=(("zone", "a b"),),
                               node_dir=tmp_path / "n2", dry_run=True, mps_control="none")).prepare()
    assert not (tmp_path / "n2").exists()
    result = CliRunner().invoke(main, ["node", "start", "--address", "127.0.0.1:1", "--name", "n1", "--gpus", "2",
                                       "--state-dir", str(tmp_path / "n3"), "--label", "zone=a", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "corral_label_zone=a" in result.output


class Reported:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self._nodes = nodes

    def nodes(self) -> list[NodeInfo]:
        return self._nodes


def test_labels_reach_the_cluster_model_the_store_and_the_api(store: Store, corral_home: Path) -> None:
    reported = [NodeInfo(n, 2, True, n, "", "dgx-a100", None, labels) for n, labels in ZONES.items()]
    nodes, cluster = discover(Reported(reported), ServeConfig(ray_address="127.0.0.1:1"), [])  # type: ignore[arg-type]
    assert [n.labels for n in nodes] == list(ZONES.values())
    assert cluster.node_names == ("n0", "n1", "n2", "n3")
    assert [lab.get("zone") for lab in cluster.node_labels] == ["a", "a", "b", None]
    assert all(lab["gpu"] == "a100" for lab in cluster.node_labels)  # and the hardware's
    with store.session() as s:
        register_nodes(s, reported, cluster, list(ZONES), ["dgx-a100"] * 4, time.time())
        token = q.create_token(s, "alice")
    with store.session() as s:
        assert [n.labels for n in q.nodes_with_gpus(s)] == [{"zone": "a"}, {"zone": "a"}, {"zone": "b"}, None]
    body = create_app(store).test_client().get("/api/v1/cluster",
                                              headers={"Authorization": f"Bearer {token}"}).get_json()
    assert [n["labels"] for n in body["nodes"]] == [{"zone": "a"}, {"zone": "a"}, {"zone": "b"}, {}]
    with served(create_app(store)) as url:
        shown = CliRunner().invoke(main, ["cluster", "--gpus"], env={"CORRAL_URL": url, "CORRAL_TOKEN": token})
    assert shown.exit_code == 0, shown.output
    assert "n2 (zone=b, dgx-a100, alive)" in shown.output and "n3 (dgx-a100, alive)" in shown.output


# ---- submissions ---------------------------------------------------------------------------------------------------


def _registered(store: Store) -> str:
    reported = [NodeInfo(n, 2, True, n, "", "dgx-a100", None, labels) for n, labels in ZONES.items()]
    cluster = model_cluster([ModelNode(n, 2, "dgx-a100", None, labels) for n, labels in ZONES.items()])
    with store.session() as s:
        register_nodes(s, reported, cluster, list(ZONES), ["dgx-a100"] * 4, time.time())
        return q.create_token(s, "alice")


JOB = {"name": "j", "kind": "emulated", "model": "ResNet-50-bs64", "duration_s": 60.0}


@pytest.mark.parametrize(("constraints", "gpus", "field", "words"), [
    ({"gpu_type": "h100"}, 1, "gpu_type", "GPU type h100"),
    ({"labels": {"zone": "b"}}, 4, "labels", "those have 2"),
    ({"nodes": ["n9"]}, 1, "nodes", "no node named n9"),
    ({"labels": {"zone": "a"}, "exclude": ["n0", "n1"]}, 1, "exclude", "excludes every node"),
    ({"labels": {"zone": "a b"}}, 1, "labels", "is no label"),
    ({"nodes": ["n1"], "exclude": ["n1"]}, 1, "exclude", "which its node list names"),
    ({"gpu": "h100"}, 1, "gpu", "Unknown field"),
])
def test_a_job_no_node_could_ever_run_is_a_422_naming_the_field(store: Store, corral_home: Path,
                                                               constraints: dict, gpus: int, field: str,
                                                               words: str) -> None:
    token = _registered(store)
    client = create_app(store).test_client()
    r = client.post("/api/v1/jobs", json={**JOB, "num_gpus": gpus, "constraints": constraints},
                    headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 422, r.get_json()
    text = json.dumps(r.get_json())
    assert field in text and words in text, text
    with store.session() as s:
        assert s.scalar(select(func.count(JobRow.id))) == 0  # refused: nothing stored
    ok = client.post("/api/v1/jobs", json={**JOB, "num_gpus": 2, "constraints": {"labels": {"zone": "b"}}},
                     headers={"Authorization": f"Bearer {token}"})
    assert ok.status_code == 201, ok.get_json()
    assert ok.get_json()["constraints"] == {"labels": {"zone": "b"}}
    again = client.post(f"/api/v1/jobs/{ok.get_json()['id']}/resubmit", json={"constraints": {"exclude": ["n2"]}},
                        headers={"Authorization": f"Bearer {token}"})
    assert again.status_code == 201, again.get_json()  # a resubmission's change is checked as a submission's
    assert again.get_json()["constraints"] == {"exclude": ["n2"]}


def test_corral_submit_sends_slurm_s_flags_as_constraints(store: Store, corral_home: Path) -> None:
    token = _registered(store)
    with served(create_app(store)) as url:
        env = {"CORRAL_URL": url, "CORRAL_TOKEN": token}
        result = CliRunner().invoke(main, ["submit", "--name", "x", "--kind", "emulated", "--model", "ResNet-50-bs64",
                                           "--gpus", "1", "--duration", "60", "--constraint", "zone=a&a100",
                                           "--exclude", "n0", "--json"], env=env)
        refused = CliRunner().invoke(main, ["submit", "--name", "x", "--kind", "emulated", "--model",
                                            "ResNet-50-bs64", "--gpus", "1", "--duration", "60", "--nodelist", "n7"],
                                     env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["constraints"] == {"gpu_type": "a100", "labels": {"zone": "a"},
                                                        "exclude": ["n0"]}
    assert refused.exit_code != 0 and "n7" in refused.output
    job_id = json.loads(result.output)["id"]
    with served(create_app(store)) as url:
        shown = CliRunner().invoke(main, ["show", str(job_id)], env={"CORRAL_URL": url, "CORRAL_TOKEN": token})
    assert shown.exit_code == 0, shown.output
    assert "GPU type a100, zone=a, not on n0" in shown.output


# ---- the controller ------------------------------------------------------------------------------------------------


class Labelled(StartingBackend):
    """Each node reports the labels `labels` says (the test may relabel one)."""

    def __init__(self) -> None:
        super().__init__(list(ZONES), 2)
        self.labels = dict(ZONES)

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(n.name, n.gpus, True, n.ray_node_id, n.address, None, None, self.labels[n.name])
                for n in super().nodes()]


def _controller(store: Store, policy: str) -> Controller:
    nodes = [ModelNode(n, 2, "dgx-a100", None, labels) for n, labels in ZONES.items()]
    ctl = Controller(store, Labelled(), model_cluster(nodes), list(ZONES), make_policy, default_policy=policy,
                     tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    return ctl


def _submit(store: Store, name: str, gpus: int, constraints: dict | None) -> int:
    with store.session(write=True) as s:
        user = q.ensure_user(s, "ann")
        return q.submit(s, user, {"name": name, "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": gpus,
                                  "duration_s": 600.0, "constraints": constraints})[0].id


def _steps(ctl: Controller, n: int = 2) -> None:
    for _ in range(n):
        ctl._last_poll = ctl.health.last_nodes = 0.0
        ctl.step()


@pytest.mark.parametrize("policy", ["fifo-backfill", "rl:default"])
def test_the_controller_places_on_the_allowed_nodes_and_names_the_unmet_constraint(store: Store, corral_home: Path,
                                                                                   policy: str) -> None:
    ctl = _controller(store, policy)
    assert labels_of(ctl.cluster) == list(ZONES.values())
    first = _submit(store, "zone-b", 2, {"labels": {"zone": "b"}})
    _steps(ctl)
    assert {ctl.node_names[int(ctl.cluster.gpu_node[g])] for g in ctl.running[first].placement.gpus} == {"n2"}
    waiting = _submit(store, "zone-b-2", 1, {"labels": {"zone": "b"}})
    anywhere = _submit(store, "free", 1, None)
    _steps(ctl)
    assert anywhere in ctl.running and waiting not in ctl.running  # the others' nodes are free, not its own
    with store.session() as s:
        row = s.get(JobRow, waiting)
        assert row is not None
        if row.pending_code == Code.POLICY:  # a policy that says why in its own words names them too
            assert "zone=b" in row.pending_reason
        else:
            assert row.pending_code == Code.CONSTRAINED
            assert row.pending_params["constraints"] == "zone=b" and row.pending_params["elsewhere"] is True
            assert "on nodes matching zone=b" in row.pending_reason


def test_a_node_relabelled_by_its_agent_is_followed_and_a_waiting_job_starts_there(store: Store,
                                                                                    corral_home: Path) -> None:
    ctl = _controller(store, "fifo-backfill")
    first = _submit(store, "zone-b", 2, {"labels": {"zone": "b"}})
    _steps(ctl)
    assert first in ctl.running
    waiting = _submit(store, "zone-b-2", 2, {"labels": {"zone": "b"}})
    _steps(ctl)
    assert waiting not in ctl.running  # its one node is taken
    ctl.backend.labels["n3"] = (("zone", "b"),)  # type: ignore[attr-defined]  # its agent restarted with --label
    _steps(ctl, 3)
    assert labels_of(ctl.cluster)[3] == (("zone", "b"),)
    assert {ctl.node_names[int(ctl.cluster.gpu_node[g])] for g in ctl.running[waiting].placement.gpus} == {"n3"}
    assert ctl.running[first].placement.gpus == tuple(ctl.cluster.node_gpus(2))  # the run kept its GPUs
    with store.session() as s:
        assert [n.labels for n in q.nodes_with_gpus(s)][3] == {"zone": "b"}


def test_a_job_whose_constraints_no_alive_node_meets_fails_at_intake(store: Store, corral_home: Path) -> None:
    """Submitted past the API (or before the nodes changed): the controller refuses it as it refuses a gang too
    large, naming the constraints."""
    ctl = _controller(store, "fifo-backfill")
    job = _submit(store, "zone-c", 1, {"labels": {"zone": "c"}})
    _steps(ctl)
    with store.session() as s:
        row = s.get(JobRow, job)
        assert row is not None and row.state == "failed" and "zone=c" in (row.error or ""), (row.state, row.error)


# ---- what-if -------------------------------------------------------------------------------------------------------


def test_what_if_sees_the_nodes_labels_and_refuses_an_impossible_hypothetical_job(store: Store,
                                                                                   corral_home: Path) -> None:
    token = _registered(store)
    client = create_app(store).test_client()
    auth = {"Authorization": f"Bearer {token}"}
    job = {"name": "mine", "model": "ResNet-50-bs64", "num_gpus": 4, "duration_s": 300}
    bad = client.post("/api/v1/whatif", json={"jobs": [{**job, "constraints": {"labels": {"zone": "b"}}}]},
                      headers=auth)
    assert bad.status_code == 422 and "jobs.0.constraints.labels" in json.dumps(bad.get_json()), bad.get_json()
    ok = client.post("/api/v1/whatif", json={"seeds": 1, "jobs": [{**job, "constraints": {"labels": {"zone": "a"}}}]},
                     headers=auth)
    assert ok.status_code == 200, ok.get_json()
    assert ok.get_json()["hypothetical"][0]["completed_in"] == 1

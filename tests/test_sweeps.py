"""Sweeps over a Ray cluster (agents.sweep): `corral evaluate --ray-address` and `benchmarks/decision_quality.py
--ray-address` run their simulations as Ray tasks on a local cluster of two nodes (one CPU each, token
authentication as every cluster Corral joins has). Each gives exactly what the same sweep gives run locally, and
both nodes ran some of its simulations (by the node id each task recorded).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import virtual_ray_cluster
from tiers import tiered

from agents.evaluate import build_synthetic_cases
from scheduler.cli.commands import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
@tiered("ray")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A head and one more node, one CPU each; this process is not connected (each sweep joins and leaves)."""
    with virtual_ray_cluster(tmp_path_factory.mktemp("ray"), {"node1": 0}, connect=False) as cluster:
        yield cluster


def evaluate(tmp_path: Path, name: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    result = CliRunner().invoke(main, ["evaluate", "--policy", "fifo,gandiva", "--trace", "synthetic:40", "--cluster",
                                       "pcie-v100:2", "--seeds", "3", "--json", str(out), *extra])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def test_corral_evaluate_on_two_ray_nodes_gives_the_local_result(two_nodes: Any, tmp_path: Path) -> None:
    local = evaluate(tmp_path, "local")
    spread = evaluate(tmp_path, "ray", "--ray-address", two_nodes.address)
    (trace,) = spread
    ran_on = [case.pop("ran_on") for case in spread[trace]["cases"]]
    assert spread == local
    assert [sorted(r) for r in ran_on] == [["fifo", "gandiva", "tiresias"]] * 3  # every run of every case
    assert len({node for r in ran_on for node in r.values()}) == 2, f"one node ran every case: {ran_on}"
    assert "ran_on" not in json.dumps(local)


def _decision_quality() -> Any:
    spec = importlib.util.spec_from_file_location("decision_quality", ROOT / "benchmarks" / "decision_quality.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["decision_quality"] = module
    spec.loader.exec_module(module)
    return module


def test_decision_quality_on_two_ray_nodes_gives_the_local_result(two_nodes: Any) -> None:
    dq = _decision_quality()
    groups = [dq.Group("tiny", load, build_synthetic_cases("synthetic:40", "pcie-v100:2", 2, load=load, name="tiny"))
              for load in (1.0, 2.2)]
    policies = ["fifo", "sjf", "rl:no-such-agent"]
    local = dq.run(groups, policies, jobs=0, progress=False, log=lambda _: None)
    spread = dq.run(groups, policies, progress=False, log=lambda _: None, ray_address=two_nodes.address)
    nodes = spread.pop("ray_nodes")
    assert spread == local and "rl:no-such-agent" in local["skipped"]
    assert len(nodes) == 2 and sum(nodes.values()) == 4 * 3, nodes  # 4 cases x (fifo, sjf, tiresias), on both

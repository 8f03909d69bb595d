"""benchmarks/decision_quality.py on a tiny case set: each ratio is taken against the right baseline of the same case
(tiresias, the case's best non-oracle heuristic), a policy that cannot load or fails on a case is reported as skipped,
the process pool gives what one process gives, and the JSON report round-trips."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from agents.evaluate import SYNTHETIC_MIXES, build_cases, build_synthetic_cases
from policies import make_policy, registry
from policies.heuristics import Fifo
from scheduler.core.simulator import Simulator
from scheduler.core.traces import offered_load

ROOT = Path(__file__).resolve().parents[1]


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("decision_quality", ROOT / "benchmarks" / "decision_quality.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["decision_quality"] = module  # the pool pickles its functions by module name
    spec.loader.exec_module(module)
    return module


dq = _load_benchmark()
LOADS = (1.0, 2.2)
POLICIES = ["fifo", "sjf", "tiresias"]  # sjf is the oracle


@pytest.fixture(scope="module")
def groups() -> list:
    return [dq.Group("tiny", load, build_synthetic_cases("synthetic:60", "pcie-v100:2", 2, load=load, name="tiny"))
            for load in LOADS]


@pytest.fixture(scope="module")
def report(groups: list) -> dict:
    notes: list[str] = []
    out = dq.run(groups, [*POLICIES, "rl:no-such-agent"], jobs=0, progress=False, log=notes.append)
    out["notes"] = notes
    return out


def test_synthetic_cases_are_held_out_and_at_their_load(groups: list) -> None:
    for g in groups:
        assert [c.seed for c in g.cases] == [2**31, 2**31 + 1]  # training draws synthetic seeds below 2**31
        for c in g.cases:
            assert c.cluster.num_nodes == 2 and len(c.jobs) == 60
            assert offered_load(c.jobs, c.cluster.num_gpus) == pytest.approx(g.load, rel=1e-3)
            assert "arrivals" in c.how
    # The mixes are different workloads from the same seed; an unknown one is refused by name.
    long_ = build_synthetic_cases("synthetic:60", "pcie-v100:2", 1, mix="long")[0]
    assert np.median([j.duration_s for j in long_.jobs]) > 5 * np.median([j.duration_s for j in groups[0].cases[0].jobs])
    with pytest.raises(Exception, match="mix"):
        build_synthetic_cases("synthetic:60", "pcie-v100:2", 1, mix="nope")
    assert set(SYNTHETIC_MIXES) >= {"default", "short", "long", "fractional", "multinode"}


def test_build_cases_first_seed_keeps_the_default() -> None:
    trace = "synthetic:80,iat=30"
    default = build_cases([trace], "pcie-v100:2", 2)
    assert [c.seed for c in default] == [0, 1]
    shifted = build_cases([trace], "pcie-v100:2", 2, first_seed=4)
    assert [c.seed for c in shifted] == [4, 5]
    assert [j.duration_s for j in shifted[0].jobs] == [j.duration_s for j in build_cases([trace], "pcie-v100:2", 5)[4].jobs]


def test_ratios_are_paired_by_case_against_tiresias(report: dict, groups: list) -> None:
    assert report["policies"] == POLICIES and report["oracles"] == ["sjf"] and report["heuristics"] == ["fifo", "tiresias"]
    for g, rg in zip(groups, report["groups"], strict=False):
        assert rg["load"] == g.load and len(rg["cases"]) == 2
        for name in POLICIES:
            mine = [c["policies"][name]["avg_jct_s"] for c in rg["cases"]]
            tir = [c["policies"]["tiresias"]["avg_jct_s"] for c in rg["cases"]]
            ratios = [m / t for m, t in zip(mine, tir, strict=False)]
            cmp = rg["policies"][name]["vs_tiresias"]
            assert cmp["kind"] == "ratio" and cmp["per_case"] == pytest.approx(ratios)
            assert cmp["estimate"] == pytest.approx(math.exp(np.mean(np.log(ratios))))
            p99 = [c["policies"][name]["p99_jct_s"] / c["policies"]["tiresias"]["p99_jct_s"] for c in rg["cases"]]
            assert rg["policies"][name]["p99_vs_tiresias"]["per_case"] == pytest.approx(p99)
        bound = [np.mean([j.duration_s for j in c.jobs]) for c in g.cases]
        assert [c["lower_bound_s"] for c in rg["cases"]] == pytest.approx(bound)
        assert rg["lower_bound"]["vs_tiresias"]["per_case"] == pytest.approx(
            [b / c["policies"]["tiresias"]["avg_jct_s"] for b, c in zip(bound, rg["cases"], strict=False)])
        assert all(r < 1 for r in rg["lower_bound"]["vs_tiresias"]["per_case"])
    # The per-case values are those of that very case: simulate one independently.
    case = groups[1].cases[1]
    alone = Simulator(case.cluster, case.jobs, make_policy("fifo", seed=case.seed)).run().metrics["avg_jct_s"]
    assert report["groups"][1]["cases"][1]["policies"]["fifo"]["avg_jct_s"] == pytest.approx(alone)


def test_best_heuristic_is_per_case_and_never_the_oracle(report: dict) -> None:
    for rg in report["groups"]:
        for k, c in enumerate(rg["cases"]):
            values = {n: c["policies"][n]["avg_jct_s"] for n in ("fifo", "tiresias")}
            assert c["best_avg_jct_s"] == min(values.values())
            assert c["best_heuristic"] == [n for n, v in values.items() if v == min(values.values())]
            for n in c["best_heuristic"]:
                assert rg["policies"][n]["vs_best"]["per_case"][k] == pytest.approx(1.0)
            for n in values:
                assert rg["policies"][n]["vs_best"]["per_case"][k] >= 1.0 - 1e-12
            assert rg["policies"]["sjf"]["vs_best"]["per_case"][k] == pytest.approx(
                c["policies"]["sjf"]["avg_jct_s"] / min(values.values()))


def test_summarise_picks_each_cases_own_best(groups: list) -> None:
    """Made-up results where a different heuristic wins each case and the oracle beats them all."""
    g = groups[0]
    avg = {"a": [100.0, 300.0], "b": [200.0, 150.0], "tiresias": [400.0, 600.0], "oracle": [50.0, 60.0],
           "rl:x": [110.0, 165.0]}
    runs = {n: [{"avg_jct_s": v, "p99_jct_s": 2 * v} for v in vals] for n, vals in avg.items()}
    kinds = {n: {"oracle": n == "oracle", "learned": n == "rl:x"} for n in avg}
    r = dq.summarise([g], runs, kinds, {"rl:broken": "failed to load: no"})
    rg = r["groups"][0]
    assert r["heuristics"] == ["a", "b", "tiresias"]
    assert [c["best_heuristic"] for c in rg["cases"]] == [["a"], ["b"]]
    assert rg["best_heuristic_counts"] == {"a": 1, "b": 1}
    assert rg["policies"]["rl:x"]["vs_best"]["per_case"] == pytest.approx([1.1, 1.1])
    assert rg["policies"]["rl:x"]["vs_best"]["estimate"] == pytest.approx(1.1)
    assert rg["policies"]["rl:x"]["vs_tiresias"]["per_case"] == pytest.approx([110 / 400, 165 / 600])
    assert rg["policies"]["a"]["vs_best"]["per_case"] == pytest.approx([1.0, 2.0])
    assert rg["policies"]["oracle"]["vs_best"]["per_case"] == pytest.approx([0.5, 0.4])
    assert rg["best_heuristic"]["vs_tiresias"]["per_case"] == pytest.approx([0.25, 0.25])
    assert r["skipped"] == {"rl:broken": "failed to load: no"}


def test_a_policy_that_fails_to_load_is_skipped(report: dict) -> None:
    assert set(report["skipped"]) == {"rl:no-such-agent"}
    assert report["skipped"]["rl:no-such-agent"].startswith("failed to load:")
    assert "rl:no-such-agent" not in report["policies"]
    assert all("rl:no-such-agent" not in rg["policies"] for rg in report["groups"])
    assert any("skipping rl:no-such-agent" in n for n in report["notes"])
    md = dq.markdown(report, focus="rl:no-such-agent")
    assert "skipped" in md and "rl:no-such-agent (failed to load" in md


class _Crashes(Fifo):
    name = "test-crashes"

    def schedule(self, view, queue, now):
        raise RuntimeError("boom")


def test_a_policy_that_fails_on_a_case_is_dropped(groups: list, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._CLASSES, "test-crashes", _Crashes)
    r = dq.run(groups[:1], ["fifo", "test-crashes"], jobs=0, progress=False, log=lambda _: None)
    assert "boom" in r["skipped"]["test-crashes"] and "test-crashes" not in r["groups"][0]["policies"]
    assert r["policies"] == ["fifo", "tiresias"]  # the baseline always runs


def test_pool_gives_what_one_process_gives(report: dict, groups: list) -> None:
    pooled = dq.run(groups, POLICIES, jobs=2, progress=False, log=lambda _: None)
    assert pooled["groups"] == report["groups"]


def test_json_round_trips_and_renders(report: dict, tmp_path: Path) -> None:
    path = tmp_path / "dq.json"
    dq.write_json(report, path)
    back = dq.read_json(path)
    assert back == report
    assert dq.markdown(back) == dq.markdown(report)
    md = dq.markdown(back, focus="fifo").splitlines()
    assert len([line for line in md if line.startswith("| tiny")]) == len(LOADS)
    fifo_cell = md[2].split(" | ")[2]
    assert fifo_cell == dq.fmt(report["groups"][0]["policies"]["fifo"]["vs_tiresias"])
    dq.plot(back, tmp_path / "dq.png", focus="fifo")
    assert (tmp_path / "dq.png").stat().st_size > 10_000


def test_default_policies_follow_the_registry() -> None:
    names = dq.resolve_policies(None)
    plain = [n for n in registry.available() if ":" not in n]
    assert names[:len(plain)] == plain and "rl:default" in names and "sjf" in names
    assert not any(n.endswith(":NAME") for n in names)
    extra = dq.resolve_policies("fifo", ["tiresias:thresholds=60,600,3600"])
    assert extra == ["fifo", "tiresias:thresholds=60,600,3600", "tiresias"]
    assert dq.expand_workloads(["alibaba", "synthetic"]) == ["alibaba", *[f"synthetic-{m}" for m in SYNTHETIC_MIXES
                                                                          if m != "gangs"]]
    # The gangs mix runs only on the large fabric clusters, as its own workloads.
    assert dq.expand_workloads(["gangs"]) == ["gangs-fat-tree-3:1-1024", "gangs-rail-optimised-1024",
                                              "gangs-fat-tree-3:1-4096", "gangs-rail-optimised-4096"]


def test_gang_workloads_keep_their_fabric_at_every_load_and_report_contention_cost() -> None:
    groups, notes = dq.build_groups(["gangs-fat-tree-3:1-1024"], [1.0], seeds=2, window=100)
    assert notes == [] and len(groups[0].cases) == 2
    for case in groups[0].cases:
        assert case.cluster.fabric is not None and case.cluster.num_gpus == 1024
        assert len(case.jobs) == 2048 and any(j.workers >= 64 for j in case.jobs)
    assert dq.fit_summary([{"cluster": "hgx-h100:128@fat-tree-3:1", "load_fit": ""}]) == "hgx-h100:128@fat-tree-3:1"
    on = {"groups": [{"policies": {"fifo": {}}, "cases": [{"policies": {"fifo": {"avg_jct_s": v}}} for v in (2, 3)]}]}
    off = {"groups": [{"policies": {"fifo": {}}, "cases": [{"policies": {"fifo": {"avg_jct_s": v}}} for v in (1, 3)]}]}
    dq.add_contention_cost(on, off)
    assert on["groups"][0]["policies"]["fifo"]["contention_cost"]["estimate"] == pytest.approx(2 ** 0.5)


def test_a_wrapped_learned_policy_is_learned_not_a_heuristic() -> None:
    """guarded:rl:default is a learned policy (never a case's best heuristic); a heuristic under a wrapper stays a
    heuristic."""
    bench = dq
    for name, learned in (("rl:default", True), ("guarded:rl:default", True), ("guarded:tiresias", False),
                          ("largest:fifo", False), ("tiresias", False)):
        probed = bench.probe(name)
        assert probed["error"] is None and probed["learned"] is learned, (name, probed)

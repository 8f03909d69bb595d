"""Contention-greedy's queue scan (`policies.queue_scan.FirstFit`) groups gangs of one size but many models as one
where every GPU holds them (`whole_fit_key`): call for call, the decisions of the scan grouped by `fit_key`."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import record_calls

import policies.contention_greedy as greedy
from policies.placement import fit_key
from policies.queue_scan import whole_fit_key
from scheduler.core.decisions import Decision
from scheduler.core.model import ClusterSpec, JobSpec, NodeGroupSpec, NodeTypeSpec, build_cluster, parse_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterView


def _calls(key: Callable[[ClusterView, JobSpec], object], mixed: bool,
           monkeypatch: pytest.MonkeyPatch) -> tuple[list[list[Decision]], int]:
    """Each call's decisions of a deep-queue replay whose scan groups by `key`, and how many groups it made."""
    groups: set[object] = set()

    def counted(view: ClusterView, spec: JobSpec) -> object:
        k = key(view, spec)
        groups.add(k)
        return k

    monkeypatch.setattr(greedy, "whole_fit_key", counted)
    cluster = build_cluster(ClusterSpec(name="mixed", nodes_per_rack=8, groups=[
        NodeGroupSpec(count=2, node=NodeTypeSpec(gpu=gpu, gpus_per_node=8, interconnect="nvlink", nic_gbps=100.0))
        for gpu in ("V100-16GB", "V100-32GB")])) if mixed else parse_cluster("dgx-a100:4")
    # BERT-large (20 GB) fits only the 32 GB GPUs; MoE's (10 GB) half share only their MPS cap.
    sizes, models = [1, 2, 0.5, 4, 1, 8, 0.25, 2, 16, 6, 1], ["ResNet-50-bs64", "MoE", "BERT-large", "ResNet-18-bs32"]
    jobs = [JobSpec(name=f"j{i}", submit_s=i * 30.0, num_gpus=sizes[i % len(sizes)], model=models[i % len(models)],
                    duration_s=120.0 + (i * 677) % 4000) for i in range(400)]
    policy = greedy.ContentionGreedy()
    calls = record_calls(policy)
    Simulator(cluster, jobs, policy).run()
    return calls, len(groups)


@pytest.mark.parametrize("mixed", [False, True])
def test_grouping_gangs_of_every_model_a_gpu_holds_changes_no_decision(mixed: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    coarse, fewer = _calls(whole_fit_key, mixed, monkeypatch)
    fine, more = _calls(fit_key, mixed, monkeypatch)
    assert fewer < more, (fewer, more)
    assert len(coarse) == len(fine) and any(len(c) for c in coarse)
    for i, (a, b) in enumerate(zip(coarse, fine, strict=True)):
        assert a == b, i

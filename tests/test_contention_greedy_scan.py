"""Contention-greedy's queue scan (`policies.queue_scan.FirstFit`) groups gangs of one size but many models as one
where every GPU holds them (`whole_fit_key`): call for call, the decisions of the scan grouped by `fit_key`."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import many_models, record_calls, two_gpu_sizes

import policies.contention_greedy as greedy
from policies.placement import fit_key
from policies.queue_scan import whole_fit_key
from scheduler.core.decisions import Decision
from scheduler.core.model import JobSpec, parse_cluster
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
    policy = greedy.ContentionGreedy()
    calls = record_calls(policy)
    Simulator(two_gpu_sizes() if mixed else parse_cluster("dgx-a100:4"), many_models(400, 30.0), policy).run()
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

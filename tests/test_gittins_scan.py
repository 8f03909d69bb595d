"""Gittins' scan of the queue passes over a job whose group (`policies.gittins._group_of`) failed on the plan as it
stands: the decisions are, call for call, those of the scan that tries every job (each job a group of its own), on
overloaded clusters where jobs of every queue wait, preempt and fail to."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from conftest import record_calls

import policies.gittins as gittins
from policies.tiresias import Tiresias
from scheduler.core.decisions import Decision, Preempt
from scheduler.core.model import JobSpec, parse_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterView
from scheduler.core.traces import load_trace


def _decisions(shortcut: bool, cluster: str, trace: str, thresholds: tuple[float, ...], big_models: bool,
               monkeypatch: pytest.MonkeyPatch) -> tuple[list[list[Decision]], int]:
    """Each call's decisions, and how many jobs the calls tried (`_fit_or_preempt`)."""
    group_of = gittins._group_of
    if not shortcut:  # every job a group of its own: no job is ever passed over
        def alone(view: ClusterView, spec: JobSpec, level: int) -> tuple[Any, ...]:
            return (object(),)

        monkeypatch.setattr(gittins, "_group_of", alone)
    tried = [0]
    fit_or_preempt = Tiresias._fit_or_preempt

    def counted(self: Tiresias, *args: Any) -> Any:
        tried[0] += 1
        return fit_or_preempt(self, *args)

    monkeypatch.setattr(Tiresias, "_fit_or_preempt", counted)
    policy = gittins.Gittins(thresholds=thresholds)
    calls = record_calls(policy)
    jobs = load_trace(trace).jobs
    if big_models:  # every third whole-GPU job a model that fits only the 80 or only the 80 and 32 GB GPUs
        jobs = [replace(s, model=("GPT-1.3B", "BERT-large")[i % 2]) if s.num_gpus >= 1 and i % 3 == 0 else s
                for i, s in enumerate(jobs)]
    Simulator(parse_cluster(cluster), jobs, policy).run()
    monkeypatch.setattr(gittins, "_group_of", group_of)
    monkeypatch.setattr(Tiresias, "_fit_or_preempt", fit_or_preempt)
    return calls, tried[0]


@pytest.mark.parametrize(("cluster", "trace", "thresholds", "big_models"), [
    ("dgx-a100:6", "synthetic:700,iat=4,frac=0.3", (600.0, 6000.0, 60000.0), False),
    # nodes of 8 and 4 GPUs: a later job's preemption frees GPUs a group that failed before takes
    ("dgx-a100:2,pcie-v100:2,pcie-t4:4", "synthetic:700,iat=3,frac=0.3,high=0.2", gittins.DEFAULT_RANK_THRESHOLDS,
     False),
    # GPUs of 80, 32 and 16 GB: jobs of one size fit or not by their model
    ("dgx-a100:2,pcie-v100:2,pcie-t4:4", "synthetic:700,iat=3,frac=0.3,high=0.2", gittins.DEFAULT_RANK_THRESHOLDS,
     True),
])
def test_passing_over_failed_groups_changes_no_decision(cluster: str, trace: str, thresholds: tuple[float, ...],
                                                        big_models: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    with_it, tried_with = _decisions(True, cluster, trace, thresholds, big_models, monkeypatch)
    without, tried_without = _decisions(False, cluster, trace, thresholds, big_models, monkeypatch)
    assert tried_with < tried_without / 2  # the shortcut was taken, and often
    assert sum(isinstance(d, Preempt) for call in without for d in call) > 50  # (jobs did preempt)
    assert len(with_it) == len(without)
    for i, (a, b) in enumerate(zip(with_it, without, strict=True)):
        assert a == b, i

"""Tiresias' queue scan (`policies.tiresias._untried`) sets aside, once a job of the call waits, a group that can
neither preempt nor pass `Planner.may_fit` without handing it out (`hopeless`): the decisions are, call for call, those
of the scan that hands every group out and lets `_fit_or_preempt` find that it fails."""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterator

import pytest
from conftest import many_models, record_calls, two_gpu_sizes

import policies.tiresias as tiresias
from policies.placement import FitKey, fit_key
from policies.queue_scan import whole_fit_key
from scheduler.core.decisions import Decision
from scheduler.core.model import (
    Cluster,
    Job,
    JobSpec,
    parse_cluster,
)
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterView
from scheduler.core.traces import load_trace


def _decisions(shortcut: bool, seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[list[Decision]], int]:
    """Each call's decisions on a small overloaded cluster with low thresholds (jobs reach the last queue, which
    preempts no one), and how many groups were set aside."""
    untried = tiresias._untried
    asked = [0]

    def wrapped(index, level, planner, failed, hopeless=None, grown=None) -> Iterator[tuple[Job, object]]:
        if not shortcut:
            hopeless = grown = None
        elif hopeless is not None:
            inner = hopeless

            def hopeless(job: Job) -> bool:
                out = inner(job)
                asked[0] += out
                return out
        return untried(index, level, planner, failed, hopeless, grown)

    monkeypatch.setattr(tiresias, "_untried", wrapped)
    policy = tiresias.Tiresias(thresholds=(60.0, 600.0))
    calls = record_calls(policy)
    jobs = load_trace("synthetic:800,iat=4", seed=seed).jobs
    Simulator(parse_cluster("dgx-a100:6"), jobs, policy).run()
    monkeypatch.setattr(tiresias, "_untried", untried)
    return calls, asked[0]


@pytest.mark.parametrize("seed", [0])
def test_setting_hopeless_groups_aside_changes_no_decision(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    with_it, set_aside = _decisions(True, seed, monkeypatch)
    without, _ = _decisions(False, seed, monkeypatch)
    assert set_aside > 0  # the shortcut was taken
    assert len(with_it) == len(without)
    for i, (a, b) in enumerate(zip(with_it, without, strict=True)):
        assert a == b, i


def test_every_list_holding_a_stopped_job_is_marked_for_the_walk_to_tidy() -> None:
    """A victim walk the bound cuts short tidies only the lists marked stale (`Tiresias._stale`): at every walk of a
    replay with preemptions, each list that holds a job no longer running at that level is marked, so the tidies it
    leaves out would have dropped nothing."""
    checked = [0, 0]  # walks checked, and stale lists met

    class Checked(tiresias.Tiresias):
        def _walk(self, view, lv, bound):  # type: ignore[no-untyped-def]
            for demand, lst in self._by_level[lv].items():
                if any(view.running.get(j) is None or self._level.get(j) != lv for _, j in lst):
                    assert demand in self._stale[lv], (lv, demand)
                    checked[1] += 1
            checked[0] += 1
            return super()._walk(view, lv, bound)

    jobs = load_trace("synthetic:800,iat=4", seed=0).jobs
    Simulator(parse_cluster("dgx-a100:6"), jobs, Checked(thresholds=(60.0, 600.0))).run()
    assert checked[0] > 100 and checked[1] > 10, checked


def test_a_walk_reads_a_levels_running_jobs_latest_arrival_first() -> None:
    """At every victim walk of a replay with preemptions, the jobs a level's walk yields are its running jobs in
    (submitted, id) order, latest first, as a sort of its lists finds them: all of them, in order, as far as the search
    reads while the bound is inf (step 1), and in that order less those it skips once the bound falls (step 2)."""
    walks = [0, 0]  # walks checked, and those cut short by the bound
    wrong: list[int] = []  # (noted, not raised: a walk the search drops is closed by the collector, which would
    # print an assertion raised in its `finally` and go on)

    class Checked(tiresias.Tiresias):
        def _walk(self, view, lv, bound):  # type: ignore[no-untyped-def]
            want = sorted(((s, j) for lst in self._by_level[lv].values() for s, j in lst
                           if view.running.get(j) is not None and self._level.get(j) == lv), reverse=True)
            got: list[tuple[float, int]] = []
            try:
                for job in super()._walk(view, lv, bound):
                    got.append((job.spec.submit_s, job.id))
                    yield job
            finally:
                walks[0] += 1
                if bound is None or bound.value == math.inf:  # (the bound only falls: inf all along)
                    if got != want[:len(got)]:
                        wrong.append(lv)
                else:
                    walks[1] += 1
                    read = set(got)
                    if got != [w for w in want if w in read]:
                        wrong.append(lv)

    jobs = load_trace("synthetic:800,iat=4", seed=0).jobs
    Simulator(parse_cluster("dgx-a100:6"), jobs, Checked(thresholds=(60.0, 600.0))).run()
    gc.collect()  # (every walk dropped unfinished closed, so checked)
    assert walks[0] > 100 and walks[1] > 10, walks
    assert not wrong, f"walks out of order at levels {wrong[:10]}"


def _calls_grouped_by(group_key: Callable[..., object], cluster: Cluster, jobs: list[JobSpec],
                      monkeypatch: pytest.MonkeyPatch) -> tuple[list[list[Decision]], int]:
    """Each call's decisions of a tiresias replay whose queue groups use `group_key`, and how many groups it made."""
    monkeypatch.setattr(tiresias, "whole_fit_key", group_key)
    groups: set[object] = set()
    policy = tiresias.Tiresias(thresholds=(60.0, 600.0))
    calls = record_calls(policy)
    group = policy._group

    def counted(view: ClusterView, job: Job) -> tuple[int, int, FitKey]:
        key = group(view, job)
        groups.add(key)
        return key

    policy._group = counted  # type: ignore[method-assign]
    Simulator(cluster, jobs, policy).run()
    return calls, len(groups)


@pytest.mark.parametrize("mixed", [False, True])
def test_grouping_gangs_of_every_model_a_gpu_holds_changes_no_decision(mixed: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiresias groups the queue by `whole_fit_key` (a whole-GPU job's memory left out where every GPU holds it):
    call for call, the decisions of the grouping by `fit_key`, with fewer groups. On a cluster of 16 and 32 GB GPUs
    the models only the larger hold keep their memory in the key."""
    cluster = two_gpu_sizes() if mixed else parse_cluster("dgx-a100:4")
    jobs = many_models(500, 45.0)
    coarse, fewer = _calls_grouped_by(whole_fit_key, cluster, jobs, monkeypatch)
    fine, more = _calls_grouped_by(fit_key, cluster, jobs, monkeypatch)
    assert fewer < more, (fewer, more)
    assert len(coarse) == len(fine)
    for i, (a, b) in enumerate(zip(coarse, fine, strict=True)):
        assert a == b, i

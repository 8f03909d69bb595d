"""benchmarks/datacentre.py's machinery at a tiny size (so it cannot rot): it builds the partly full and the full
cluster, measures every policy on them and prints a row for each, with the states it claims (the full cluster's GPUs
all busy, the queue still deep, placing passes that place)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("datacentre", ROOT / "benchmarks" / "datacentre.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["datacentre"] = module
    spec.loader.exec_module(module)
    return module


dc = _load_benchmark()


def check(figs: list, policies: list[str], queued: int) -> None:
    assert [f.policy for f in figs] == policies
    for f in figs:
        assert len(f.partly) == 3 and len(f.full) == 6 and len(f.idle) == 3 and len(f.placing) == 3
        assert all(math.isfinite(x) and x >= 0 for x in (*f.partly, *f.full, *f.idle, *f.placing)), f
        assert f.busy > 0.8, f"{f.policy}: the full cluster is {f.busy:.0%} busy"
        assert 0 < f.queued <= queued
    # An end frees GPUs and some policy fills them (fifo may wait for its head): the placing passes place.
    assert sum(f.placed for f in figs) > 0
    table = dc.table(figs).splitlines()
    assert len(table) == 2 + len(figs) and all(row.count("|") == table[0].count("|") for row in table)


@pytest.mark.slow  # every heuristic's states and passes: seconds
def test_every_heuristic_gets_figures(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))  # (run() points it at its own folder; restored after)
    policies = [p for p in dc.default_policies() if not p.startswith("rl:")]
    assert {"fifo", "tiresias", "gittins", "contention-greedy", "topology"} <= set(policies)
    lines: list[str] = []
    figs = dc.run(nodes=6, queued=150, policies=policies, n_decisions=6, n_passes=3, echo=lines.append)
    check(figs, policies, 150)
    assert len(lines) == 1 + len(policies)  # the states built, then a line per policy


@pytest.mark.slow  # loading the agent: seconds
def test_rl_default_gets_figures(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    assert "rl:default" in dc.default_policies()
    figs = dc.run(nodes=6, queued=150, policies=["fifo", "rl:default"], n_decisions=6, n_passes=3,
                  echo=lambda line: None)
    check(figs, ["fifo", "rl:default"], 150)


def test_every_policy_is_asked_at_the_same_age(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each policy's calls come `age_s` after the states were built, whichever policy the run measures first (at the
    wall clock's time, Tiresias met states as old as the policies before it had made them)."""
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    asked: list[float] = []
    real = dc.decisions

    def recording(ctl, count: int, now: float) -> list[float]:
        asked.append(now)
        return real(ctl, count, now)

    monkeypatch.setattr(dc, "decisions", recording)
    t0 = dc.time.time()
    dc.run(nodes=6, queued=60, policies=["fifo", "tiresias"], n_decisions=3, n_passes=1, echo=lambda line: None,
           age_s=1800.0)
    t1 = dc.time.time()
    assert len(asked) == 2 * 4  # per policy: a first call and the timed ones, partly full, then full
    moments = set(asked)
    assert len(moments) == 1, asked
    (at,) = moments
    assert t0 + 1800.0 <= at <= t1 + 1800.0


def test_a_run_past_the_moment_asked_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    lines: list[str] = []
    dc.run(nodes=6, queued=60, policies=["fifo"], n_decisions=3, n_passes=1, echo=lines.append, age_s=0.0)
    assert any(line.startswith("warning: fifo is measured past the moment asked") for line in lines), lines

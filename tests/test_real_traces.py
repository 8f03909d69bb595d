"""Acceptance on the real Philly and Alibaba slices in ../shared/traces (skipped, saying so, where absent).

Clusters are sized so that the comparison means something: pcie-v100:48 (384 GPUs) queues Philly's day-60 burst,
pcie-v100:4 (32 GPUs) holds the Alibaba pods at about 40% offered load. `benchmarks/policies.py` prints the same
comparison over several seeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import shared_file
from test_cli import JSON_KEYS

from scheduler.cli.commands import main

pytestmark = pytest.mark.slow  # whole real trace slices through the simulator


@pytest.mark.parametrize(("trace", "cluster"), [
    ("philly_day60.csv", "pcie-v100:48"),
    ("alibaba_openb_before_day130.csv", "pcie-v100:4"),
])
def test_contention_greedy_beats_fifo_and_consolidate(trace: str, cluster: str, tmp_path: Path) -> None:
    path = shared_file("traces", trace)
    out = tmp_path / "m.json"
    result = CliRunner().invoke(main, ["simulate", "--trace", str(path), "--cluster", cluster,
                                       "--policy", "fifo,consolidate,contention-greedy", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    jobs = report["trace"]["jobs"]
    for name, m in report["policies"].items():
        assert set(m) >= JSON_KEYS, name
        assert m["jobs_completed"] + m["jobs_rejected"] == jobs, f"{name} lost accepted jobs"
        assert m["jobs_rejected"] == 0
    p = report["policies"]
    assert p["contention-greedy"]["avg_jct_s"] < p["consolidate"]["avg_jct_s"] < p["fifo"]["avg_jct_s"]
    assert p["contention-greedy"]["avg_contention_slowdown"] < p["consolidate"]["avg_contention_slowdown"]

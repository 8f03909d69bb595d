"""`corral simulate` end to end: output, JSON keys, plot, and one clear error (no traceback) for each bad input; and
the banner `corral serve` prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler.cli.commands import main

JSON_KEYS = {"jobs_completed", "jobs_rejected", "avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s",
             "avg_slowdown", "makespan_s", "gpu_util", "avg_contention_slowdown", "wall_s"}

TRACE = """job_id,submit_s,num_gpus,duration_s,kind,model
a,0,2,100,training,ResNet-50-bs64
b,1,4,10,training,Transformer-XL
c,2,1,5,training,
d,3,0.5,50,inference,
"""


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.csv"
    path.write_text(TRACE)
    return path


def test_simulate_prints_table_and_writes_json_and_plot(trace: Path, tmp_path: Path) -> None:
    out, png = tmp_path / "m.json", tmp_path / "cdf.png"
    code, output = run("simulate", "--trace", str(trace), "--cluster", "dgx-a100:1", "--policy", "fifo,sjf",
                       "--no-contention", "--json", str(out), "--plot", str(png))
    assert code == 0, output
    assert "Policy comparison" in output and "sjf (oracle)" in output
    report = json.loads(out.read_text())
    assert set(report) >= {"trace", "cluster", "policies"}
    assert report["trace"]["jobs"] == 4 and report["cluster"]["gpus"] == 8 and report["contention"] is False
    for name in ("fifo", "sjf"):
        assert JSON_KEYS <= set(report["policies"][name])
        assert report["policies"][name]["jobs_completed"] == 4
    # FIFO on 8 free GPUs starts everything at once: JCTs are the durations.
    assert report["policies"]["fifo"]["avg_jct_s"] == pytest.approx((100 + 10 + 5 + 50) / 4)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "fifo,bogus"], "Invalid value for '--policy': unknown policy 'bogus'; choose from"),
    (["--cluster", "tpu:4"], "Invalid value for '--cluster': unknown preset 'tpu'"),
    (["--cluster", "dgx-a100:many"], "node count 'many'"),
    (["--format", "slurm"], "'slurm' is not one of 'auto', 'corral', 'philly', 'alibaba'"),
    (["--limit", "0"], "Invalid value for '--limit'"),
])
def test_bad_flags_name_the_flag_and_choices(trace: Path, args: list[str], message: str) -> None:
    base = {"--trace": str(trace), "--cluster": "dgx-a100:1", "--policy": "fifo"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    code, output = run("simulate", *[x for kv in base.items() for x in kv])
    assert code == 2
    assert message in " ".join(output.split())


@pytest.mark.parametrize(("body", "message"), [
    (TRACE + "e,4,two,10,training,A3C\n", "line 6: column 'num_gpus'"),
    ("job_id,submit_s,num_gpus,kind,model\na,0,1,training,A3C\n", "missing column(s) 'duration_s'"),
    (TRACE + "e,4,1,10,serving,A3C\n", "line 6: column 'kind'"),
])
def test_bad_traces_name_the_file_and_line(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(body)
    code, output = run("simulate", "--trace", str(path), "--cluster", "dgx-a100:1", "--policy", "fifo")
    assert code == 1
    flat = " ".join(output.split())
    assert "bad.csv" in flat and message in flat


def test_missing_trace_file(tmp_path: Path) -> None:
    code, output = run("simulate", "--trace", str(tmp_path / "nope.csv"), "--cluster", "dgx-a100:1")
    assert code == 1 and "nope.csv" in output


# ---- corral serve's banner ----------------------------------------------------------------------------------------


def test_serve_banner_counts_gpus_per_node_and_gives_working_commands(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler.live.cluster import build_live_cluster
    from scheduler.live.serve import ServeConfig, banner

    script = tmp_path / "venv" / "bin" / "corral"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "serve"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the venv's bin is not on PATH, as after `make run`
    text = banner(build_live_cluster("dgx-a100", [8, 8, 8, 8]), ServeConfig(), "rl:default", "http://127.0.0.1:8080",
                  "postgresql+psycopg://corral:s3cret@db/corral", "10.0.0.1:6379")
    assert "4 nodes x 8 GPUs (32 GPUs) (dgx-a100)" in text
    assert "dashboard: http://127.0.0.1:8080/\n" in text
    assert f"a token:   {script} token create --user \"$(whoami)\" --admin" in text
    assert f"{script} submit" in text
    assert "s3cret" not in text and "corral:***@db" in text

    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin")  # now plain `corral` is this installation
    mixed = banner(build_live_cluster("dgx-a100", [8, 4]), ServeConfig(), "tiresias", "http://h:1", "sqlite:///x.db",
                   "local")
    assert "2 nodes with 8+4 GPUs (12 GPUs)" in mixed and "a token:   corral token create" in mixed

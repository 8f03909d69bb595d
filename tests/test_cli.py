"""`corral simulate` end to end: output, JSON keys, plot, and one clear error (no traceback) for each bad input; every
command's numeric options and output paths checked while the flags are parsed, each failure one line; and the banner
`corral serve` prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from scheduler.cli.commands import main
from scheduler.cli.params import Number, OutPath

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
        assert set(report["policies"][name]) >= JSON_KEYS
        assert report["policies"][name]["jobs_completed"] == 4
    # FIFO on 8 free GPUs starts everything at once: JCTs are the durations.
    assert report["policies"]["fifo"]["avg_jct_s"] == pytest.approx((100 + 10 + 5 + 50) / 4)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "fifo,bogus"], "corral: --policy: unknown policy 'bogus'; choose from"),
    (["--cluster", "tpu:4"], "corral: --cluster: unknown preset 'tpu'"),
    (["--cluster", "dgx-a100:many"], "node count 'many'"),
    (["--format", "slurm"], "'slurm' is not one of 'auto', 'corral', 'philly', 'alibaba'"),
    (["--limit", "0"], "corral: --limit: must be at least 1, got 0"),
])
def test_bad_flags_name_the_flag_and_choices(trace: Path, args: list[str], message: str) -> None:
    base = {"--trace": str(trace), "--cluster": "dgx-a100:1", "--policy": "fifo"}
    for flag, value in zip(args[::2], args[1::2], strict=False):
        base[flag] = value
    code, output = run("simulate", *[x for kv in base.items() for x in kv])
    assert code == 2
    assert len(output.strip().splitlines()) == 1, output
    assert message in output


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


# ---- every command: numbers and output paths refused in one line, before any work ---------------------------------


def every_command(group: click.Group = main, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += every_command(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


def params_of(kind: type) -> list[tuple[tuple[str, ...], click.Parameter]]:
    return [(path, p) for path, cmd in every_command() for p in cmd.params if isinstance(p.type, kind)]


def flag(param: click.Parameter) -> list[str]:
    """How to give `param` a value on the command line: `--opt` for an option; `--` for an argument (so that -1 is
    its value, not an option)."""
    return [max(param.opts, key=len)] if isinstance(param, click.Option) else ["--"]


def name_of(param: click.Parameter) -> str:
    return max(param.opts, key=len) if isinstance(param, click.Option) else (param.name or "").upper()


def one_line_usage_error(result: Result, names: str) -> str:
    """Exit status 2, nothing on stdout, one line on stderr that starts `corral: NAME:`."""
    assert "Traceback" not in result.output
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"corral: {names}: "), lines[0]
    return lines[0]


def test_no_command_takes_a_plain_number_or_output_path() -> None:
    """Numbers go through params.Number (finite, bounded) and written files through params.OutPath (checked before
    the work): a new option with `type=float` or a writable click.Path would let nan or a missing folder through."""
    plain = (click.types.IntParamType, click.types.FloatParamType)  # IntRange and FloatRange are these too
    numbers = [f"{' '.join(path)} {name_of(p)}" for path, p in params_of(plain)]
    assert not numbers, f"use scheduler.cli.params.Number for: {numbers}"
    writable = [f"{' '.join(path)} {name_of(p)}" for path, p in params_of(click.Path)
                if p.type.writable or name_of(p) in ("--json", "--plot", "--out", "--csv", "--save", "--write")]
    assert not writable, f"use scheduler.cli.params.OutPath for: {writable}"
    assert len(params_of(Number)) >= 40 and len(params_of(OutPath)) >= 10


NUMBER_CASES = [(path, p, value) for path, p in params_of(Number) for value in ("nan", "inf", "-inf")] + [
    (path, p, "-1") for path, p in params_of(Number) if p.type.min is not None and p.type.min >= 0]


@pytest.mark.parametrize(("path", "param", "value"), NUMBER_CASES,
                         ids=[f"{'-'.join(path)}{name_of(p)}={v}" for path, p, v in NUMBER_CASES])
def test_every_numeric_option_refuses_non_finite_and_out_of_range_numbers_in_one_line(
        path: tuple[str, ...], param: click.Parameter, value: str, tmp_path: Path) -> None:
    # CORRAL_TOKEN and CORRAL_URL are set (nothing listens there): a refusal must come before any request.
    env = {"CORRAL_HOME": str(tmp_path), "CORRAL_TOKEN": "t", "CORRAL_URL": "http://127.0.0.1:9"}
    result = CliRunner().invoke(main, [*path, *flag(param), value], env=env)
    line = one_line_usage_error(result, name_of(param))
    if value != "-1":
        assert line.endswith(f"must be a whole number, got '{value}'" if param.type.kind == "int" else
                             f"must be a finite number, got {value}")


def test_a_huge_whole_number_is_refused_by_its_bound_not_a_crash() -> None:
    line = one_line_usage_error(CliRunner().invoke(main, ["jobs", "--limit", "9" * 400]), "--limit")
    assert "must be at most 1000" in line


@pytest.mark.parametrize("args", [["submit", "--gpus", "nan"], ["submit", "--duration", "nan"],
                                  ["submit", "--gpus", "inf"], ["submit", "--duration", "-3"]])
def test_submit_refuses_what_json_cannot_carry_before_any_request(args: list[str]) -> None:
    result = CliRunner().invoke(main, args, env={"CORRAL_TOKEN": "t", "CORRAL_URL": "http://127.0.0.1:9"})
    one_line_usage_error(result, args[1])


OUT_CASES = [(path, p) for path, p in params_of(OutPath)]


@pytest.mark.parametrize(("path", "param"), OUT_CASES, ids=[f"{'-'.join(path)}{name_of(p)}" for path, p in OUT_CASES])
def test_every_output_path_is_checked_before_the_work(path: tuple[str, ...], param: click.Parameter,
                                                       tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder" / "x.out"
    if param.type.make_parents:  # train --out and --tensorboard make their folders: only a file in the way stops them
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        missing = blocker / "x.out"
    line = one_line_usage_error(CliRunner().invoke(main, [*path, *flag(param), str(missing)]), name_of(param))
    assert str(missing) in line
    if not param.type.folder:
        line = one_line_usage_error(CliRunner().invoke(main, [*path, *flag(param), str(tmp_path)]), name_of(param))
        assert "it is a folder" in line


def test_simulate_refuses_a_plot_it_cannot_write_before_simulating(trace: Path, tmp_path: Path) -> None:
    for option in ("--plot", "--json"):
        result = CliRunner().invoke(main, ["simulate", "--trace", str(trace), "--cluster", "dgx-a100:1", "--policy",
                                           "fifo", option, "/nonexistent/x.out"])
        line = one_line_usage_error(result, option)
        assert "folder '/nonexistent' does not exist" in line and "Policy comparison" not in result.output


@pytest.mark.parametrize(("args", "says", "help_of"), [
    (["simulate", "--bogus"], "No such option '--bogus'", "corral simulate"),
    (["no-such-command"], "No such command 'no-such-command'", "corral"),
    (["token", "create"], "Missing option '--user'", "corral token create"),
])
def test_usage_errors_are_one_line_with_where_to_look(args: list[str], says: str, help_of: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("corral: ") and says in lines[0], result.stderr
    assert lines[0].endswith(f"(see `{help_of} --help`)")


def test_an_os_error_while_writing_is_one_line(trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path that passed the check can still fail (a full disk, a folder removed meanwhile): one line, status 1."""
    def full_disk(self: Path, *args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", full_disk)
    result = CliRunner().invoke(main, ["simulate", "--trace", str(trace), "--cluster", "dgx-a100:1", "--policy", "fifo",
                                       "--json", str(tmp_path / "m.json")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    written = tmp_path / "m.json"
    assert result.stderr.strip().splitlines() == [f"corral: [Errno 28] No space left on device: '{written}'"]


# ---- corral serve's banner ----------------------------------------------------------------------------------------


def test_serve_banner_counts_gpus_per_node_and_gives_working_commands(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler.cli.serve import ServeConfig, banner
    from scheduler.live.cluster import build_live_cluster

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
    assert f"a token:   {script} token create --user \"$(whoami)\" --admin  (with this server's DATABASE_URL)" in text
    assert f"{script} submit" in text
    assert "s3cret" not in text and "corral:***@db" in text
    home = tmp_path / "my home"  # SQLite: the command names the store's CORRAL_HOME, quoted for the shell
    text = banner(build_live_cluster("dgx-a100", [8]), ServeConfig(), "fifo", "http://127.0.0.1:8080",
                  f"sqlite:///{home / 'corral.db'}", "127.0.0.1:6379")
    assert f"a token:   CORRAL_HOME='{home}' {script} token create" in text

    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin")  # now plain `corral` is this installation
    mixed = banner(build_live_cluster("dgx-a100", [8, 4]), ServeConfig(), "tiresias", "http://h:1", "sqlite:///x.db",
                   "local")
    assert "2 nodes with 8+4 GPUs (12 GPUs)" in mixed and "a token:   CORRAL_HOME=. corral token create" in mixed

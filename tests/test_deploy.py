"""The container deployment: Dockerfile, .dockerignore and docker-compose.yml, checked without a Docker engine.

The compose file is parsed with PyYAML and interpolated the way Compose does (`${VAR:-default}`, `$$`), with and
without variables set, and the services' shell commands are run for real with `ray` (and for the service `python`,
`corral` and `sleep`) replaced by stubs that record their arguments: so the worker's `--resources` is what the real
`corral node-resources` prints, and the service joins the same head the workers join. Where the Docker CLI has its
compose plugin, `docker compose config --quiet` validates the file against the Compose specification too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from scheduler.core.model import PRESETS
from scheduler.live.cluster import check_fabric, node_type
from scheduler.live.runs import node_resources

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
CORRAL_CLI = Path(sys.executable).parent / "corral"
SERVICES = {"ray-token", "postgres", "ray-head", "ray-worker", "corral", "corral-standby"}

# -- Compose's variable interpolation ------------------------------------------------------------------------------

_VAR = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_]\w*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
                  r"|(?P<named>[A-Za-z_]\w*))")


def _interpolate_str(text: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m["escaped"]:
            return "$"
        name = m["braced"] or m["named"]
        value, op = env.get(name), m["op"]
        if op == ":-" and not value or op == "-" and value is None:
            return m["arg"]
        if op in (":?", "?") and not value:
            raise AssertionError(f"compose would refuse to start: ${{{name}}} is required ({m['arg']})")
        return value or ""

    return _VAR.sub(sub, text)


def interpolate(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return _interpolate_str(node, env)
    if isinstance(node, list):
        return [interpolate(x, env) for x in node]
    if isinstance(node, dict):
        return {k: interpolate(v, env) for k, v in node.items()}
    return node


def test_interpolation_helper() -> None:
    env = {"A": "x", "E": ""}
    assert _interpolate_str("$$A ${A} ${A:-d} ${B:-d} ${E:-d} ${E-d} ${B-d} $A", env) == "$A x x d d  d x"
    with pytest.raises(AssertionError):
        _interpolate_str("${B:?set B}", env)


RAW: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
VARIABLES = {m["braced"] or m["named"] for m in _VAR.finditer(COMPOSE.read_text()) if not m["escaped"]}
# The settings the compose file reads from the shell or .env, each with a value of its own: a setting that reaches one
# service but not the one it must agree with shows. Compose is checked as run with none set and with all of them.
KNOBS = {"POSTGRES_PASSWORD": "s3cret-from-env", "CORRAL_GPUS_PER_NODE": "4", "CORRAL_PRESET": "pcie-v100",
         "CORRAL_MIN_NODES": "5", "CORRAL_IMAGE": "registry.example/corral:1.2", "CORRAL_NODE_TOKEN": "node-token-1",
         "CORRAL_RACK": "row-2.rack_b", "CORRAL_FABRIC": "fat-tree-3:1"}
ENVS = {"defaults": {}, "overridden": KNOBS}


def test_compose_reads_the_documented_settings() -> None:
    assert set(KNOBS) == VARIABLES
    header = COMPOSE.read_text().split("x-corral-image")[0]
    for name in KNOBS:
        assert name in header, f"{name} is read but not described at the top of docker-compose.yml"


@pytest.fixture(params=sorted(ENVS))
def env(request: pytest.FixtureRequest) -> dict[str, str]:
    return ENVS[request.param]


def compose(env: dict[str, str]) -> dict[str, Any]:
    return interpolate(RAW, env)


def environment(service: dict[str, Any]) -> dict[str, str]:
    envs = service.get("environment") or {}
    if isinstance(envs, list):
        envs = dict(e.split("=", 1) for e in envs)
    return {k: str(v) for k, v in envs.items()}


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source, for short (`src:dst[:mode]`) and long volume syntax."""
    out = {}
    for v in service.get("volumes") or []:
        if isinstance(v, str):
            src, dst = v.split(":")[:2]
        else:
            src, dst = v.get("source", ""), v["target"]
        out[dst] = src
    return out


# -- running a service's command with stubs -------------------------------------------------------------------------

_STUB = """#!/bin/sh
{{ printf '%s' {name}; for a in "$@"; do printf '\\037%s' "$a"; done; printf '\\036'; }} >> "$STUB_LOG"
{body}
"""


def run_command(service: dict[str, Any], tmp_path: Path, stubs: dict[str, str], extra_env: dict[str, str],
                real_corral: bool = False) -> list[list[str]]:
    """Run the service's `command` as the container would (the image's PATH holds `ray`, `python` and `corral`),
    with each of `stubs` (name -> shell body) recording its argv. Returns the recorded calls in order."""
    bin_dir = tmp_path / "stubs"
    bin_dir.mkdir(exist_ok=True)
    for name, body in stubs.items():
        path = bin_dir / name
        path.write_text(_STUB.format(name=shlex.quote(name), body=body))
        path.chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    path = [str(bin_dir)] + ([str(CORRAL_CLI.parent)] if real_corral else []) + ["/usr/bin", "/bin"]
    env = {"PATH": ":".join(path), "STUB_LOG": str(log), "STUB_DIR": str(bin_dir), **environment(service),
           **extra_env}
    command = service["command"]
    argv = command if isinstance(command, list) else shlex.split(command)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, f"{argv[:2]} exited {proc.returncode}: {proc.stderr}"
    return [rec.split("\x1f") for rec in log.read_text().split("\x1e") if rec]


def option(args: list[str], name: str) -> str:
    """`--name VALUE` or `--name=VALUE` from an argv (exactly once)."""
    found = [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]
    found += [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    assert len(found) == 1, f"{name} given {len(found)} times in {args}"
    return found[0]


def head_address(c: dict[str, Any]) -> str:
    cmd = c["services"]["ray-head"]["command"]
    args = cmd if isinstance(cmd, list) else shlex.split(cmd)
    assert args[:3] == ["ray", "start", "--head"] and "--block" in args
    return f"ray-head:{option(args, '--port')}"


# -- compose: structure and wiring -----------------------------------------------------------------------------------

def test_compose_is_the_compose_spec_with_the_six_services() -> None:
    assert "version" not in RAW  # the Compose specification has none; Compose v2 warns that it is obsolete
    assert set(RAW["services"]) == SERVICES
    for name in ("ray-token", "ray-head", "ray-worker", "corral", "corral-standby"):
        svc = RAW["services"][name]
        assert svc.get("build"), f"{name} must build the Corral image"
        assert svc["image"] == RAW["services"]["corral"]["image"], f"{name} must run the same image as corral"


def test_compose_validates_with_docker_compose() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI on this machine")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        pytest.skip(f"the docker CLI has no compose plugin: {(probe.stderr or probe.stdout).strip()[:200]}")
    proc = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "--quiet"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def test_database_url_names_the_postgres_service_and_its_credentials(env: dict[str, str]) -> None:
    c = compose(env)
    pg = environment(c["services"]["postgres"])
    url = urlsplit(environment(c["services"]["corral"])["DATABASE_URL"])
    assert url.scheme in ("postgresql", "postgres", "postgresql+psycopg")
    assert url.hostname == "postgres" and url.hostname in c["services"]
    assert (url.port or 5432) == 5432
    assert url.username == pg["POSTGRES_USER"] == "corral"
    assert url.password == pg["POSTGRES_PASSWORD"]
    assert url.path == "/" + pg["POSTGRES_DB"]
    assert pg["POSTGRES_DB"] == "corral"


def test_the_standby_replica_is_the_service_again_on_another_port(env: dict[str, str]) -> None:
    """`--profile ha` adds a second replica: the same command, database, Ray head and CORRAL_HOME volume (so it can
    adopt the leader's workers and read their logs), its API published on 8081; without the profile it stays off."""
    c = compose(env)
    main, standby = c["services"]["corral"], c["services"]["corral-standby"]
    assert standby["profiles"] == ["ha"] and "profiles" not in main
    for key in ("command", "environment", "volumes", "depends_on", "image"):
        assert standby[key] == main[key], key
    assert [str(p) for p in standby["ports"]] == ["8081:8080"] and [str(p) for p in main["ports"]] == ["8080:8080"]
    assert urlsplit(environment(standby)["DATABASE_URL"]).scheme.startswith("postgres"), "replicas need PostgreSQL"


def test_database_url_is_what_the_store_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler.live.store.db import database_url

    monkeypatch.setenv("DATABASE_URL", environment(compose({})["services"]["corral"])["DATABASE_URL"])
    assert database_url() == "postgresql+psycopg://corral:corral@postgres:5432/corral"  # psycopg 3, installed


def test_postgres_has_a_healthcheck_and_a_data_volume() -> None:
    pg = RAW["services"]["postgres"]
    assert str(pg["image"]).startswith("postgres:16")
    test = pg["healthcheck"]["test"]
    assert "pg_isready" in (test if isinstance(test, str) else " ".join(test))
    data = mounts(pg).get("/var/lib/postgresql/data")
    assert data and data in (RAW.get("volumes") or {}), "postgres data must be on a named volume"


def test_corral_waits_for_a_healthy_database_and_the_ray_head() -> None:
    deps = RAW["services"]["corral"]["depends_on"]
    assert deps["postgres"]["condition"] == "service_healthy"
    assert deps["ray-head"]["condition"] in ("service_started", "service_healthy")
    worker_deps = RAW["services"]["ray-worker"]["depends_on"]
    assert "ray-head" in worker_deps
    for cond in (deps["ray-head"]["condition"], worker_deps["ray-head"]["condition"]):
        if cond == "service_healthy":
            check = RAW["services"]["ray-head"].get("healthcheck") or {}
            assert check.get("test") and not check.get("disable"), "service_healthy needs a healthcheck on ray-head"
            assert "health-check" in check["test"]


def test_ray_nodes_do_not_run_the_api_healthcheck() -> None:
    """The image's HEALTHCHECK asks the API: on a Ray node it would fail, so compose replaces or disables it."""
    for name in ("ray-head", "ray-worker"):
        check = RAW["services"][name].get("healthcheck") or {}
        assert check.get("disable") or "api/v1/health" not in json.dumps(check.get("test")), name


def test_ray_head_offers_no_resources_for_jobs() -> None:
    cmd = RAW["services"]["ray-head"]["command"]
    args = cmd if isinstance(cmd, list) else shlex.split(cmd)
    assert option(args, "--num-gpus") == "0" and json.loads(option(args, "--resources")) == {}
    assert option(args, "--dashboard-host") == "0.0.0.0"
    assert "deploy" not in RAW["services"]["ray-head"]


@pytest.mark.slow
def test_worker_runs_the_node_agent_joined_to_the_head(env: dict[str, str], tmp_path: Path) -> None:
    """Each worker container is one `corral node start`, whose resources are exactly `node_resources` for its name
    and GPU count (checked by running the real agent's dry run with the same arguments)."""
    assert CORRAL_CLI.exists(), f"the project's console script is missing: {CORRAL_CLI}"
    c = compose(env)
    worker = c["services"]["ray-worker"]
    hostname = "3f2a9c0d1b7e"  # what Docker sets HOSTNAME to: the container's short ID
    calls = run_command(worker, tmp_path, {"corral": "exit 0"}, {"HOSTNAME": hostname})
    assert [call[:3] for call in calls] == [["corral", "node", "start"]], calls
    args = calls[0]
    assert option(args, "--address") == head_address(c)
    assert option(args, "--name") == hostname
    gpus = int(environment(worker)["CORRAL_GPUS_PER_NODE"])
    assert gpus == int(env.get("CORRAL_GPUS_PER_NODE", 8)) and option(args, "--gpus") == str(gpus)
    assert option(args, "--preset") == env.get("CORRAL_PRESET", "dgx-a100")
    rack = env.get("CORRAL_RACK")  # unset: the worker names no rack, and is given no --rack at all
    assert option(args, "--rack") == rack if rack else not any(a.startswith("--rack") for a in args)
    dry = subprocess.run([str(CORRAL_CLI), *args[1:], "--dry-run", "--state-dir", str(tmp_path / "agent"),
                          "--mps-control", "none"], capture_output=True, text=True, timeout=60, check=True)
    line = next(x for x in dry.stdout.splitlines() if x.strip().startswith("resources:"))
    # The worker's preset and rack travel with it: the controller models the node as that preset, in that rack.
    assert json.loads(line.split(":", 1)[1]) == node_resources(hostname, gpus, env.get("CORRAL_PRESET", "dgx-a100"),
                                                               rack)


@pytest.mark.slow
def test_worker_pushes_gpu_health_to_the_service_s_api(env: dict[str, str], tmp_path: Path) -> None:
    """`--api` names the corral service at the port its API listens on inside the network, and the agent's token is
    CORRAL_NODE_TOKEN (empty by default: the agent then says it does not push, and runs)."""
    c = compose(env)
    worker, svc = c["services"]["ray-worker"], c["services"]["corral"]
    calls = run_command(worker, tmp_path, {"corral": "exit 0"}, {"HOSTNAME": "3f2a9c0d1b7e"})
    api = urlsplit(option(calls[0], "--api"))
    assert api.scheme == "http" and api.hostname in c["services"] and api.hostname == "corral"
    serve = shlex.split(svc["command"][-1].split("exec ", 1)[1])
    assert api.port == int(option(serve, "--port")) and api.path in ("", "/")
    assert environment(worker)["CORRAL_TOKEN"] == env.get("CORRAL_NODE_TOKEN", "")
    dry = subprocess.run([str(CORRAL_CLI), *calls[0][1:], "--dry-run", "--state-dir", str(tmp_path / "agent"),
                          "--mps-control", "none"], capture_output=True, text=True, timeout=60, check=True,
                         env={**os.environ, "CORRAL_TOKEN": environment(worker)["CORRAL_TOKEN"]})
    said = "health: pushed to http://corral:8080/api/v1/nodes/3f2a9c0d1b7e/health" if env else \
        "health: not pushed to http://corral:8080: CORRAL_TOKEN is not set"
    assert said in dry.stdout, dry.stdout


def test_worker_node_names_differ_per_replica(tmp_path: Path) -> None:
    worker = compose({})["services"]["ray-worker"]
    names = set()
    for hostname in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        (tmp_path / hostname).mkdir()
        calls = run_command(worker, tmp_path / hostname, {"corral": "exit 0"}, {"HOSTNAME": hostname})
        names.add(option(calls[0], "--name"))
    assert names == {"aaaaaaaaaaaa", "bbbbbbbbbbbb"}


def test_worker_reserves_the_hosts_nvidia_gpus() -> None:
    devices = RAW["services"]["ray-worker"]["deploy"]["resources"]["reservations"]["devices"]
    nvidia = [d for d in devices if d.get("driver") == "nvidia"]
    assert nvidia and "gpu" in nvidia[0]["capabilities"]
    assert nvidia[0].get("count") == "all" or int(nvidia[0]["count"]) >= 1


def test_service_joins_ray_waits_for_workers_then_serves(env: dict[str, str], tmp_path: Path) -> None:
    c = compose(env)
    svc = c["services"]["corral"]
    # `python` (the wait for Corral nodes) says "not yet" once, then "ready"; `sleep` returns at once.
    stubs = {
        "ray": "exit 0",
        "python": 'if [ -e "$STUB_DIR/.waited" ]; then exit 0; fi; touch "$STUB_DIR/.waited"; exit 1',
        "sleep": "exit 0",
        "corral": "exit 0",
    }
    calls = run_command(svc, tmp_path, stubs, {"HOSTNAME": "c0ffee000000"})
    assert [call[0] for call in calls] == ["ray", "python", "sleep", "python", "corral"], calls
    ray_start, wait, _, _, serve = calls
    address = head_address(c)
    # 1. a Ray node of its own (a driver attaches to its host's raylet) that offers nothing for jobs
    assert ray_start[1] == "start" and option(ray_start, "--address") == address
    assert "--head" not in ray_start and "--block" not in ray_start
    assert option(ray_start, "--num-gpus") == "0" and json.loads(option(ray_start, "--resources")) == {}
    # 2. the wait: python -c CODE ADDRESS MIN_NODES
    assert wait[1] == "-c" and wait[3:] == [address, environment(svc)["CORRAL_MIN_NODES"]]
    assert int(wait[4]) == int(env.get("CORRAL_MIN_NODES", 1))
    compile(wait[2], "<corral wait>", "exec")
    # 3. the service, on the same head
    assert serve[1] == "serve"
    assert option(serve, "--ray-address") == address
    assert option(serve, "--host") == "0.0.0.0"
    assert option(serve, "--preset") in PRESETS
    assert option(serve, "--preset") == env.get("CORRAL_PRESET", "dgx-a100")
    # The service checks the preset against the workers' GPU count before it starts: it must be told that count.
    gpus = environment(c["services"]["ray-worker"])["CORRAL_GPUS_PER_NODE"]
    assert option(serve, "--gpus-per-node") == gpus
    node_type(option(serve, "--preset"), int(gpus))
    # The fabric the contention model sees: the setting, or none (one uplink per rack), which the service accepts.
    assert option(serve, "--fabric") == env.get("CORRAL_FABRIC", "none")
    check_fabric(option(serve, "--fabric"))
    published = [str(p) if not isinstance(p, dict) else f"{p.get('published')}:{p['target']}" for p in svc["ports"]]
    assert f"8080:{option(serve, '--port')}" in published


def _wait_code(tmp_path: Path) -> str:
    svc = compose({})["services"]["corral"]
    stubs = {"ray": "exit 0", "python": "exit 0", "corral": "exit 0", "sleep": "exit 0"}
    return next(call[2] for call in run_command(svc, tmp_path, stubs, {}) if call[0] == "python")


@pytest.mark.parametrize(("alive", "dead", "wanted", "ready"), [(0, 0, 1, False), (1, 2, 2, False), (2, 0, 2, True),
                                                                 (3, 0, 2, True)])
def test_the_wait_counts_alive_corral_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            alive: int, dead: int, wanted: int, ready: bool) -> None:
    """The service's wait loop, run in-process against a stand-in for the Ray cluster it would ask."""
    from scheduler.live import ray_backend

    class FakeBackend:
        shut = False

        def nodes(self) -> list[ray_backend.NodeInfo]:
            return [ray_backend.NodeInfo(f"n{i}", 8, i < alive, f"id{i}", "10.0.0.1") for i in range(alive + dead)]

        def shutdown(self) -> None:
            FakeBackend.shut = True

    seen = []
    monkeypatch.setattr(ray_backend.RayBackend, "connect", classmethod(lambda cls, a: seen.append(a) or FakeBackend()))
    monkeypatch.setattr(sys, "argv", ["-c", "ray-head:6379", str(wanted)])
    with pytest.raises(SystemExit) as exit_:
        # The compose file's own code, as `python -c` would run it, with Ray stood in for.
        exec(compile(_wait_code(tmp_path), "<corral wait>", "exec"), {"__name__": "__main__"})  # noqa: S102
    assert (not exit_.value.code) is ready
    assert seen == ["ray-head:6379"] and FakeBackend.shut


RAY_SERVICES = ("ray-head", "ray-worker", "corral", "corral-standby")


def test_every_ray_process_takes_the_token_made_before_any_starts(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Token authentication on every Ray node (issue 25): each service that runs Ray has RAY_AUTH_MODE=token and reads
    the token from the shared volume, where the one-shot `ray-token` service makes it before the Ray head starts
    (everything else waits on the head). Its command is the real `corral ray-token`, run here: a 0600 file."""
    c = compose({})
    token = c["services"]["ray-token"]
    for name in RAY_SERVICES:
        svc = c["services"][name]
        env = environment(svc)
        assert env["RAY_AUTH_MODE"] == "token", name
        folder = str(Path(env["RAY_AUTH_TOKEN_PATH"]).parent)
        assert mounts(svc).get(folder) == mounts(token)[folder], f"{name} does not mount the token's volume"
    assert c["services"]["ray-head"]["depends_on"]["ray-token"]["condition"] == "service_completed_successfully"
    for name in ("ray-worker", "corral"):
        assert c["services"][name]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert token["command"][:2] == ["corral", "ray-token"]

    from click.testing import CliRunner

    from scheduler.cli.commands import main

    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    result = CliRunner().invoke(main, token["command"][1:])
    assert result.exit_code == 0, result.output
    made = Path(result.output.strip())
    assert made == tmp_path / "ray-token" and made.stat().st_mode & 0o777 == 0o600
    first = made.read_text()
    assert CliRunner().invoke(main, ["ray-token", "--print"]).output.strip() == first  # kept, not remade


def test_corral_home_is_one_volume_at_one_path_for_service_and_workers() -> None:
    c = compose({})
    homes = {}
    for name in ("corral", "ray-worker"):
        svc = c["services"][name]
        home = environment(svc)["CORRAL_HOME"]
        source = mounts(svc).get(home)
        assert source, f"{name}: CORRAL_HOME {home} is not a mounted volume"
        homes[name] = (home, source)
    assert homes["corral"] == homes["ray-worker"]
    home, source = homes["corral"]
    assert source in (RAW.get("volumes") or {}), "CORRAL_HOME must be a named volume"
    assert home == dockerfile_env()["CORRAL_HOME"] and home in dockerfile_args("VOLUME")[0]


# -- Dockerfile ------------------------------------------------------------------------------------------------------

def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    assert not buf, "the Dockerfile ends inside a continued line"
    return out


def dockerfile_args(instruction: str) -> list[str]:
    return [args for word, args in dockerfile() if word == instruction]


def dockerfile_env() -> dict[str, str]:
    env = {}
    for args in dockerfile_args("ENV"):
        env.update(dict(tok.split("=", 1) for tok in shlex.split(args)))
    return env


def test_dockerfile_base_and_torch_pin() -> None:
    assert dockerfile()[0] == ("FROM", "python:3.11-slim")
    runs = dockerfile_args("RUN")
    torch_at = [i for i, r in enumerate(runs) if "download.pytorch.org/whl/cpu" in r and "torch==" in r]
    install_at = [i for i, r in enumerate(runs) if re.search(r"pip install \.(\s|$)", r)]
    assert torch_at and install_at and torch_at[0] < install_at[0], "the CPU torch must be installed before the project"
    pin = re.search(r"torch==([\w.]+)", runs[torch_at[0]])
    assert pin and pin[1] == "2.13.0"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"torch=={pin[1]}" in [d.replace(" ", "") for d in project], "the image and pyproject.toml pin one torch"


def test_dockerfile_copies_every_package_and_the_shipped_agents() -> None:
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    roots = find.get("where", ["."])

    def folder(package: str) -> str:  # the top folder holding it: `corral` lives in scheduler/sdk
        return next(Path(r, package).parts[0] for r in roots if (ROOT / r / package).is_dir())

    packages = {folder(p.rstrip("*").rstrip(".")) for p in find["include"]}
    assert "scheduler" in packages and len(packages) >= 4
    copied = {Path(tok).name for args in dockerfile_args("COPY") for tok in shlex.split(args)[:-1]}
    assert packages | {"pyproject.toml", "README.md"} <= copied
    # rl:default is the policy of a new store: its agent must be in the image whether or not the wheel ships it.
    install = next(r for r in dockerfile_args("RUN") if "pip install ." in r)
    assert "agents/zoo/*.zip" in install and "make_policy(\"rl:default\")" in install


def test_dockerignore_keeps_the_build_context_small_but_complete() -> None:
    patterns = [p.strip() for p in DOCKERIGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")]
    assert {".git", ".venv"} <= set(patterns)
    for args in dockerfile_args("COPY"):
        for src in shlex.split(args)[:-1]:
            assert not any(fnmatch(src, p) for p in patterns), f".dockerignore drops {src}, which the Dockerfile copies"
            assert (ROOT / src).exists(), f"the Dockerfile copies {src}, which does not exist"


def test_dockerfile_runs_corral_serve_as_a_non_root_user_on_8080() -> None:
    assert "8080" in " ".join(dockerfile_args("EXPOSE")).split()
    cmd = json.loads(dockerfile_args("CMD")[-1])
    entry = dockerfile_args("ENTRYPOINT")
    argv = (json.loads(entry[-1]) if entry else []) + cmd
    assert argv[:2] == ["corral", "serve"]
    assert option(argv, "--host") == "0.0.0.0" and option(argv, "--port") == "8080"
    user = dockerfile_args("USER")
    assert user and user[-1] not in ("root", "0")
    assert dockerfile_env()["CORRAL_HOME"] == "/var/lib/corral"


def test_dockerfile_healthcheck_asks_the_health_endpoint_with_python() -> None:
    check = dockerfile_args("HEALTHCHECK")
    assert len(check) == 1
    exec_form = json.loads(check[0][check[0].index("CMD") + 3:])
    assert exec_form[:2] == ["python", "-c"]
    code = exec_form[2]
    compile(code, "<healthcheck>", "exec")
    urls = re.findall(r"""['"](https?://[^'"]+)['"]""", code)
    assert len(urls) == 1 and "urllib" in code
    url = urlsplit(urls[0])
    assert (url.hostname, url.port, url.path) == ("127.0.0.1", 8080, "/api/v1/health")
    assert "curl" not in check[0]


@pytest.mark.slow
def test_the_image_gets_every_data_file_the_packages_read(tmp_path: Path) -> None:
    """`pip install .` installs only what the wheel carries: every non-Python file of the packages must be in it, or
    be one the Dockerfile copies in itself (the shipped agents)."""
    pytest.importorskip("setuptools")
    src = tmp_path / "src"  # a copy, as the Dockerfile copies: an in-tree build would leave build/ in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for pkg in ("scheduler", "policies", "agents", "web"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(src)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("corral-*.whl")
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    ignored = [p.strip() for p in DOCKERIGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")]
    install = next(r for r in dockerfile_args("RUN") if "pip install ." in r)
    copied_by_dockerfile = re.findall(r"/tmp/corral-src/(agents/zoo/\*\.\w+)", install)
    missing = []
    for pkg in ("scheduler", "policies", "agents", "web"):
        for f in (ROOT / pkg).rglob("*"):
            rel = f.relative_to(ROOT).as_posix()
            if (not f.is_file() or f.suffix in (".py", ".pyc", ".md") or "__pycache__" in rel
                    or any(fnmatch(rel, p) for p in ignored)):
                continue
            if rel not in in_wheel and not any(fnmatch(rel, p) for p in copied_by_dockerfile):
                missing.append(rel)
    assert not missing, f"not in the image: {missing}"

"""Job environments without Ray: what a submission may ask for (each refusal a 422 naming its field, nothing stored),
how it is stored, shown and resubmitted, and the node's side of a build (a virtual environment from a wheel folder
alone, cached; the operator's named environments; a container image where the node has no runtime)."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from test_api import API, Env, field_errors, make_env
from test_environments_ray import write_wheel

from scheduler.live import environments as envs
from scheduler.live.node import environments as node
from scheduler.live.store import Store

COMMAND = {"name": "train", "kind": "command", "model": "Transformer-XL", "num_gpus": 1, "entrypoint": "python t.py"}


def zipped(files: dict[str, str], links: tuple[str, ...] = ()) -> str:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture
def api(store: Store, corral_home: Path) -> Env:
    return make_env(store, CORRAL_COMMAND_JOBS="everyone")


@pytest.mark.parametrize(("field", "environment", "words"), [
    ("pip", {"pip": ["https://evil.example/x.whl"]}, "not a requirement"),
    ("pip", {"pip": ["pkg @ https://evil.example/x.whl"]}, "not a URL"),
    ("pip", {"pip": ["--index-url=https://evil.example"]}, "not an option"),
    ("pip", {"pip": ["-e ."]}, "not an option"),
    ("pip", {"pip": ["./local/pkg"]}, "not a requirement"),
    ("pip", {"pip": ["numpy; import os"]}, "not a requirement"),
    ("pip", {"pip": ["x"] * 65}, "64"),
    ("pip", {"pip": ['numpy; python_version == "${DATABASE_URL}"']}, "variable"),
    ("pip", {"pip": "numpy"}, "list"),
    ("venv", {"venv": "/opt/venvs/torch"}, "never a path"),
    ("venv", {"venv": "../torch"}, "never a path"),
    ("image", {"image": "--privileged"}, "not an image reference"),
    ("image", {"image": "Docker.io/Library/Python"}, "not an image reference"),
    ("image", {"image": "python:3.11 --rm"}, "not an image reference"),
    ("working_dir", {"working_dir": "not base64!"}, "base64"),
    ("working_dir", {"working_dir": base64.b64encode(b"plain text").decode()}, "zip"),
    ("working_dir", {"working_dir": zipped({"../escape.py": "x"})}, "relative paths"),
    ("working_dir", {"working_dir": zipped({"/etc/cron.d/x": "x"})}, "relative paths"),
    ("working_dir", {"working_dir": zipped({"a.py": "x"}, links=("passwd",))}, "no links"),
    ("venv", {"pip": ["numpy"], "venv": "torch"}, "not both"),
    ("image", {"image": "python:3.11", "pip": ["numpy"]}, "own Python"),
    ("nope", {"nope": 1}, "Unknown field"),
])
def test_a_bad_environment_is_refused_naming_its_field(api: Env, field: str, environment: dict[str, Any],
                                                       words: str) -> None:
    resp = api.post("/jobs", COMMAND | {"environment": environment})
    assert resp.status_code == 422, resp.json
    errors = field_errors(resp)["environment"]
    assert field in errors and words in json.dumps(errors[field]), errors
    assert api.job_count() == 0


def test_an_environment_goes_with_command_jobs_only_and_one_working_directory(api: Env) -> None:
    emulated = {"name": "e", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 10}
    resp = api.post("/jobs", emulated | {"environment": {"pip": ["numpy"]}})
    assert resp.status_code == 422 and "environment" in field_errors(resp), resp.json
    resp = api.post("/jobs", COMMAND | {"workdir": "/data", "environment": {"working_dir": zipped({"a": "b"})}})
    assert resp.status_code == 422 and "workdir" in field_errors(resp), resp.json
    resp = api.post("/jobs", COMMAND | {"array": {"count": 1000}, "environment": {"working_dir": zipped({"a": "b"})}})
    assert resp.status_code == 422 and "wheel" in json.dumps(field_errors(resp)["environment"]), resp.json
    assert api.job_count() == 0


def test_an_archive_over_the_limit_is_refused_and_a_body_over_the_servers_is_413(api: Env) -> None:
    big = base64.b64encode(os.urandom(envs.MAX_ARCHIVE_BYTES + 1)).decode()
    assert envs.MAX_ARCHIVE_BYTES * 1.4 < 1024 * 1024  # (under the body limit, so the field's own check answers)
    resp = api.post("/jobs", COMMAND | {"environment": {"working_dir": big}})
    assert resp.status_code == 422 and "KiB" in json.dumps(field_errors(resp)["environment"]["working_dir"])
    huge = base64.b64encode(os.urandom(2 * 1024 * 1024)).decode()
    assert api.post("/jobs", COMMAND | {"environment": {"working_dir": huge}}).status_code == 413
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros", b"\0" * (envs.MAX_UNZIPPED_BYTES + 1))
    resp = api.post("/jobs", COMMAND | {"environment": {"working_dir": base64.b64encode(bomb.getvalue()).decode()}})
    assert resp.status_code == 422 and "unpacked" in json.dumps(field_errors(resp)), resp.json
    assert api.job_count() == 0


def test_an_environment_is_stored_shown_by_its_archives_hash_and_resubmitted(api: Env) -> None:
    archive = zipped({"train.py": "print(1)\n"})
    environment = {"pip": ["numpy>=1.26", "Requests[socks]==2.31"], "working_dir": archive}
    resp = api.post("/jobs", COMMAND | {"environment": environment})
    assert resp.status_code == 201, resp.json
    shown = resp.json["environment"]
    data = base64.b64decode(archive)
    assert shown["pip"] == ["numpy>=1.26", "Requests[socks]==2.31"]
    assert shown["working_dir"] == {"bytes": len(data), "sha256": __import__("hashlib").sha256(data).hexdigest()}
    again = api.post(f"/jobs/{resp.json['id']}/resubmit", {})
    assert again.status_code == 201, again.json
    assert again.json["environment"] == shown
    listed = api.get("/jobs").json["jobs"]
    assert all("environment" not in j for j in listed)  # a large field: not in the list
    # What the controller hands Ray: the archive as a file under the home, named by its hash, never by the user.
    runtime = envs.runtime_env(envs.check(environment))
    assert runtime is not None and runtime[envs.PLUGIN_FIELD] == {"pip": environment["pip"]}
    path = Path(runtime["working_dir"])
    assert path.name == f"{shown['working_dir']['sha256']}.zip" and path.read_bytes() == data


def test_corral_submit_zips_a_folder_following_no_link(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print(1)\n")
    (tmp_path / "src" / "secret").symlink_to("/etc/passwd")
    encoded = envs.archive_folder(tmp_path / "src")
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(encoded))) as zf:
        assert zf.namelist() == ["train.py"]
    with pytest.raises(envs.EnvRefused, match="not a folder"):
        envs.archive_folder(tmp_path / "missing")


# ---- the node's side -----------------------------------------------------------------------------------------------


def test_the_node_builds_an_environment_from_its_wheel_folder_once(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    write_wheel(wheels, "corral_probe", "0.1", "ANSWER = 7\n")
    monkeypatch.setenv(node.WHEELS_VAR, str(wheels))
    config = {"pip": ["corral_probe"]}
    got = node.prepare(config, tmp_path / "envs")
    python = Path(got[node.BIN_VAR]) / "python"
    out = subprocess.run([str(python), "-c", "import corral_probe; print(corral_probe.ANSWER)"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "7"
    built = json.loads(got[node.BUILD_VAR])
    assert built["cached"] is False and built["build_s"] > 0
    assert "--no-index" in Path(got[node.LOG_VAR]).read_text()
    again = node.prepare(config, tmp_path / "envs")
    assert json.loads(again[node.BUILD_VAR])["cached"] is True and again[node.BIN_VAR] == got[node.BIN_VAR]
    # In the worker's process: the job's PATH starts at the environment's programs, and its log tells the build.
    monkeypatch.setenv(node.BIN_VAR, got[node.BIN_VAR])
    monkeypatch.setenv(node.BUILD_VAR, got[node.BUILD_VAR])
    monkeypatch.setenv(node.LOG_VAR, got[node.LOG_VAR])
    assert node.job_vars({"PATH": "/usr/bin"})["PATH"] == f"{got[node.BIN_VAR]}:/usr/bin"
    assert "Successfully installed corral_probe-0.1" in node.preparation_log()


def test_rays_cache_deletes_the_least_recently_used_environment_no_worker_uses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Built environments live in Ray's own cache of the plugin's URIs (`CorralEnvPlugin.get_uris`, `delete_uri`):
    over its size, it deletes the least recently used one that no worker uses; an operator's venv has no URI; a URI
    that is not an environment's hash deletes nothing."""
    from ray._private.runtime_env.uri_cache import URICache

    from scheduler.live.ray_backend import CorralEnvPlugin

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    write_wheel(wheels, "corral_probe", "0.1", "ANSWER = 7\n")
    monkeypatch.setenv(node.WHEELS_VAR, str(wheels))
    monkeypatch.setenv(node.ENVS_VAR, str(tmp_path / "envs"))
    plugin = CorralEnvPlugin()
    configs = [{"pip": ["corral_probe"]}, {"pip": ["corral_probe==0.1"]}]
    uris = [plugin.get_uris({envs.PLUGIN_FIELD: c})[0] for c in configs]
    assert all(u.startswith(node.URI_SCHEME) for u in uris) and uris[0] != uris[1]
    assert plugin.get_uris({envs.PLUGIN_FIELD: {"venv": "torch"}}) == []
    assert plugin.get_uris({"working_dir": "/tmp/x.zip"}) == []  # Ray asks every plugin of every environment
    folders = [node.env_dir(c) for c in configs]
    sizes = []
    for config in configs:
        node.prepare(config)
        sizes.append(node.folder_bytes(node.env_dir(config)))
    assert all(size > 0 for size in sizes)
    cache = URICache(plugin.delete_uri, max_total_size_bytes=sizes[0] + sizes[1] // 2)
    cache.add(uris[0], sizes[0])  # used by a worker: kept even when the cache is over its size
    cache.add(uris[1], sizes[1])
    assert folders[0].exists() and folders[1].exists()
    cache.mark_unused(uris[0])  # its worker ended: the least recently used unused one goes
    assert not folders[0].exists() and folders[1].exists() and uris[0] not in cache
    assert node.remove(node.URI_SCHEME + "../../wheels") == 0 and wheels.exists()
    assert node.remove(uris[1]) == sizes[1] and not folders[1].exists()


def test_a_failed_build_is_not_cached_and_says_what_pip_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "wheels").mkdir()
    monkeypatch.setenv(node.WHEELS_VAR, str(tmp_path / "wheels"))
    with pytest.raises(node.PrepareError, match="No matching distribution found for corral-absent"):
        node.prepare({"pip": ["corral-absent"]}, tmp_path / "envs")
    assert not list((tmp_path / "envs").glob("*/build.json"))


def test_a_named_venv_is_the_operators_and_an_unknown_one_is_refused_naming_those_known(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "torch"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    monkeypatch.setenv(node.VENVS_VAR, f"torch={venv}, jax={tmp_path / 'jax'}")
    assert node.prepare({"venv": "torch"})[node.BIN_VAR] == str(venv / "bin")
    with pytest.raises(node.PrepareError, match=r"no virtual environment 'tf' on this node \(CORRAL_VENVS names: jax, "
                                                r"torch\)"):
        node.prepare({"venv": "tf"})
    with pytest.raises(node.PrepareError, match="jax/bin/python is missing"):
        node.prepare({"venv": "jax"})


def test_an_image_without_a_container_runtime_is_refused_naming_both(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman, no apptainer
    with pytest.raises(node.PrepareError, match="no container runtime .*neither podman nor apptainer"):
        node.prepare({"image": "docker.io/library/python:3.11"}, tmp_path / "envs")


def test_a_containerised_command_passes_variables_by_name_and_keeps_the_hosts_path_out() -> None:
    argv = node.container_argv("podman", "python:3.11", "python t.py", "/w", ["PATH", "RANK", "SECRET"])
    assert argv[:3] == ["podman", "run", "--rm"] and argv[-3:] == ["/bin/sh", "-c", "python t.py"]
    assert "RANK" in argv and "SECRET" in argv and "PATH" not in argv
    assert not any("=" in a and a.split("=")[0] in ("RANK", "SECRET") for a in argv)  # values stay off the line
    apptainer = node.container_argv("apptainer", "/envs/h/image.sif", "python t.py", "/w", ["RANK"])
    assert apptainer[:2] == ["apptainer", "exec"] and "/envs/h/image.sif" in apptainer


def test_a_job_submitted_through_the_api_reaches_its_workers_as_a_runtime_env(api: Env) -> None:
    from scheduler.live.store.models import Job

    resp = api.post("/jobs", COMMAND | {"environment": {"venv": "torch"}})
    assert resp.status_code == 201, resp.json
    with api.store.session() as s:
        row = s.get(Job, resp.json["id"])
        assert row is not None and row.environment == {"venv": "torch"}
    assert envs.runtime_env(row.environment) == {envs.PLUGIN_FIELD: {"venv": "torch"},
                                                 "config": {"setup_timeout_seconds": 3600}}
    assert api.get(f"/jobs/{resp.json['id']}").json["environment"] == {"venv": "torch"}
    assert API  # (the API's prefix: the same as test_api's)


def test_corral_show_writes_an_environment_on_one_line() -> None:
    from scheduler.cli.client_text import environment_text

    shown = envs.summary(envs.check({"pip": ["numpy>=1.26"], "working_dir": zipped({"a.py": "x" * 2048})}))
    text = environment_text(shown)
    assert text is not None and text.startswith("pip numpy>=1.26; working dir ")
    assert shown is not None and shown["working_dir"]["sha256"][:12] in text
    assert environment_text(None) is None and environment_text({"venv": "torch"}) == "venv torch"


def test_migration_0024_adds_the_environment_column_and_takes_it_away(db_url: str) -> None:
    import sqlalchemy as sa
    from alembic import command

    from scheduler.live.store.db import alembic_config, make_engine

    Store.open(db_url).close()
    engine = make_engine(db_url)

    def columns() -> set[str]:
        return {c["name"] for c in sa.inspect(engine).get_columns("jobs")}

    try:
        assert "environment" in columns()
        command.downgrade(alembic_config(db_url), "0023")
        assert "environment" not in columns() and "env" in columns()
        command.upgrade(alembic_config(db_url), "head")
        assert "environment" in columns()
    finally:
        engine.dispose()


def test_corral_submit_puts_its_environment_options_into_the_field_over_the_files(tmp_path: Path) -> None:
    from scheduler.cli.submit_commands import _environment

    (tmp_path / "train.py").write_text("print(1)\n")
    spec: dict[str, Any] = {"environment": {"venv": "from-the-file"}}
    flags = {"pip": ("numpy>=1.26", "scipy"), "venv": None, "image": None, "working_dir": tmp_path, "name": "x"}
    _environment(spec, flags)
    assert set(spec["environment"]) == {"venv", "pip", "working_dir"} and flags == {"name": "x"}
    assert spec["environment"]["pip"] == ["numpy>=1.26", "scipy"]
    assert envs.check({"working_dir": spec["environment"]["working_dir"]})  # what the server takes
    empty: dict[str, Any] = {}
    _environment(empty, {"pip": (), "venv": None, "image": None, "working_dir": None})
    assert empty == {}


# ---- the controller ------------------------------------------------------------------------------------------------


def test_the_controller_waits_out_a_preparation_and_records_it_apart_from_the_run(store: Store,
                                                                                   corral_home: Path) -> None:
    """A run being prepared is past the start timeout (0 s here) yet not taken back; once its workers start, a
    `prepared` event says how long it took, and the run counts from the workers' start."""
    from conftest import StartingBackend
    from sqlalchemy import select

    from policies import make_policy
    from scheduler.live.cluster import build_live_cluster
    from scheduler.live.controller import Controller
    from scheduler.live.runs import JobStatus
    from scheduler.live.store import queries
    from scheduler.live.store.models import Job, JobEvent

    class Preparing(StartingBackend):
        ready = False

        def poll(self) -> list[JobStatus]:
            out = super().poll()
            for st in out:
                if not self.ready:
                    st.phase, st.started_at = "starting", [None] * len(st.started_at)
                else:
                    st.prepared_s = 42.0
            return out

    backend = Preparing(["n0"], 8)
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [8]), ["n0"], make_policy,
                     default_policy="fifo", preset="dgx-a100", start_timeout_s=0.0)
    ctl.recover()
    with store.session() as s:
        job_id = queries.submit(s, queries.ensure_user(s, "alice", admin=True), {
            "kind": "command", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 60.0, "name": "j",
            "entrypoint": "python -c 'import numpy'", "environment": {"pip": ["numpy"]}})[0].id
    for _ in range(3):
        ctl.step()
    assert not backend.stopped  # past the start timeout, but preparing: not taken back
    assert backend.launches[job_id].runtime_env == envs.runtime_env({"pip": ["numpy"]})
    with store.session() as s:
        row = s.get(Job, job_id)
        assert row is not None and row.state == "running" and row.started_at is None and row.attempt == 1
    backend.ready = True
    ctl.step()
    with store.session() as s:
        row = s.get(Job, job_id)
        assert row is not None and row.started_at is not None
        events = {e.kind: e for e in s.scalars(select(JobEvent).where(JobEvent.job_id == job_id))}
    assert events["prepared"].data["preparing_s"] == 42.0 and events["prepared"].at == row.started_at
    assert events["started"].at == row.started_at >= events["placed"].at

"""A job's environment end to end: submitted through the API of `corral serve` to a Ray cluster whose nodes load
Corral's runtime-environment plugin and have an operator's wheel folder (as `corral node start` sets them up). The
job imports the package from its own `python` in the folder it uploaded; its preparation is a `prepared` event and
the opening of its log, and its run time counts from its workers' start, not from its placement."""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import HTTP_TIMEOUT_S, drop_postgres_schema, postgres_schema_url, virtual_ray_cluster
from test_environments_ray import write_wheel, zipped
from test_live import Service
from tiers import tiered

from scheduler.live import environments
from scheduler.live.job_files import secure_home
from scheduler.live.store import Store, queries

pytest.importorskip("ray")


@pytest.fixture(scope="module")
@tiered("ray")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # The nodes' environment, as an operator gives `corral node start`: their home, their wheels, the plugin.
    nodes_home = Path(tempfile.mkdtemp(prefix="corral-live-envs-"))
    wheels = nodes_home / "wheels"
    wheels.mkdir()
    write_wheel(wheels, "corral_live_probe", "0.3", "ANSWER = 'from the wheel folder'\n")
    saved = {k: os.environ.get(k) for k in ("CORRAL_HOME", "CORRAL_WHEELS", environments.PLUGINS_VAR)}
    os.environ.update({"CORRAL_HOME": str(nodes_home / "home"), "CORRAL_WHEELS": str(wheels),
                       **environments.plugin_env()})
    secure_home(nodes_home / "home")
    try:
        with virtual_ray_cluster(tmp_path_factory.mktemp("ray"), {"node0": 2}) as c:
            yield c
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
@tiered("postgres", param="postgresql")
def live(request: pytest.FixtureRequest, ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Service]:
    home = tmp_path_factory.mktemp(f"live-envs-{request.param}")
    schema = f"corral_live_envs_{os.getpid()}"
    db_url = f"sqlite:///{home / 'corral.db'}" if request.param == "sqlite" else postgres_schema_url(schema)
    store = Store.open(db_url)
    with store.session() as s:
        token = queries.create_token(s, "alice", admin=True)  # (an admin's command jobs run as the server's user)
    store.close()
    service = Service(ray_cluster.address, db_url, home, token=token)
    service.start()
    yield service
    service.stop()
    if request.param == "postgresql":
        drop_postgres_schema(schema)


def test_a_submitted_job_runs_in_its_environment_prepared_apart_from_its_run(live: Service) -> None:
    archive = base64.b64encode(zipped({"conf.txt": "epochs=3\n"})).decode()
    job = live.submit(name="probe", kind="command", model="ResNet-50-bs64", num_gpus=1,
                      entrypoint="python -c 'import corral_live_probe as p; print(p.ANSWER)' && cat conf.txt",
                      environment={"pip": ["corral_live_probe==0.3"], "working_dir": archive})
    assert job["environment"]["pip"] == ["corral_live_probe==0.3"] and job["environment"]["working_dir"]["bytes"] > 0
    (done,) = live.wait_terminal([job["id"]], timeout=240)
    logs = requests.get(f"{live.url}/jobs/{job['id']}/logs", headers=live.headers(), timeout=HTTP_TIMEOUT_S)
    assert done["state"] == "succeeded", (done, logs.text, live.log_tail())
    assert "from the wheel folder" in logs.text and "epochs=3" in logs.text, logs.text
    assert "[corral] preparing: environment" in logs.text and "--no-index" in logs.text, logs.text
    events = {e["kind"]: e for e in live.job(job["id"])["events"]}
    placed, prepared, started = events["placed"], events["prepared"], events["started"]
    assert prepared["data"]["preparing_s"] > 0 and prepared["at"] == started["at"]
    assert "not run time" in prepared["message"]
    # Its run time is its workers', from their start: the preparation before it is not counted.
    assert done["run_s"] <= done["finished_at"] - started["at"] + 1e-6
    assert started["at"] - placed["at"] >= prepared["data"]["preparing_s"] - 1.0

"""Issue 49's live resize end to end: a real `corral serve` (marginal-gain, a 1 s resize interval) on a Ray cluster
of one virtual 4-GPU node, on SQLite and on PostgreSQL. An elastic command job (2-4 GPUs) starts at 2 beside a rigid
job, grows to 4 when that one ends, and shrinks back to 2 to start a short job: each run resumes from the checkpoint
the one before wrote, at its new size, with no restart spent and nothing counted as a preemption."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from conftest import virtual_ray_cluster, wait_until
from test_live_lifecycle import EMULATED, Service, serving
from tiers import tiered

ray = pytest.importorskip("ray")

# The job: counts steps in a state file in its checkpoint folder, one run after another. Each run notes its size (the
# GPUs Corral gave its one worker) and the step it resumed from; on SIGTERM (a resize) it saves and exits; its third
# run ends the job after 20 steps. A copy of the state goes to $REPORT for the test to read.
JOB = r"""
import json, os, signal, sys, time
from pathlib import Path
stop = False
def term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, term)
path = Path(os.environ["CORRAL_CHECKPOINT_DIR"]) / "state.json"
state = json.loads(path.read_text()) if path.exists() else {"steps": 0, "runs": []}
run = {"gpus": len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")), "from": state["steps"],
       "attempt": int(os.environ["CORRAL_ATTEMPT"]), "world": int(os.environ["WORLD_SIZE"])}
state["runs"].append(run)
def save(targets):
    for target in targets:
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, target)
save([Path(os.environ["REPORT"])])  # the run is under way, its SIGTERM handled: the test may resize it now
while not stop and not (len(state["runs"]) >= 3 and state["steps"] - run["from"] >= 20):
    time.sleep(0.05)
    state["steps"] += 1
run["to"] = state["steps"]
save([path, Path(os.environ["REPORT"])])
"""


@pytest.fixture(scope="module")
@tiered("ray")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with virtual_ray_cluster(tmp_path_factory.mktemp("ray"), {"node0": 4}) as c:
        yield c


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
@tiered("postgres", param="postgresql")
def service(request: pytest.FixtureRequest, ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Service]:
    with serving(request.param, "elastic", ray_cluster.address, tmp_path_factory.mktemp(f"elastic-{request.param}"),
                 ["--policy", "marginal-gain", "--resize-interval", "1"]) as svc:
        yield svc


def test_an_elastic_job_grows_and_shrinks_resuming_each_time(service: Service, tmp_path: Path) -> None:
    script, report = tmp_path / "job.py", tmp_path / "report.json"
    script.write_text(JOB)
    # The blocker outlasts the elastic job's first workers' start on a loaded machine: it must run at 2 first.
    blocker = service.submit(name="blocker", num_gpus=2, duration_s=20, **EMULATED)
    wait_until("the blocker to run", lambda: service.state(blocker) == "running", timeout=60)
    elastic = service.submit(name="elastic", kind="command", model="ResNet-50-bs64", num_gpus=2, min_gpus=2,
                             max_gpus=4, resize_pause_s=1, entrypoint=f"{sys.executable} {script}",
                             env={"REPORT": str(report)})

    wait_until("the elastic job's workers to start at 2 GPUs", lambda: service.events(elastic, "started"), timeout=60)
    assert service.state(blocker) == "running", "the blocker ended before the elastic job's first run started"

    def resized(n: int) -> list[dict[str, Any]] | None:
        events = service.events(elastic, "resized")
        return events if len(events) >= n else None

    try:
        grown = wait_until("the elastic job to grow", lambda: resized(1), timeout=120)[0]
    except AssertionError:
        j = service.job(elastic)
        raise AssertionError(f"the elastic job did not grow: {j['state']} on {len(j['allocation'])} GPUs, events "
                             f"{[(e['kind'], e['message']) for e in j['events']]}, the blocker "
                             f"{service.state(blocker)}\n{service.server.log_tail()}") from None
    assert grown["data"]["from_gpus"] == 2 and len(grown["data"]["gpus"]) == 4, grown
    wait_until("the grown run's workers to start",
               lambda: any(e["data"].get("attempt") == grown["data"]["attempt"]
                           for e in service.events(elastic, "started")), timeout=60)

    def grown_run_under_way() -> bool:  # its program handles SIGTERM: a shrink now stops it with a checkpoint
        try:
            runs = json.loads(report.read_text())["runs"]
        except (OSError, ValueError):  # not written yet (os.replace makes a read see all of it or none)
            return False
        return any(r["attempt"] == grown["data"]["attempt"] for r in runs)

    # On a loaded machine the grown worker's Python can take seconds to start: a shrink before it handles SIGTERM
    # would kill it with no checkpoint, and its run would be lost from the record.
    wait_until("the grown run's program to be under way", grown_run_under_way, timeout=60)
    short = service.submit(name="short", num_gpus=2, duration_s=3, **EMULATED)
    shrunk = wait_until("the elastic job to shrink", lambda: resized(2), timeout=120)[1]
    assert shrunk["data"]["from_gpus"] == 4 and len(shrunk["data"]["gpus"]) == 2, shrunk
    assert "to start short" in shrunk["message"] and "no restart spent" in shrunk["message"]

    done, short_job, _ = service.finished([elastic, short, blocker], timeout=180)
    assert done["state"] == "succeeded" and short_job["state"] == "succeeded"
    assert done["restarts"] == 0 and done["preemptions"] == 0 and done["retries"] == 0
    assert short_job["first_started_at"] >= shrunk["at"]
    state = json.loads(report.read_text())
    runs = state["runs"]
    assert [r["gpus"] for r in runs[:3]] == [2, 4, 2] and all(r["world"] == 1 for r in runs), runs
    assert runs[0]["from"] == 0 and all(b["from"] == a["to"] for a, b in pairwise(runs)), runs  # resumed
    assert [r["attempt"] for r in runs] == sorted({r["attempt"] for r in runs}), "a new attempt for every size"
    # What a resize cost: from the decision to the new size's workers up (the checkpoint included).
    started = {e["data"]["attempt"]: e["at"] for e in service.events(elastic, "started")}
    waits = [started[e["data"]["attempt"]] - e["at"] for e in service.events(elastic, "resized")
             if e["data"]["attempt"] in started]
    print(f"resize to running at the new size: {', '.join(f'{w:.2f} s' for w in waits)}")
    assert waits, "no resized run's workers started"

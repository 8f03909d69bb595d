"""Every failed job says why (issue 10 item 4): whichever controller path fails it (a job the cluster can never hold
that reached the store without the API's check, a run whose workers exit non-zero without an error message, a run
lost with no restart left), the API returns a non-empty `error` for it.

The controller runs here against a scripted in-memory backend (the `Backend` protocol), not Ray: these are the
controller's bookkeeping paths, and the workers' real behaviour is covered by test_live/test_controller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import InMemoryBackend

from policies import make_policy
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.runs import JobStatus
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import JobState
from tests.test_api import make_env

NAMES = ["n0", "n1"]
GPUS = 4


class ScriptedBackend(InMemoryBackend):
    """Launches nothing; each run ends the next poll with the outcome its job's name asks for ('fail' exits 3 with
    no message, 'lose' is lost), the way a worker that dies before writing anything looks to the controller."""

    def __init__(self) -> None:
        super().__init__(NAMES, GPUS)
        self.outcome: dict[int, str] = {}  # job id -> the phase its run reports: failed or lost

    def poll(self) -> list[JobStatus]:
        out = []
        for job_id, launch in list(self.launches.items()):
            ranks = len(launch.ranks)
            phase = self.outcome[job_id]
            codes: list[int | None] = [3] * ranks if phase == "failed" else [None] * ranks
            out.append(JobStatus(job_id=job_id, attempt=launch.attempt, phase=phase, started_at=[1.0] * ranks,
                                 ended_at=[2.0] * ranks, exit_codes=codes, done_s=0.0, error=""))
        return out


def test_every_failed_job_carries_a_reason(store: Store, corral_home: Path) -> None:
    env = make_env(store)
    backend = ScriptedBackend()
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [GPUS] * len(NAMES)), NAMES, make_policy,
                     default_policy="fifo", tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    base: dict[str, Any] = {"kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 60.0}
    with store.session() as s:
        alice = q.ensure_user(s, "alice")
        too_big, _ = q.submit(s, alice, base | {"name": "too-big", "num_gpus": 64})  # past the API's check
        fails, _ = q.submit(s, alice, base | {"name": "fails"})
        lost, _ = q.submit(s, alice, base | {"name": "lost", "restart_policy": "never"})
        ids = {"too-big": too_big.id, "fails": fails.id, "lost": lost.id}
    backend.outcome = {ids["fails"]: "failed", ids["lost"]: "lost"}
    for _ in range(5):
        ctl.step()
    resp = env.get("/jobs?state=failed")
    assert resp.status_code == 200
    failed = {j["name"]: j for j in resp.json["jobs"]}
    assert set(failed) == set(ids), {j["name"]: j["state"] for j in env.get("/jobs").json["jobs"]}
    for name, job in failed.items():
        assert job["state"] == JobState.FAILED
        assert (job["error"] or "").strip(), (name, job)
        shown = env.get(f"/jobs/{job['id']}").json
        assert shown["error"] == job["error"]
    assert "exit code 3" in failed["fails"]["error"]
    assert "64" in failed["too-big"]["error"]

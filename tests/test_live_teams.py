"""Issue 13's acceptance, end to end: a real `corral serve` on a Ray cluster of two virtual 4-GPU nodes, teams A and
B with a quota of 4 GPUs each. A fills the cluster by borrowing; B's jobs arrive and B gets its quota back by
reclaim: placed within a pass, all started before any of A's runs ends; A's reclaimed jobs wait with a reason naming the
team's standing, then resume from their checkpoints; every job succeeds exactly once. On SQLite and PostgreSQL."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import (
    HTTP_TIMEOUT_S,
    RAY_WORKERS_S,
    ServeProcess,
    drop_postgres_schema,
    postgres_schema_url,
    virtual_ray_cluster,
    wait_until,
)
from sqlalchemy import func, select
from tiers import tiered

from scheduler.live.job_files import store_dir
from scheduler.live.store import Store, queries
from scheduler.live.store.models import JobEvent, Team

ray = pytest.importorskip("ray")

NODES, GPUS = 2, 4
TICK_S = 0.2
# A's jobs still run when B's arrive, and long after B's have started: on a loaded machine Ray took 18-21 s to start
# B's workers once the reclaim had placed them (at 25 s, A's kept runs ended first). B's finish well before A's.
A_WORK_S, B_WORK_S = 45.0, 4.0


@pytest.fixture(scope="module")
@tiered("ray")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with virtual_ray_cluster(tmp_path_factory.mktemp("ray"), {f"node{i}": GPUS for i in range(NODES)}) as c:
        yield c


class Client:
    def __init__(self, api: str, token: str) -> None:
        self.api, self.headers = api, {"Authorization": f"Bearer {token}"}

    def submit(self, **fields: Any) -> int:
        r = requests.post(f"{self.api}/jobs", json=fields, headers=self.headers, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        r = requests.get(f"{self.api}/jobs/{job_id}", headers=self.headers, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200, r.text
        return dict(r.json())


@pytest.fixture(params=["sqlite", "postgresql"])
@tiered("postgres", param="postgresql")
def service(request: pytest.FixtureRequest, ray_cluster: Any, tmp_path: Path) -> Iterator[Service]:
    home = tmp_path / "home"
    home.mkdir()
    schema = f"corral_teams_{os.getpid()}"
    db_url = f"sqlite:///{home / 'corral.db'}" if request.param == "sqlite" else postgres_schema_url(schema)
    store = Store.open(db_url)
    with store.session() as s:
        now = time.time()
        s.add_all([Team(name=n, quota_gpus=4.0, borrow_limit_gpus=None, created_at=now, updated_at=now)
                   for n in ("A", "B")])
        s.flush()
        tokens = {"A": queries.create_token(s, "ann", team="A"), "B": queries.create_token(s, "ben", team="B")}
    store.close()
    env = {**os.environ, "DATABASE_URL": db_url, "CORRAL_HOME": str(home)}
    server = ServeProcess(home, ["--ray-address", ray_cluster.address, "--tick", str(TICK_S), "--policy", "tiresias"],
                          env)
    try:
        yield Service(server, home, db_url, {t: Client(server.api, tok) for t, tok in tokens.items()})
    finally:
        server.stop()
        if request.param == "postgresql":
            drop_postgres_schema(schema)


@dataclass
class Service:
    server: ServeProcess
    home: Path
    db_url: str
    client: dict[str, Client]  # by team: each sees its own user's jobs


def started(job: dict[str, Any]) -> bool:
    return job["state"] == "running" and job.get("started_at") is not None


def test_owner_reclaims_its_quota_and_every_job_succeeds_once(service: Service) -> None:
    a, b = service.client["A"], service.client["B"]
    a_ids = [a.submit(name=f"a{i}", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=A_WORK_S)
             for i in range(8)]
    wait_until("A's 8 jobs to run, 4 of them on borrowed GPUs", lambda: all(started(a.job(i)) for i in a_ids),
               timeout=RAY_WORKERS_S)
    assert {a.job(i)["team"] for i in a_ids} == {"A"}

    # Some work for the checkpoints to hold (the progress a controller reads is at most a few seconds old).
    wait_until("A's runs to do 8% of their work", lambda: all((a.job(i)["progress"] or 0) >= 0.08 for i in a_ids),
               timeout=60)
    submitted = time.time()
    b_ids = [b.submit(name=f"b{i}", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=B_WORK_S)
             for i in range(4)]

    # A's reclaimed jobs, read while they wait: the reclaim preempts 4 of A's runs at the pass that places B's jobs
    # (so they count one preemption each) and the pass after says why they wait. They run again once B's first job
    # ends, so they are read now, not after all of B's have started: on a loaded machine Ray took 21 s to start B's
    # workers, and CI once saw the reclaimed jobs rerun and finish before that last start.
    def reclaimed_waiting() -> list[dict[str, Any]] | None:
        jobs = [a.job(i) for i in a_ids]
        waiting = [j for j in jobs if j["state"] == "pending" and j["preemptions"] == 1 and j["pending_reason"]]
        return waiting if len(waiting) == 4 else None

    waiting = wait_until("4 of A's jobs to be reclaimed and say why they wait", reclaimed_waiting, timeout=60)
    for j in waiting:
        assert re.search(r"team A holds 4 GPUs, all of its 4-GPU quota; the job needs 1, beyond its quota",
                         j["pending_reason"]), j["pending_reason"]
    reclaimed = {j["id"] for j in waiting}

    # Each has started (`first_started_at`), not all running at one look: on a loaded machine B's 4-s jobs start
    # seconds apart, and the first may end before the last starts (CI saw all four never running at once).
    wait_until("B's 4 jobs to start", lambda: all(b.job(i)["first_started_at"] is not None for i in b_ids),
               timeout=60)
    # The reclaim is the controller's decision, taken at the next pass: B's jobs are placed (A's borrowed runs
    # preempted) within a tick and a pass's work. Their workers then start once A's have checkpointed and let their
    # GPUs go (within the stop's grace period) and Ray has started B's: on a loaded machine that takes seconds more,
    # but far less than A's runs have left (without the reclaim, B would wait for them).
    # (Read once, and the first start: a 4 s job of B's may have ended since, which clears `started_at`.)
    b_jobs = [b.job(i) for i in b_ids]
    placed = max(next(e["at"] for e in j["events"] if e["kind"] == "placed") for j in b_jobs) - submitted
    assert placed <= TICK_S + 3.0, f"B's 4 jobs were placed {placed:.2f} s after submitting"
    b_all_started = max(j["first_started_at"] for j in b_jobs)
    # Only the borrowed runs were taken: the other 4 of A's were never preempted, each reclaim said so in its event.
    a_jobs = [a.job(i) for i in a_ids]
    assert sorted(j["preemptions"] for j in a_jobs) == [0] * 4 + [1] * 4, [j["preemptions"] for j in a_jobs]
    for j in a_jobs:
        if j["id"] in reclaimed:
            said = [e["message"] for e in j["events"] if e["kind"] == "preempted"]
            assert len(said) == 1 and re.match(r"reclaimed for team B \(job b\d\): team A was borrowing", said[0]), said

    owner = {i: a for i in a_ids} | {i: b for i in b_ids}
    wait_until("every job to finish", lambda: all(owner[i].job(i)["state"] in {"succeeded", "failed", "cancelled"}
                                                  for i in owner), timeout=240)
    for i, c in owner.items():
        job = c.job(i)
        assert job["state"] == "succeeded", (i, job["state"], job.get("error"), service.server.log_tail())
        assert job["attempt"] == (2 if i in reclaimed else 1), (i, job["attempt"])
    store = Store.open(service.db_url, migrate=False)
    try:
        logs = store_dir(store.id, service.home) / "logs"
        with store.session() as s:
            done = {job_id: n for job_id, n in s.execute(
                select(JobEvent.job_id, func.count()).where(JobEvent.kind == "succeeded").group_by(JobEvent.job_id))}
    finally:
        store.close()
    assert done == dict.fromkeys(owner, 1)
    # B ran by the reclaim, not by waiting for A: every one of B's jobs started before the first of A's unreclaimed
    # runs ended (without the reclaim each would have waited for one). A wall-clock bound on B's starts failed on a
    # loaded machine, where Ray took 21 s to start B's workers after the reclaim had placed them in time.
    kept_ends = [next(e["at"] for e in a.job(i)["events"] if e["kind"] == "succeeded")
                 for i in a_ids if i not in reclaimed]
    assert b_all_started < min(kept_ends), (b_all_started - submitted, min(kept_ends) - submitted)
    # The reclaimed jobs' second runs resumed from the checkpoints their first runs wrote when stopped.
    for i in reclaimed:
        first = (logs / f"job-{i}" / "attempt-1" / "rank-0.log").read_text()
        second = (logs / f"job-{i}" / "attempt-2" / "rank-0.log").read_text()
        stopped = float(re.search(r"stopped at ([\d.]+)%", first).group(1))  # type: ignore[union-attr]
        left = float(re.search(r"([\d.]+) s of isolated work left", second).group(1))  # type: ignore[union-attr]
        assert stopped > 5.0 and left == pytest.approx(A_WORK_S * (1 - stopped / 100), abs=0.3), (i, stopped, left)

"""End to end: `corral serve` processes on a real local Ray cluster of virtual nodes with virtual GPUs.

The Ray cluster is started once for the module, by the test process, so that it outlives the service: a service
killed with SIGKILL and restarted must find its workers still running and adopt them. Every test runs against the
embedded SQLite store and against PostgreSQL (skipped with the reason when PostgreSQL is not reachable).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import (
    CORRAL,
    HTTP_TIMEOUT_S,
    RAY_WORKERS_S,
    ServeProcess,
    drop_postgres_schema,
    postgres_schema_url,
    virtual_ray_cluster,
    wait_until,
)
from sqlalchemy import select
from tiers import tiered

from scheduler.core.workloads import catalog
from scheduler.live.runs import NAMESPACE
from scheduler.live.store import Store, queries
from scheduler.live.store.models import Allocation, Gpu, JobEvent
from scheduler.live.store.models import Job as JobRow

ray = pytest.importorskip("ray")

NODES, GPUS = 4, 4  # 16 virtual GPUs: small enough that 20 jobs queue, share GPUs and span nodes
TERMINAL = {"succeeded", "failed", "cancelled"}


@pytest.fixture(scope="module")
@tiered("ray")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with virtual_ray_cluster(tmp_path_factory.mktemp("ray"), {f"node{i}": GPUS for i in range(NODES)}) as c:
        yield c


@dataclass
class Service:
    """One `corral serve --ray-address` process and what a test needs to talk to it."""

    address: str
    db_url: str
    home: Path
    token: str = ""
    other_token: str = ""
    server: ServeProcess | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.api

    def start(self) -> None:
        env = {**os.environ, "DATABASE_URL": self.db_url, "CORRAL_HOME": str(self.home)}
        self.server = ServeProcess(self.home, ["--ray-address", self.address, "--tick", "0.2"], env)

    def log_tail(self) -> str:
        assert self.server is not None
        return self.server.log_tail()

    def kill(self) -> None:
        assert self.server is not None
        self.server.kill()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}

    def submit(self, **fields: Any) -> dict[str, Any]:
        r = requests.post(f"{self.url}/jobs", json=fields, headers=self.headers(), timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 201, r.text
        return r.json()

    def job(self, job_id: int) -> dict[str, Any]:
        r = requests.get(f"{self.url}/jobs/{job_id}", headers=self.headers(), timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200, r.text
        return r.json()

    # 300 s: each rank is a Ray actor, a process of its own, and on a loaded 2-core machine CI saw 8-GPU gangs (8
    # processes to start) still running after 150 s while the other 18 of 20 short jobs had ended.
    def wait_terminal(self, ids: list[int], timeout: float = 300.0) -> list[dict[str, Any]]:
        def done() -> list[dict[str, Any]] | None:
            jobs = [self.job(i) for i in ids]
            return jobs if all(j["state"] in TERMINAL for j in jobs) else None

        try:
            return wait_until(f"jobs {ids} to finish", done, timeout=timeout, every=0.5)  # type: ignore[no-any-return]
        except AssertionError:
            states = {i: self.job(i)["state"] for i in ids}
            raise AssertionError(f"jobs not finished: {states}\n{self.log_tail()}") from None


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
@tiered("postgres", param="postgresql")
def live(request: pytest.FixtureRequest, ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Service]:
    home = tmp_path_factory.mktemp(f"live-{request.param}")
    schema = f"corral_live_{os.getpid()}"
    db_url = f"sqlite:///{home / 'corral.db'}" if request.param == "sqlite" else postgres_schema_url(schema)
    store = Store.open(db_url)
    with store.session() as s:
        # alice is an admin: her command jobs may run as the server's own OS user, which a non-admin's may not
        # unless the server maps users to OS accounts (issue 25; tests/test_job_isolation.py runs those as root)
        token = queries.create_token(s, "alice", admin=True)
        other = queries.create_token(s, "bob")
    store.close()
    service = Service(ray_cluster.address, db_url, home, token=token, other_token=other)
    service.start()
    yield service
    service.stop()
    if request.param == "postgresql":
        drop_postgres_schema(schema)


def corral_actors() -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == NAMESPACE and a["name"].startswith("corral-")]


def check_no_overcommit(db_url: str) -> None:
    """At no instant does a GPU hold shares summing over 1 or tenants whose memory exceeds it, whether counted by the
    controller's allocations or by when the workers really ran."""
    store = Store.open(db_url, migrate=False)
    try:
        with store.session() as s:
            mem = {g.index: g.mem_gb for g in s.scalars(select(Gpu))}
            jobs = {j.id: j for j in s.scalars(select(JobRow))}
            allocs = s.scalars(select(Allocation)).all()
            intervals = [(a.gpu, a.share, catalog()[jobs[a.job_id].model].mem_gb, a.allocated_at,
                          a.released_at if a.released_at is not None else float("inf")) for a in allocs]
            # The workers' own start and end times, from the events the controller recorded.
            ran = []
            for job in jobs.values():
                starts = [e for e in job.events if e.kind == "started"]
                ends = [e for e in job.events if e.kind in TERMINAL | {"preempted", "lost"}]
                for st, end in zip(starts, ends, strict=False):
                    by_rank = st.data.get("ranks_started_at") or []
                    for a in allocs:
                        if a.job_id == job.id and a.attempt == st.data.get("attempt", a.attempt):
                            t0 = by_rank[a.rank] if a.rank < len(by_rank) and by_rank[a.rank] else st.at
                            ran.append((a.gpu, a.share, 0.0, t0, end.at))
    finally:
        store.close()
    assert intervals, "no allocations were recorded"
    for name, spans in (("allocations", intervals), ("worker run times", ran)):
        for gpu, _, _, t, _ in spans:
            live_here = [x for x in spans if x[0] == gpu and x[3] <= t < x[4]]
            share = sum(x[1] for x in live_here)
            used = sum(x[2] for x in live_here)
            assert share <= 1.0 + 1e-6, f"{name}: GPU {gpu} holds shares {share:.3f} at {t}"
            assert used <= mem[gpu] + 1e-6, f"{name}: GPU {gpu} holds {used:.1f} GB of {mem[gpu]:.0f} at {t}"


# ---- the tests --------------------------------------------------------------------------------------------------

MIX = [  # (GPUs, isolated seconds): fractional, whole, and gangs wider than one 4-GPU node
    (0.5, 2.0), (0.25, 3.0), (1, 2.0), (2, 3.0), (8, 3.0), (0.5, 2.5), (4, 2.0), (1, 3.5), (0.25, 2.0), (6, 2.5),
    (2, 2.0), (0.5, 3.0), (1, 2.5), (8, 2.0), (0.25, 2.5), (3, 2.0), (1, 2.0), (0.5, 2.0), (2, 2.5), (1, 3.0),
]


def test_twenty_emulated_jobs_all_succeed_without_overcommit(live: Service) -> None:
    models = ["ResNet-50-bs64", "Transformer-XL", "LM-bs20", "ResNet-18-bs128", "MoE"]
    ids = [live.submit(name=f"mix-{i}", kind="emulated", model=models[i % len(models)], num_gpus=g, duration_s=d)["id"]
           for i, (g, d) in enumerate(MIX)]
    jobs = live.wait_terminal(ids)
    assert [j["state"] for j in jobs] == ["succeeded"] * len(MIX), [(j["id"], j["state"], j["error"]) for j in jobs]
    check_no_overcommit(live.db_url)

    store = Store.open(live.db_url, migrate=False)
    with store.session() as s:
        rows = s.scalars(select(JobRow).where(JobRow.id.in_(ids))).all()
        allocs = s.scalars(select(Allocation).where(Allocation.job_id.in_(ids))).all()
        for row in rows:
            mine = [a for a in allocs if a.job_id == row.id]
            assert len(mine) == max(1, int(row.num_gpus)) * row.attempt, f"job {row.id}: {len(mine)} allocations"
            assert all(a.released_at is not None for a in mine)
            starts = [e for e in row.events if e.kind == "started"]
            assert starts, f"job {row.id} has no started event"
            ranks = [t for t in starts[-1].data["ranks_started_at"] if t is not None]
            # A gang starts together: its workers are told to go in the same instant, once all of them are up.
            assert max(ranks) - min(ranks) < 1.0, f"job {row.id}: ranks started {max(ranks) - min(ranks):.2f} s apart"
        spans = {r.id: {a.node for a in allocs if a.job_id == r.id} for r in rows}
    store.close()
    assert any(len(nodes) > 1 for nodes in spans.values()), "no job spanned nodes"
    assert any(a.share < 1 for a in allocs), "no fractional placement"
    wait_until("finished jobs' workers to be reaped", lambda: not corral_actors(), timeout=RAY_WORKERS_S)

    # The controller's own metrics, scraped from the service: at least one placement per job, each timed.
    from prometheus_client.parser import text_string_to_metric_families

    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(requests.get(f"{live.url.removesuffix('/api/v1')}/metrics",
                                                                    timeout=HTTP_TIMEOUT_S).text) for s in f.samples}
    assert samples[("corral_decisions_total", (("action", "place"),))] >= len(MIX)
    assert samples[("corral_decision_latency_seconds_count", ())] >= 1
    assert samples[("corral_observed_slowdown_count", ())] >= len(MIX)


def test_command_job_sees_its_gpus_share_and_rank(live: Service) -> None:
    dump = "env | grep -E '^(CUDA_|MASTER_|WORLD_SIZE|RANK|LOCAL_WORLD_SIZE|CORRAL_)' | sort"
    frac = live.submit(name="env-frac", kind="command", model="ResNet-50-bs64", num_gpus=0.5, entrypoint=dump,
                       env={"MY_FLAG": "1"})
    gang = live.submit(name="env-gang", kind="command", model="ResNet-50-bs64", num_gpus=8, entrypoint=dump)
    bad = live.submit(name="exit-3", kind="command", model="ResNet-50-bs64", num_gpus=1, entrypoint="echo oops; exit 3")
    frac, gang, bad = live.wait_terminal([frac["id"], gang["id"], bad["id"]])
    assert (frac["state"], gang["state"]) == ("succeeded", "succeeded"), (frac, gang)
    assert frac["observed_slowdown"] is None  # a command job's duration is an estimate, not its isolated time
    assert bad["state"] == "failed" and bad["exit_code"] == 3 and bad["error"] == "rank 0 exited with code 3"

    def env_of(job: dict[str, Any]) -> list[dict[str, str]]:
        r = requests.get(f"{live.url}/jobs/{job['id']}/logs", headers=live.headers(), timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200, r.text
        out = []
        for rank in sorted(r.json()["logs"], key=lambda x: x["rank"]):
            out.append(dict(line.split("=", 1) for line in rank["text"].splitlines() if "=" in line))
        return out

    (env,) = env_of(frac)
    placed = next(e for e in live.job(frac["id"])["events"] if e["kind"] == "placed")
    assert env["CUDA_VISIBLE_DEVICES"] == str(placed["data"]["gpus"][0] % GPUS)  # its GPU's index on its node
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={int(80 * 0.5 * 1024)}M"  # half an A100-80GB
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("0", "1", "1")
    assert env["CORRAL_JOB_ID"] == str(frac["id"]) and env["CORRAL_CHECKPOINT_DIR"].endswith(f"job-{frac['id']}")
    assert env["MASTER_ADDR"] and int(env["MASTER_PORT"]) > 0

    ranks = env_of(gang)
    assert len(ranks) == 2, "8 GPUs on 4-GPU nodes: one worker per node"
    assert [e["RANK"] for e in ranks] == ["0", "1"] and {e["WORLD_SIZE"] for e in ranks} == {"2"}
    assert all(e["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" for e in ranks)
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in ranks}) == 1
    assert all("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in e for e in ranks), "whole GPUs are not MPS clients"
    assert len({e["CORRAL_NODE"] for e in ranks}) == 2


def test_cancel_stops_a_running_job(live: Service) -> None:
    job = live.submit(name="long", kind="emulated", model="ResNet-50-bs64", num_gpus=2, duration_s=300)
    wait_until("the long job to start", lambda: live.job(job["id"])["started_at"], timeout=60)
    assert any(n.startswith(f"corral-{job['id']}-") for n in corral_actors())
    r = requests.post(f"{live.url}/jobs/{job['id']}/cancel", headers=live.headers(), timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 200, r.text
    (done,) = live.wait_terminal([job["id"]], timeout=30)
    assert done["state"] == "cancelled" and done["allocation"] == []
    wait_until("its workers to be gone",
               lambda: not any(n.startswith(f"corral-{job['id']}-") for n in corral_actors()), timeout=30)


def test_http_errors(live: Service) -> None:
    assert requests.get(f"{live.url}/jobs", timeout=HTTP_TIMEOUT_S).status_code == 401
    assert requests.get(f"{live.url}/jobs", headers=live.headers("nope"), timeout=HTTP_TIMEOUT_S).status_code == 401
    r = requests.post(f"{live.url}/jobs", headers=live.headers(), timeout=HTTP_TIMEOUT_S,
                      json={"name": "x", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1.5,
                            "duration_s": 5})
    assert r.status_code == 422 and "num_gpus" in r.text
    mine = live.submit(name="mine", kind="emulated", model="ResNet-50-bs64", num_gpus=0.25, duration_s=1)
    assert requests.get(f"{live.url}/jobs/{mine['id']}", headers=live.headers(live.other_token),
                        timeout=HTTP_TIMEOUT_S).status_code == 403
    assert requests.get(f"{live.url}/jobs/999999", headers=live.headers(), timeout=HTTP_TIMEOUT_S).status_code == 404
    live.wait_terminal([mine["id"]])


def test_sigkill_restart_loses_and_duplicates_nothing(live: Service) -> None:
    shape = [(1, 6.0), (2, 7.0), (0.5, 6.0), (8, 6.0), (4, 8.0), (0.25, 6.0), (1, 7.0), (2, 6.0), (8, 5.0), (1, 6.0)]
    ids = [live.submit(name=f"crash-{i}", kind="emulated", model="ResNet-50-bs64", num_gpus=g, duration_s=d)["id"]
           for i, (g, d) in enumerate(shape)]
    running = wait_until("some jobs to run", lambda: [
        j["id"] for j in map(live.job, ids) if j["state"] == "running" and j["started_at"]], timeout=60)
    live.kill()
    # The workers are detached actors: they run on while the controller is dead.
    assert any(n.startswith(f"corral-{running[0]}-") for n in corral_actors())
    time.sleep(1.0)
    live.start()
    jobs = live.wait_terminal(ids)
    assert [j["state"] for j in jobs] == ["succeeded"] * len(ids), [(j["id"], j["state"], j["error"]) for j in jobs]

    store = Store.open(live.db_url, migrate=False)
    with store.session() as s:
        assert s.scalar(select(JobRow.id).where(JobRow.name.like("crash-%")).order_by(JobRow.id.desc())) == ids[-1]
        assert len(s.scalars(select(JobRow).where(JobRow.name.like("crash-%"))).all()) == len(ids)
        for job_id in ids:
            kinds = [e.kind for e in s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))]
            assert kinds.count("succeeded") == 1, (job_id, kinds)
            assert kinds.count("submitted") == 1, (job_id, kinds)
            if job_id in running:
                # Adopted, not re-run: one placement, one start, and its first run is the one that finished.
                assert "adopted" in kinds and "lost" not in kinds, (job_id, kinds)
                assert kinds.count("started") == 1 and kinds.count("placed") == 1, (job_id, kinds)
    store.close()
    check_no_overcommit(live.db_url)
    wait_until("finished jobs' workers to be reaped", lambda: not corral_actors(), timeout=RAY_WORKERS_S)


def test_retraining_and_calibration_run_on_the_recorded_history(live: Service, tmp_path: Path) -> None:
    """`corral calibrate` and `corral train --from-history` on the history the tests above recorded through the real
    service (its store, while it runs)."""
    env = {**os.environ, "CORRAL_HOME": str(live.home)}
    report = tmp_path / "calibration.json"
    calib = subprocess.run([str(CORRAL), "calibrate", "--db", live.db_url, "--json", str(report)], env=env,
                           capture_output=True, text=True, timeout=300, check=False)
    assert calib.returncode == 0, calib.stderr + calib.stdout
    data = report.read_text()
    assert "observed" in data and "predicted" in data
    out = tmp_path / "from-history.zip"
    train = subprocess.run([str(CORRAL), "train", "--from-history", "--db", live.db_url, "--out", str(out),
                            "--timesteps", "512", "--n-envs", "1", "--window", "10", "--eval-window", "10",
                            "--eval-scenarios", "1", "--eval-freq", "512", "--no-progress"],
                           env=env, capture_output=True, text=True, timeout=600, check=False)
    assert train.returncode == 0, train.stderr[-3000:] + train.stdout[-3000:]
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["trained_from_history"]["jobs"] >= len(MIX)

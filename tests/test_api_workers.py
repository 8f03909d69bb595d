"""`corral serve --api-workers 2`: two API processes beside the one controller's, on one port and one store.

Several clients submit at once, each job also retried with its client token; every submission is accepted (on SQLite
the writers of three processes wait for the lock, none fails), every accepted job is stored once with one
`submitted` event, and the one controller places and runs each once. A `kill -9` of `corral serve` takes its API
processes with it: nothing answers on the port after. Against SQLite and PostgreSQL, on a real Ray cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import (
    HTTP_TIMEOUT_S,
    ServeProcess,
    drop_postgres_schema,
    postgres_schema_url,
    virtual_ray_cluster,
    wait_until,
)
from sqlalchemy import func, select
from tiers import tiered

from scheduler.live import doorbell
from scheduler.live.store import Store, queries
from scheduler.live.store.models import Allocation, ApiToken, JobEvent
from scheduler.live.store.models import Job as JobRow

pytest.importorskip("ray")

CLIENTS, PER_CLIENT = 6, 8
WORKERS = 2


@pytest.fixture(scope="module")
@tiered("ray")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with virtual_ray_cluster(tmp_path_factory.mktemp("ray"), {"node0": 4, "node1": 4}) as c:
        yield c


@pytest.fixture(params=["sqlite", "postgresql"])
@tiered("postgres", param="postgresql")
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    schema = f"corral_api_workers_{os.getpid()}"
    yield f"sqlite:///{tmp_path / 'corral.db'}" if request.param == "sqlite" else postgres_schema_url(schema)
    if request.param == "postgresql":
        drop_postgres_schema(schema)


def api_processes(pid: int) -> list[int]:
    """The API processes `corral serve` (`pid`) started: its children running scheduler.cli.api_workers."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid and b"scheduler.cli.api_workers" in cmdline:
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_two_api_processes_store_each_job_once_and_one_controller_places_it(
        ray_cluster: Any, db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    with store.session(write=True) as s:
        token = queries.create_token(s, "alice", admin=True)
    env = {**os.environ, "DATABASE_URL": db_url, "CORRAL_HOME": str(tmp_path)}
    server = ServeProcess(tmp_path, ["--ray-address", ray_cluster.address, "--tick", "0.2", "--api-workers",
                                     str(WORKERS)], env)
    try:
        workers = api_processes(server.proc.pid)
        assert len(workers) == WORKERS, (workers, server.log_tail())
        headers = {"Authorization": f"Bearer {token}"}
        accepted: dict[str, int] = {}
        problems: list[str] = []
        lock = threading.Lock()

        def client(k: int) -> None:
            with requests.Session() as http:  # keep-alive: each client's connection stays with one API process
                for i in range(PER_CLIENT):
                    name = f"w-{k}-{i}"
                    body = {"name": name, "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 0.5,
                            "duration_s": 1.0, "client_token": name}
                    first = http.post(f"{server.api}/jobs", json=body, headers=headers, timeout=60)
                    # The retry goes on a new connection, so it may reach the other API process.
                    again = requests.post(f"{server.api}/jobs", json=body, headers=headers, timeout=60)
                    with lock:
                        if first.status_code != 201 or again.status_code != 200:
                            problems.append(f"{name}: {first.status_code} {first.text[:200]} / "
                                            f"{again.status_code} {again.text[:200]}")
                        elif again.json()["id"] != first.json()["id"]:
                            problems.append(f"{name}: the retry answered job {again.json()['id']}, not "
                                            f"{first.json()['id']}")
                        else:
                            accepted[name] = first.json()["id"]

        threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not problems, problems
        assert len(accepted) == CLIENTS * PER_CLIENT
        assert len(set(accepted.values())) == len(accepted)

        def all_succeeded() -> bool:
            with store.session() as s:
                states = s.execute(select(JobRow.state, func.count()).group_by(JobRow.state)).all()
            return {str(getattr(state, "value", state)): n for state, n in states} == {"succeeded": len(accepted)}

        wait_until("every accepted job to succeed", all_succeeded, timeout=180, every=0.5)
        # One controller answers for every API process: /health names the same leader whichever answers.
        leaders = {requests.get(f"{server.api}/health", timeout=HTTP_TIMEOUT_S).json()["leader"] for _ in range(8)}
        assert len(leaders) == 1, leaders
        with store.session() as s:
            rows = s.execute(select(JobRow.id, JobRow.name)).all()
            assert sorted(r.name for r in rows) == sorted(accepted), "a job stored twice, or one not accepted"
            kinds: dict[int, list[str]] = {}
            for job_id, kind in s.execute(select(JobEvent.job_id, JobEvent.kind)):
                kinds.setdefault(job_id, []).append(kind)
            for job_id in accepted.values():
                assert kinds[job_id].count("submitted") == 1, (job_id, kinds[job_id])
                assert kinds[job_id].count("placed") == 1, (job_id, kinds[job_id])
                assert kinds[job_id].count("succeeded") == 1, (job_id, kinds[job_id])
            placed = s.execute(select(Allocation.job_id, func.count(func.distinct(Allocation.attempt)))
                               .group_by(Allocation.job_id)).all()
            assert all(n == 1 for _, n in placed) and len(placed) == len(accepted)

        # kill -9 of the controller's process: its API processes go with it, and the port answers no more.
        server.kill()
        wait_until("the API processes to exit with corral serve", lambda: not any(alive(p) for p in workers),
                   timeout=30)
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{server.api}/health", timeout=5)
    finally:
        server.stop()
        store.close()


WRITER = """
import sys
from scheduler.live.store import Store, queries
store = Store.open(sys.argv[1], migrate=False)
for i in range(int(sys.argv[3])):
    with store.session(write=True) as s:
        queries.create_token(s, f"{sys.argv[2]}-{i % 3}")
"""


@pytest.mark.slow  # four processes, each importing Corral: seconds
def test_writers_in_several_processes_wait_for_sqlite_rather_than_fail(tmp_path: Path) -> None:
    """What the API processes do on SQLite: write sessions from several processes at once, each reading (the user)
    before writing (the token). Every one waits its turn (the writers' flock, then the busy timeout); none fails."""
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    Store.open(url).close()
    root = str(Path(__file__).resolve().parents[1])
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, url, f"p{k}", "40"], env={**os.environ,
                              "PYTHONPATH": root}, stderr=subprocess.PIPE) for k in range(4)]
    errors = [p.communicate(timeout=300)[1].decode()[-2000:] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    store = Store.open(url, migrate=False)
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(ApiToken)) == 4 * 40
    store.close()
    assert (tmp_path / "corral.db-writers").stat().st_mode & 0o077 == 0



def test_the_doorbell_is_rung_off_the_request_and_coalesced(pg_store: Store) -> None:
    """`Ringer`: a burst of rings (a burst of submissions) reaches the listening replicas, as a few NOTIFYs."""
    heard = threading.Event()
    listener = doorbell.Listener(pg_store, heard.set).start()
    ringer = doorbell.Ringer(pg_store)
    try:
        for _ in range(500):
            ringer.ring()
        wait_until("a replica to hear the doorbell", heard.is_set, timeout=30)
    finally:
        ringer.stop()
        listener.stop()
    assert 1 <= ringer.sent < 500

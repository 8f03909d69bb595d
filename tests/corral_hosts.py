"""Corral across real network hosts on one machine, for the multi-host tests and `benchmarks/multihost.py`: a head
host runs Ray's head and `corral serve` (SQLite), each worker host `corral node start`, every one a network namespace
of its own (`netns.Hosts`). Needs root; callers check `netns.hosts_or_skip()` (tests) or say why (benchmarks)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from conftest import HTTP_TIMEOUT_S, wait_until
from netns import Host, Hosts

from scheduler.live import ray_auth
from scheduler.live.job_files import store_dir
from scheduler.live.store import Store, queries

BIN = Path(sys.executable).parent
GPUS = 2  # virtual GPUs per worker host
RAY_PORT, API_PORT = 6379, 8080
# Ray's defaults take about 30 s to call a silent node dead (a check every 3 s, 5 misses, 10 s timeouts); these make
# it about 3 s, so a partition is noticed within the test's bounds. Set on the head, whose GCS runs the checks.
HEALTH = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
          "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3"}


@dataclass
class Cluster:
    hosts: Hosts
    head: Host
    api: str
    headers: dict[str, str]
    home: Path
    ray_tmp: Path
    env: dict[str, str]
    files: Path  # the store's job files (logs, checkpoints) under the home

    def worker(self, name: str) -> Host:
        """A new host running `corral node start` (GPUS virtual GPUs) joined to the head, in the foreground."""
        host = self.hosts.add(name)
        self.join(host)
        return host

    def join(self, host: Host) -> None:
        tmp = self.ray_tmp / host.name
        shutil.rmtree(tmp, ignore_errors=True)  # a host that rejoins starts a fresh Ray node
        self.hosts.popen(host, [str(BIN / "corral"), "node", "start", "--address", f"{self.head.address}:{RAY_PORT}",
                                "--name", host.name, "--gpus", str(GPUS), "--preset", "dgx-a100", "--mps-control", "none",
                                "--state-dir", str(tmp / "agent"), "--",
                                "--node-ip-address", host.address, "--num-cpus", "2", "--temp-dir", str(tmp)],
                         self.env, f"{host.name}.log")

    def submit(self, **fields: Any) -> int:
        body = {"kind": "emulated", "model": "ResNet-50-bs64"} | fields
        r = requests.post(f"{self.api}/jobs", json=body, headers=self.headers, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def cancel(self, job_id: int) -> None:
        r = requests.post(f"{self.api}/jobs/{job_id}/cancel", headers=self.headers, timeout=HTTP_TIMEOUT_S)
        assert r.status_code in (200, 202), r.text

    def job(self, job_id: int) -> dict[str, Any]:
        r = requests.get(f"{self.api}/jobs/{job_id}", headers=self.headers, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def events(self, job_id: int) -> list[dict[str, Any]]:
        return list(self.job(job_id)["events"])

    def nodes(self) -> dict[str, dict[str, Any]]:
        r = requests.get(f"{self.api}/cluster", headers=self.headers, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200, r.text
        return {n["name"]: n for n in r.json()["nodes"]}


@contextmanager
def corral_on_hosts(logs: Path, workers: Sequence[str] = ("w1", "w2"), policy: str = "fifo") -> Iterator[Cluster]:
    """A head host (Ray's head, `corral serve` on SQLite) and `workers`, each running `corral node start`; all of it
    stopped and removed on exit. Logs of every process in `logs`."""
    home = logs / "home"
    home.mkdir()
    # Ray's socket paths must stay under 108 bytes: a short folder of its own, not pytest's deep one.
    ray_tmp = Path(tempfile.mkdtemp(prefix="crl", dir="/tmp"))
    db_url = f"sqlite:///{home / 'corral.db'}"
    store = Store.open(db_url)
    with store.session() as s:
        token = queries.create_token(s, "alice")
    files = store_dir(store.id, home)
    store.close()
    # Every host reads the cluster's token from the shared home, as `corral serve` and `corral node start` do.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "DATABASE_URL": db_url, "CORRAL_HOME": str(home),
           **ray_auth.token_env(ray_auth.ensure_token(home))}
    env.pop(ray_auth.TOKEN_VAR, None)  # (it would win over the file)
    hosts = Hosts(logs)
    try:
        head = hosts.add("head")
        hosts.popen(head, [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address", head.address,
                           "--port", str(RAY_PORT), "--num-cpus", "1", "--include-dashboard", "false",
                           "--disable-usage-stats", "--temp-dir", str(ray_tmp / "head")],
                    env | HEALTH, "head-ray.log")
        c = Cluster(hosts, head, f"http://{head.address}:{API_PORT}/api/v1", {"Authorization": f"Bearer {token}"},
                    home, ray_tmp, env, files)
        for name in workers:
            c.worker(name)
        hosts.popen(head, [str(BIN / "corral"), "serve", "--ray-address", f"{head.address}:{RAY_PORT}",
                           "--host", head.address, "--port", str(API_PORT), "--tick", "0.2", "--policy", policy],
                    env, "serve.log")

        def up() -> bool:
            try:
                return len(c.nodes()) == len(workers)
            except requests.ConnectionError:
                return False

        wait_until("corral serve on the head host to see every worker host", up, timeout=180, every=1.0)
        yield c
    finally:
        hosts.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)


def nodes_of(c: Cluster, job_id: int) -> set[str]:
    """The nodes whose GPUs `job_id` holds now, from the cluster map."""
    return {n["name"] for n in c.nodes().values() for g in n["gpus"] for t in g["tenants"] if t["job_id"] == job_id}

"""The live service's speed: submissions per second, submit-to-running latency, and decision time with a deep queue.

`python benchmarks/live.py` prints three figures, each measured on this machine against the real thing:

1. submit-to-running latency on an idle cluster: a real `corral serve` (local Ray, 4 virtual nodes x 8 GPUs, SQLite,
   rl:default); one 1-GPU job at a time, timed from the POST until the API reports it `running` (placed, GPUs
   held) and until its worker process has started (`started_at`). Target: p50 <= 1 s.
2. accepted submissions per second with 8 concurrent clients (8 processes, keep-alive HTTP) against the same
   server, while its controller keeps scheduling: every job asks for the whole cluster, so the queue grows; and the
   CPU time the server's processes spent per accepted submission. `--api-workers N` serves the API from N processes
   of their own (`corral serve --api-workers`). Target: >= 500/s on SQLite and on PostgreSQL.
3. controller decision time with 1,000 queued jobs: an in-process controller on a local Ray cluster whose GPUs are
   all busy, 1,000 jobs of mixed sizes pending; the policy's time per pass over the queue, and the whole pass
   (store reads and writes included), for rl:default, tiresias and contention-greedy.

`--parts throughput` measures one figure only; `--postgres URL` serves on PostgreSQL (a schema made for the run in
that database, dropped after) instead of SQLite, for figures 1 and 2.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.live.store import Store, queries

CORRAL = Path(sys.executable).with_name("corral")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> int:
    """How many sockets listen on TCP `port` (Linux): `corral serve --api-workers N` has N once every API process
    has bound its own."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            count += state == "0A" and int(local.rsplit(":", 1)[1], 16) == port  # 0A: LISTEN
    return count


def start_server(home: Path, database_url: str | None = None,
                 api_workers: int = 1) -> tuple[subprocess.Popen[bytes], str, str]:
    """`corral serve` on 4 virtual nodes x 8 GPUs, on SQLite under `home` or on `database_url`, with `api_workers`
    API processes."""
    port = free_port()
    env = {**os.environ, "CORRAL_HOME": str(home)}
    env.pop("DATABASE_URL", None)
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    log = (home / "serve.log").open("ab")
    workers = ["--api-workers", str(api_workers)] if api_workers != 1 else []  # (the flag is new: run older ones)
    proc = subprocess.Popen([str(CORRAL), "serve", "--port", str(port), "--nodes", "4", "--gpus-per-node", "8",
                             *workers], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}/api/v1"
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"corral serve exited: {(home / 'serve.log').read_text()[-3000:]}")
            try:
                if requests.get(f"{url}/health", timeout=2).ok:
                    break
            except requests.RequestException:  # refused, or (API processes still starting) not yet answered
                time.sleep(0.3)
        # /health is answered by the first API process to listen; a client that connects before the others do keeps
        # its keep-alive connection on that one, so a busy machine measured one process where it meant N.
        while listening(port) < api_workers and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        if listening(port) < api_workers:
            raise SystemExit(f"only {listening(port)} of {api_workers} API processes listen on port {port}")
        store = Store.open(database_url or f"sqlite:///{home / 'corral.db'}")
        with store.session(write=True) as s:  # (a deferred transaction would fail on the server's commits)
            token = queries.create_token(s, "bench", admin=True)
        store.close()
    except BaseException:  # leave no server (and its Ray cluster) running behind a failed start
        proc.terminate()
        proc.wait(timeout=60)
        raise
    return proc, url, token


def latency(url: str, token: str, n: int) -> None:
    h = {"Authorization": f"Bearer {token}"}
    s = requests.Session()
    to_running, to_started = [], []
    for i in range(n):
        t0 = time.perf_counter()
        job = s.post(f"{url}/jobs", headers=h, json={"name": f"lat-{i}", "kind": "emulated", "model": "ResNet-50-bs64",
                                                     "num_gpus": 1, "duration_s": 600}).json()
        running = None
        while True:
            j = s.get(f"{url}/jobs/{job['id']}", headers=h).json()
            if j["state"] == "running" and running is None:
                running = time.perf_counter() - t0
            if j["started_at"]:
                to_started.append(j["started_at"] - j["submitted_at"])
                break
            time.sleep(0.01)
        to_running.append(running)
        s.post(f"{url}/jobs/{job['id']}/cancel", headers=h)
        while s.get(f"{url}/jobs/{job['id']}", headers=h).json()["state"] != "cancelled":
            time.sleep(0.01)
        time.sleep(0.5)  # let Ray reap the cancelled worker: the next job meets an idle cluster
    r, w = np.array(to_running), np.array(to_started)
    print(f"submit -> running (placed):          p50 {np.median(r) * 1000:6.0f} ms  p95 "
          f"{np.percentile(r, 95) * 1000:6.0f} ms  (n={n}; target p50 <= 1000 ms)")
    print(f"submit -> worker process started:    p50 {np.median(w) * 1000:6.0f} ms  p95 "
          f"{np.percentile(w, 95) * 1000:6.0f} ms")


def _client(args: tuple[str, str, float, int]) -> tuple[int, int, float]:
    """One client: a keep-alive connection posting jobs back to back. It uses http.client rather than requests: the
    clients share the server's two cores here, and a lighter client leaves more of them to the server."""
    url, token, seconds, k = args
    parsed = urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    n = failed = 0
    cpu0 = time.process_time()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        body = json.dumps({"name": f"tp-{k}-{n}", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 32,
                           "duration_s": 3600})
        conn.request("POST", f"{parsed.path}/jobs", body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status == 201:
            n += 1
        else:
            failed += 1
    conn.close()
    return n, failed, time.process_time() - cpu0


def cpu_seconds(pid: int) -> float:
    """User and system CPU time `pid` has used so far (Linux), 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def api_processes(pid: int) -> list[int]:
    """The API processes of `corral serve --api-workers` (`pid`): its children running scheduler.cli.api_workers."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == pid and b"scheduler.cli.api_workers" in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def throughput(url: str, token: str, clients: int, seconds: float, database: str = "SQLite",
               api_workers: int = 1, server_pid: int | None = None) -> None:
    """Accepted submissions a second; with `server_pid`, also the CPU time `corral serve`'s process and its API
    processes spent per accepted submission (Ray's processes left out): a figure a busy machine changes far less
    than the rate, and the rate N processes could reach on N free cores is about N over it."""
    api = api_processes(server_pid) if server_pid else []
    with mp.get_context("spawn").Pool(clients) as pool:
        pool.map(_client, [(url, token, 0.5, k) for k in range(clients)])  # warm up connections and imports
        cpu0 = {p: cpu_seconds(p) for p in [*([server_pid] if server_pid else []), *api]}
        t0 = time.perf_counter()
        counts = pool.map(_client, [(url, token, seconds, k) for k in range(clients)])
        wall = time.perf_counter() - t0
        cpu = {p: cpu_seconds(p) - c for p, c in cpu0.items()}
    total, failed = sum(n for n, _, _ in counts), sum(f for _, f, _ in counts)
    client_cpu = sum(c for _, _, c in counts)
    print(f"accepted submissions, {clients} clients, {database}, {api_workers} API process(es): {total / wall:6.0f} /s "
          f"({total} in {wall:.1f} s, {failed} not accepted; target >= 500/s)")
    if server_pid and total:
        per = {p: 1000 * c / total for p, c in cpu.items()}
        print(f"  server CPU per accepted submission: {sum(per.values()):.2f} ms (controller's process "
              f"{per[server_pid]:.2f} ms" + (f", API processes {' + '.join(f'{per[p]:.2f}' for p in api)} ms" if api
                                              else ", which answers the API too") + ")")
    if total:
        print(f"  the clients' CPU per accepted submission: {1000 * client_cpu / total:.2f} ms (on the same cores)")


def decision_time(queued: int, policies: list[str]) -> None:
    from policies import make_policy
    from scheduler.cli.serve import ServeConfig, build_controller
    from scheduler.live.ray_backend import RayBackend

    rng = np.random.default_rng(0)
    backend = RayBackend.local(4, 8)
    try:
        for name in policies:
            with tempfile.TemporaryDirectory() as tmp:
                os.environ["CORRAL_HOME"] = tmp
                store = Store.open(f"sqlite:///{tmp}/bench.db")
                ctl = build_controller(store, backend, ServeConfig(nodes=4, gpus_per_node=8, policy=name))
                make_policy(name)
                ctl.recover()
                with store.session() as s:
                    user = queries.ensure_user(s, "bench")
                    queries.submit(s, user, {"name": "hog", "kind": "emulated", "model": "ResNet-50-bs64",
                                             "num_gpus": 32, "duration_s": 3600})
                ctl.step()  # the hog takes every GPU
                sizes = rng.choice([0.25, 0.5, 1, 1, 2, 4, 8, 16], size=queued)
                with store.session() as s:
                    user = queries.ensure_user(s, "bench")
                    for i, g in enumerate(sizes):
                        queries.submit(s, user, {"name": f"q{i}", "kind": "emulated", "model": "ResNet-50-bs64",
                                                 "num_gpus": float(g), "duration_s": 600})
                ctl.step()  # loads the 1,000 queued jobs
                # A pass asks the policy only when something it sees changed; each timed pass here is made to ask
                # (as a submission or an end would), then one where nothing changed is timed too.
                policy_ms, pass_ms, idle_ms = [], [], []
                for _ in range(30):
                    ctl.ask_next_pass()
                    t0 = time.perf_counter()
                    stats = ctl.step()
                    pass_ms.append((time.perf_counter() - t0) * 1000)
                    policy_ms.append(stats.policy_s * 1000)
                    t0 = time.perf_counter()
                    ctl.step()
                    idle_ms.append((time.perf_counter() - t0) * 1000)
                assert len(ctl.pending) == queued, f"{len(ctl.pending)} pending"
                assert min(policy_ms) > 0, "a pass made to ask did not ask the policy"
                print(f"{name:>18}: policy {np.median(policy_ms):7.2f} ms p50, {np.percentile(policy_ms, 99):7.2f} ms"
                      f" p99 per pass over {queued} queued; whole pass {np.median(pass_ms):6.1f} ms p50 when it asks,"
                      f" {np.median(idle_ms):6.1f} ms when nothing changed")
                for job_id in list(ctl.running):
                    backend.stop(job_id)
                backend.poll()
                store.close()
    finally:
        backend.shutdown()


@contextmanager
def postgres_schema(url: str | None) -> Iterator[str | None]:
    """A fresh schema in the PostgreSQL database at `url` for the server (dropped afterwards), or None for SQLite."""
    if url is None:
        yield None
        return
    from sqlalchemy import create_engine, text

    schema = f"corral_bench_{os.getpid()}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-jobs", type=int, default=20)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--policies", default="rl:default,tiresias,contention-greedy")
    parser.add_argument("--parts", default="latency,throughput,decisions",
                        help="which figures to measure (comma-separated: latency, throughput, decisions)")
    parser.add_argument("--api-workers", type=int, default=1,
                        help="corral serve --api-workers: processes answering the API (1: the controller's own)")
    parser.add_argument("--postgres", default=None, metavar="URL",
                        help="serve on this PostgreSQL database (in a schema made for the run and dropped after) "
                             "instead of SQLite, e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if parts - {"latency", "throughput", "decisions"}:
        parser.error(f"--parts: unknown {sorted(parts - {'latency', 'throughput', 'decisions'})}")
    if parts & {"latency", "throughput"}:
        with tempfile.TemporaryDirectory() as tmp, postgres_schema(args.postgres) as database_url:
            proc, url, token = start_server(Path(tmp), database_url, args.api_workers)
            try:
                if "latency" in parts:
                    latency(url, token, args.latency_jobs)
                if "throughput" in parts:
                    throughput(url, token, args.clients, args.seconds,
                               "PostgreSQL" if database_url else "SQLite", args.api_workers, proc.pid)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    if "decisions" in parts:
        decision_time(args.queued, args.policies.split(","))


if __name__ == "__main__":
    main()

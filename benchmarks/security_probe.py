"""The security review's probe, re-run against a real `corral serve` (issue 25): what an ordinary user, or a job of
theirs, tried, how many times, and whether the service held.

    python benchmarks/security_probe.py [--keep]

It starts `corral serve` on loopback (local Ray, 2 virtual nodes x 4 GPUs, SQLite, fifo) in a fresh CORRAL_HOME under
the system's temporary folder; as root it gives the server one OS account per user (`--job-user-pattern`), as the
review's attacker faced. Then, as users `alice` and `bob` (and an admin where a job must print a lot):

  ray        a client with no token asks the GCS; every listening socket of the server's processes; the token's mode
  jobs       (root) a command job of bob's tries to read alice's job's environment and checkpoint, signal it, and
             read the job store; (not root) a non-admin's command job is refused
  values     absurd numbers in a submission (5e-324 s, 1e308 GPUs, -1, 0, NaN, Infinity)
  sizes      a 1 MB entrypoint, 10,000 env variables, a 10 KB name; a 1,000-job list stays small
  logs       an admin's job prints 100 MB without a newline: its log on disk, and `logs?tail=1`
  malformed  100k-deep arrays, 50k-deep objects, lone surrogates in a name, a client token and a header, a
             5,000-digit integer
  fair use   bob floods submissions: how many are refused with 429 and Retry-After, and whether alice's what-if
             still answers while bob's queue is deep
  headers    the dashboard's and the API's security headers

Each row prints `held` when every attempt got the answer a safe service gives, else `FAILED`. Exit status 1 if any
row failed.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import requests
from rich.console import Console
from rich.table import Table
from sqlalchemy import select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.live import ray_auth
from scheduler.live.sockets import listening
from scheduler.live.store import Store, queries
from scheduler.live.store.models import User

CORRAL = Path(sys.executable).with_name("corral")
ROOT_USER = os.geteuid() == 0
Row = tuple[str, str, int, int]  # (area, what was tried, attempts, attempts that held)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        port = free_port()
        args = [str(CORRAL), "serve", "--port", str(port), "--nodes", "2", "--gpus-per-node", "4", "--policy", "fifo"]
        if ROOT_USER:
            args += ["--job-user-pattern", "corral-probe-{id}"]
        env = {**os.environ, "CORRAL_HOME": str(home)}
        for key in ("DATABASE_URL", *ray_auth.RAY_ENV):  # its own store and its own Ray token, not ours
            env.pop(key, None)
        store = Store.open(f"sqlite:///{home / 'corral.db'}")
        with store.session() as s:
            self.tokens = {"alice": queries.create_token(s, "alice"), "bob": queries.create_token(s, "bob"),
                           "admin": queries.create_token(s, "probe-admin", admin=True)}
            self.ids = {u.name: u.id for u in s.scalars(select(User))}
        store.close()
        self.log = (home / "serve.log").open("ab")
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=self.log, start_new_session=True)
        self.base = f"http://127.0.0.1:{port}"
        self.api = self.base + "/api/v1"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"corral serve exited:\n{(home / 'serve.log').read_text()[-3000:]}")
            try:
                if requests.get(f"{self.api}/health", timeout=2).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        raise SystemExit("corral serve did not answer within 180 s")

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def post(self, path: str, body: object, who: str = "alice", **kw: object) -> requests.Response:
        return requests.post(self.api + path, json=body, headers=self.headers(who), timeout=30, **kw)  # type: ignore[arg-type]

    def raw(self, path: str, data: bytes, who: str = "alice") -> requests.Response:
        return requests.post(self.api + path, data=data, timeout=30,
                             headers={**self.headers(who), "Content-Type": "application/json"})

    def job(self, job_id: int, who: str) -> dict[str, object]:
        return requests.get(f"{self.api}/jobs/{job_id}", headers=self.headers(who), timeout=10).json()  # type: ignore[no-any-return]

    def wait(self, job_id: int, who: str, states: tuple[str, ...], timeout_s: float = 120) -> dict[str, object]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self.job(job_id, who)
            if job["state"] in states:
                return job
            time.sleep(0.3)
        raise SystemExit(f"job {job_id} never reached {states}: {self.job(job_id, who)}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def job_body(**kw: object) -> dict[str, object]:
    return {"name": "probe", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 600, **kw}


# ---- the probes ----------------------------------------------------------------------------------------------------


def ray_rows(srv: Server) -> list[Row]:
    address = (srv.home / "ray" / "ray" / "ray_current_cluster").read_text().strip()
    refused = ray_auth.cluster_requires_token(address) is True
    sockets = [ip for ip, _ in listening(srv.proc.pid)]
    token = srv.home / ray_auth.TOKEN_FILE
    private = (stat.S_IMODE(token.stat().st_mode) == 0o600) + (stat.S_IMODE((srv.home / "ray").stat().st_mode) == 0o700)
    return [("ray", "a client without the token asks the GCS for its KV", 1, int(refused)),
            ("ray", "listening TCP sockets of the server's processes, on loopback", len(sockets),
             sum(ipaddress.ip_address(ip).is_loopback for ip in sockets)),
            ("ray", "the token file 0600 and Ray's folder 0700", 2, private)]


def job_rows(srv: Server) -> list[Row]:
    if not ROOT_USER:
        resp = srv.post("/jobs", job_body(kind="command", entrypoint="id"), "bob")
        return [("jobs", "a non-admin's command job on a server with no job accounts", 1, int(resp.status_code == 403))]
    victim = srv.post("/jobs", job_body(kind="command", name="victim", entrypoint="echo ckpt > $CORRAL_CHECKPOINT_DIR/s;"
                                        " sleep 120", env={"SECRET": "alice-s3cret"}), "alice").json()
    srv.wait(int(victim["id"]), "alice", ("running",))
    deadline = time.monotonic() + 30
    pid = None
    while pid is None and time.monotonic() < deadline:  # the sleep that holds her secret in its environment
        out = subprocess.run(["pgrep", "-u", f"corral-probe-{srv.ids['alice']}", "-f", "sleep 120"],
                             capture_output=True, text=True, check=False).stdout.split()
        pid = out[0] if out else None
        if pid is None:
            time.sleep(0.3)
    ckpt = srv.home / "checkpoints" / f"job-{victim['id']}"
    script = (f"cat /proc/{pid}/environ; cat {ckpt}/s; kill -0 {pid}; kill -TERM {pid}; "
              f"cat {srv.home}/corral.db | head -c 10; cat {srv.home}/ray-token; ls {srv.home}/ray; true")
    attack = srv.post("/jobs", job_body(kind="command", name="attack", entrypoint=script), "bob").json()
    srv.wait(int(attack["id"]), "bob", ("succeeded", "failed"))
    text = requests.get(f"{srv.api}/jobs/{attack['id']}/logs", headers=srv.headers("bob"), timeout=10).text
    refusals = text.count("Permission denied") + text.count("Operation not permitted")
    alive = srv.job(int(victim["id"]), "alice")["state"] == "running"
    requests.post(f"{srv.api}/jobs/{victim['id']}/cancel", headers=srv.headers("alice"), timeout=10)
    what = ("bob's job reads alice's job's environment and checkpoint, signals it twice, reads the store, the Ray token "
            "and Ray's folder")
    return [("jobs", what, 7, min(7, refusals) - ("alice-s3cret" in text) * 7),
            ("jobs", "alice's job still running after bob's attempts", 1, int(alive))]


def value_rows(srv: Server) -> list[Row]:
    bad = [{"duration_s": 5e-324}, {"duration_s": 1e308}, {"num_gpus": 1e308}, {"num_gpus": -1}, {"num_gpus": 0},
           {"duration_s": -5}, {"slo_ms": 1e-300}, {"priority": 10**30}]
    def named(resp: requests.Response, field: str) -> bool:  # refused, and the message says which field
        return resp.status_code == 422 and field in resp.json()["message"]

    held = sum(named(srv.post("/jobs", job_body(**b)), next(iter(b))) for b in bad)
    texts = ['{"name":"x","kind":"emulated","model":"ResNet-50-bs64","num_gpus":1,"duration_s":NaN}',
             '{"name":"x","kind":"emulated","model":"ResNet-50-bs64","num_gpus":1,"duration_s":Infinity}']
    held += sum(named(srv.raw("/jobs", t.encode()), "duration_s") for t in texts)
    return [("values", "absurd and non-finite numbers in a submission", len(bad) + len(texts), held)]


def size_rows(srv: Server) -> list[Row]:
    tries = [job_body(kind="command", entrypoint="x" * 1_000_000), job_body(name="n" * 10_000),
             job_body(kind="command", entrypoint="true", env={f"V{i}": "x" for i in range(10_000)})]
    fields = ("entrypoint", "name", "env")
    held = sum(r.status_code in (413, 422) and (r.status_code == 413 or f in r.json()["message"])
               for r, f in ((srv.post("/jobs", t, "admin"), f) for t, f in zip(tries, fields, strict=True)))
    for i in range(20):
        srv.post("/jobs", job_body(kind="command", entrypoint="#" + "y" * 16_000, name=f"big-{i}", num_gpus=8), "admin")
    listed = requests.get(f"{srv.api}/jobs?limit=1000", headers=srv.headers("admin"), timeout=30)
    return [("sizes", "a 1 MB entrypoint, a 10 KB name, 10,000 env variables", len(tries), held),
            ("sizes", f"GET /jobs with 20 jobs of 16 KB entrypoints: {len(listed.content) / 1024:.0f} KiB", 1,
             int(len(listed.content) < 200_000))]


def log_rows(srv: Server) -> list[Row]:
    job = srv.post("/jobs", job_body(kind="command", name="loud", num_gpus=1, entrypoint="head -c 100000000 /dev/zero "
                                     "| tr '\\0' x; echo done"), "admin").json()
    srv.wait(int(job["id"]), "admin", ("succeeded", "failed"), timeout_s=300)
    logs = sorted((srv.home / "logs" / f"job-{job['id']}").rglob("*.log"))
    on_disk = sum(p.stat().st_size for p in logs)
    tail = requests.get(f"{srv.api}/jobs/{job['id']}/logs?tail=2", headers=srv.headers("admin"), timeout=30)
    return [("logs", f"100 MB printed without a newline: {on_disk / 2**20:.1f} MiB kept on disk", 1,
             int(on_disk <= 65 * 2**20)),
            ("logs", f"logs?tail=2 of it (its 64 MiB line and the note): {len(tail.content) / 1024:.0f} KiB", 1,
             int(tail.ok and len(tail.content) <= 2 * 2**20))]


def malformed_rows(srv: Server) -> list[Row]:
    bodies = [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
              json.dumps(job_body(name="\ud800")).encode(), json.dumps(job_body(client_token="\ud800")).encode(),
              b'{"name":"x","kind":"emulated","model":"ResNet-50-bs64","num_gpus":1,"duration_s":' + b"9" * 5000 + b"}"]
    codes = [srv.raw("/jobs", b).status_code for b in bodies]
    codes.append(requests.get(f"{srv.api}/jobs", headers={"Authorization": "Bearer \udc80".encode(
        "utf-8", "surrogateescape").decode("latin-1")}, timeout=10).status_code)
    return [("malformed", "deep nesting, lone surrogates, a 5,000-digit integer, a broken token", len(codes),
             sum(400 <= c < 500 for c in codes))]


def fair_use_rows(srv: Server) -> list[Row]:
    codes, retry_after = [], 0
    for i in range(300):
        r = srv.post("/jobs", job_body(name=f"flood-{i}", num_gpus=8, duration_s=3600), "bob")
        codes.append(r.status_code)
        retry_after += r.status_code == 429 and "Retry-After" in r.headers
    refused = codes.count(429)
    for i in range(1500):  # an admin (exempt) deepens the queue past the review's 3,025 - 1,500 pending jobs in all
        srv.post("/jobs", job_body(name=f"deep-{i}", num_gpus=8, duration_s=3600), "admin")
    pending = requests.get(f"{srv.api}/jobs?state=pending&limit=1", headers=srv.headers("admin"), timeout=30)
    t = time.monotonic()
    whatif = srv.post("/whatif", {"jobs": [{"model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 600}]}, "alice")
    took = time.monotonic() - t
    return [("fair use", f"300 submissions by one user as fast as it can: {refused} refused with 429", 1,
             int(refused > 0 and retry_after == refused and 500 not in codes)),
            ("fair use", (f"another user's what-if with {pending.json()['total']} jobs pending: HTTP "
                          f"{whatif.status_code} in {took:.1f} s"), 1, int(whatif.status_code == 200))]


def header_rows(srv: Server) -> list[Row]:
    wanted = ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options")
    pages = [requests.get(srv.base + "/", timeout=10), requests.get(f"{srv.api}/health", timeout=10),
             requests.get(f"{srv.api}/jobs/999999", headers=srv.headers("alice"), timeout=10)]
    return [("headers", "CSP, X-Frame-Options, nosniff on the dashboard, the API and an error", len(pages),
             sum(all(h in p.headers for h in wanted) for p in pages))]


def front_rows(srv: Server) -> list[Row]:
    """Issue 46, item 2: the HTTP front under floods, with `corral serve`'s default front flags. Floods come from
    other loopback addresses (127.0.x.y: one host each), so one address' cap is not what holds the rest."""
    import http.client
    import multiprocessing
    import select
    import selectors
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from typing import Any
    from urllib.parse import urlsplit

    from scheduler.cli.serve import ServeConfig

    cfg, port = ServeConfig(), int(urlsplit(srv.base).port or 0)
    api_path = urlsplit(srv.api).path

    def connect(source: str) -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))

    def hosts(prefix: str, n: int, each: int) -> list[str]:
        return [f"{prefix}.{1 + i // each}" for i in range(n)]

    def closed_by_server(sock: socket.socket) -> bool:
        try:
            return sock.recv(4096) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def wait_closed(socks: list[socket.socket], limit_s: float) -> list[float]:
        """Seconds until the server closed each socket, within limit_s (the others are left out)."""
        sel, start, out = selectors.DefaultSelector(), time.monotonic(), list[float]()
        for sock in socks:
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ)
        while len(out) < len(socks) and time.monotonic() - start < limit_s:
            for key, _ in sel.select(0.5):
                if closed_by_server(key.fileobj):  # type: ignore[arg-type]
                    sel.unregister(key.fileobj)
                    out.append(time.monotonic() - start)
        for sock in socks:
            sock.close()
        return out

    def get(path: str, who: str, source: str = "127.0.0.1") -> tuple[int, float]:
        t = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
        try:
            conn.request("GET", api_path + path, headers=srv.headers(who))
            resp = conn.getresponse()
            resp.read()
            return resp.status, time.monotonic() - t
        except OSError:
            return 0, time.monotonic() - t
        finally:
            conn.close()

    rows: list[Row] = []
    # Idle: 1,000 connections that send nothing, from 20 addresses; another user is served while they are open.
    idle = [connect(h) for h in hosts("127.0.1", 1000, 50)]
    status, took = get("/jobs?limit=5", "alice")
    gone = wait_closed(idle, cfg.idle_timeout_s + 10)
    rows.append(("front", (f"1,000 idle connections: {len(gone)} closed by the server within "
                          f"{max(gone, default=0):.0f} s (idle timeout {cfg.idle_timeout_s:g} s); meanwhile another "
                          f"user got HTTP {status} in {took * 1000:.0f} ms"), 1000, len(gone) if status == 200 else 0))
    # Slowloris: 200 connections each sending a header byte a second, never finishing.
    slow = [connect(h) for h in hosts("127.0.2", 200, 40)]
    for sock in slow:
        sock.sendall(b"GET " + api_path.encode() + b"/jobs HTTP/1.1\r\nHost: x\r\n")
    start, cut = time.monotonic(), dict[int, float]()
    while len(cut) < len(slow) and time.monotonic() - start < cfg.request_timeout_s + 10:
        for i, sock in enumerate(slow):
            if i not in cut:
                try:
                    sock.send(b"X")
                except OSError:
                    cut[i] = time.monotonic() - start
        time.sleep(1.0)
    for sock in slow:
        sock.close()
    rows.append(("front", (f"200 slowloris connections (a header byte a second): {len(cut)} cut off within "
                          f"{max(cut.values(), default=0):.0f} s (request timeout {cfg.request_timeout_s:g} s)"), 200,
                 len(cut)))

    # Bodies over the cap, no token: what the client could send before the 413 or the close.
    def send_until_refused(head: bytes, piece: bytes, most: int) -> tuple[bytes, int]:
        sock = connect("127.0.0.1")
        sock.sendall(head)
        sock.setblocking(False)
        sent, answer, stalled = 0, b"", time.monotonic()
        while sent < most and time.monotonic() - stalled < 5:
            readable, writable, _ = select.select([sock], [sock], [], 0.5)
            if readable:
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    break
                answer += data
            if writable:
                try:
                    sent += sock.send(piece)
                    stalled = time.monotonic()
                except BlockingIOError:
                    pass
                except OSError:
                    break
        sock.close()
        return answer, sent

    post = b"POST " + api_path.encode() + b"/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    sock = connect("127.0.0.1")
    sock.sendall(post + b"Content-Length: 209715200\r\n\r\n")
    headers_only = sock.recv(4096)
    sock.close()
    big, big_sent = send_until_refused(post + b"Content-Length: 209715200\r\n\r\n", b"x" * 65536, 209715200)
    chunk = b"%x\r\n" % 65536 + b"y" * 65536 + b"\r\n"
    chunked, chunked_sent = send_until_refused(post + b"Transfer-Encoding: chunked\r\n\r\n", chunk, 209715200)
    mib = 2**20
    rows.append(("front", (f"POST with Content-Length 200 MiB, headers only: answered '{headers_only[:12].decode()}' "
                          "before any body byte"), 1, int(headers_only.startswith(b"HTTP/1.1 413"))))
    rows.append(("front", (f"POST with Content-Length 200 MiB, body sent as fast as the socket takes it: 413 after "
                          f"{big_sent / mib:.1f} MiB left the client (the kernels' buffers; the server read none)"), 1,
                 int(big.startswith(b"HTTP/1.1 413") and big_sent < 32 * mib)))
    rows.append(("front", f"chunked POST past the 1 MiB cap: 413 after {chunked_sent / mib:.1f} MiB left the client",
                 1, int(chunked.startswith(b"HTTP/1.1 413") and chunked_sent < 32 * mib)))
    # One address past its cap: the connections beyond it are refused, the server still serves.
    cap = cfg.max_per_address
    mine = []
    for _ in range(cap + 36):
        mine.append(connect("127.0.0.9"))
        time.sleep(0.002)  # in order: the server counts each before the next
    time.sleep(1.0)

    def refused_at_once(sock: socket.socket) -> bool:
        if not select.select([sock], [], [], 0)[0]:
            return False  # open, and nothing said: admitted
        try:
            data = sock.recv(64)
        except OSError:
            return True
        return data == b"" or data.startswith(b"HTTP/1.1 503")

    refused = [refused_at_once(sock) for sock in mine]
    status, _ = get("/jobs?limit=5", "alice")
    for sock in mine:
        sock.close()
    rows.append(("front", (f"{cap + 36} connections from one address (cap {cap}): {sum(refused)} refused (503, closed); "
                          f"another address got HTTP {status}"), cap + 36,
                 sum(r == (i >= cap) for i, r in enumerate(refused)) if status == 200 else 0))

    # The target: 1,000 idle + 200 slowloris connections kept open, 90 threads of bob's maximal lists; alice's
    # small list's p99. Bob gets ~800 jobs first (his limits lifted for that, then put back).
    lifted = {"submit_rate": 10000, "submit_burst": 10000, "request_rate": 10000, "request_burst": 10000}
    requests.patch(f"{srv.api}/users/bob/limits", json=lifted, headers=srv.headers("admin"), timeout=30)
    have = requests.get(f"{srv.api}/jobs?limit=1", headers=srv.headers("bob"), timeout=30).json()["total"]
    with ThreadPoolExecutor(4) as pool:
        # (status codes only: a response kept alive keeps its connection open, and 64 of them fill the address' cap)
        list(pool.map(lambda i: srv.post("/jobs", job_body(name=f"list-{i}", duration_s=3600), "bob").status_code,
                      range(max(0, 800 - have))))
    for i in range(5):
        srv.post("/jobs", job_body(name=f"mine-{i}"), "alice")
    bob_jobs = requests.get(f"{srv.api}/jobs?limit=1", headers=srv.headers("bob"), timeout=30).json()["total"]

    # The load generators run at the lowest CPU priority: they stand for other hosts, and on a small machine their
    # own work would otherwise be what slows the server down.
    def flood(stop: Any, up: Any) -> None:  # its own process: 1,000 idle + 200 slowloris, reopened when closed
        os.nice(19)
        socks: dict[int, tuple[socket.socket, bool, str]] = {}

        def open_one(i: int) -> None:
            host = f"127.0.3.{1 + i // 50}" if i < 1000 else f"127.0.4.{1 + (i - 1000) // 40}"
            try:
                s = connect(host)
                if i >= 1000:
                    s.sendall(b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\n")
                s.setblocking(False)
                socks[i] = (s, i >= 1000, host)
            except OSError:
                socks.pop(i, None)

        for i in range(1200):
            open_one(i)
        while not stop.is_set():
            up.value = len(socks)
            for i in range(1200):
                entry = socks.get(i)
                if entry is None or closed_by_server(entry[0]):
                    if entry is not None:
                        entry[0].close()
                    open_one(i)
                elif entry[1]:
                    try:
                        entry[0].send(b"X")
                    except OSError:
                        entry[0].close()
                        open_one(i)
            stop.wait(1.0)

    def attack(stop: Any, counts: Any) -> None:  # its own process: 90 threads of bob's GET /jobs?limit=1000
        os.nice(19)
        lock = threading.Lock()

        def one(n: int) -> None:
            while not stop.is_set():
                status, _ = get("/jobs?limit=1000", "bob", source=f"127.0.5.{1 + n % 2}")
                with lock:
                    counts[{200: 0, 429: 1}.get(status, 2)] += 1

        threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in range(90)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def measure(label: str) -> Row:
        ctx = multiprocessing.get_context("fork")
        stop, up, counts = ctx.Event(), ctx.Value("i", 0), ctx.Array("i", 3)
        procs = [ctx.Process(target=flood, args=(stop, up)), ctx.Process(target=attack, args=(stop, counts))]
        for p in procs:
            p.start()
        deadline = time.monotonic() + 60
        while up.value < 1150 and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(3.0)  # the attackers' 90 threads running
        flooding = up.value
        took, codes, t0 = list[float](), list[int](), time.monotonic()
        while time.monotonic() - t0 < 45 or len(took) < 200:
            status, s = get("/jobs?limit=5", "alice")
            took.append(s)
            codes.append(status)
            time.sleep(0.05)
            if time.monotonic() - t0 > 150:
                break
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.terminate()
        took.sort()
        p50, p99 = took[len(took) // 2] * 1000, took[min(len(took) - 1, int(len(took) * 0.99))] * 1000
        print(f"  front target ({label}): alice's GET /jobs?limit=5 p99 {p99:.0f} ms, p50 {p50:.0f} ms over "
              f"{len(took)} requests; bob: {counts[0]} x 200, {counts[1]} x 429, {counts[2]} other")
        ok = codes.count(200) == len(codes) and p99 <= 250
        return ("front", (f"{flooding} flood connections (1,000 idle, 200 slowloris), 90 threads of bob's "
                         f"GET /jobs?limit=1000 ({bob_jobs} jobs), {label}: alice's GET /jobs?limit=5 p99 {p99:.0f} ms "
                         f"(p50 {p50:.0f}, {len(took)} requests; bob's: {counts[0]} answered, {counts[1]} x 429)"),
                1, int(ok))

    requests.patch(f"{srv.api}/users/bob/limits", json=dict.fromkeys(lifted), headers=srv.headers("admin"),
                   timeout=30)
    rows.append(measure("bob at the default request rate"))
    # For information (printed, not a row): an admin lifts bob's request rate, so only the cap on his requests in
    # progress and the fair queue stand between his lists and alice's.
    requests.patch(f"{srv.api}/users/bob/limits", json={"request_rate": 10000, "request_burst": 10000},
                   headers=srv.headers("admin"), timeout=30)
    measure("bob's request rate lifted by an admin")
    requests.patch(f"{srv.api}/users/bob/limits", json=dict.fromkeys(lifted), headers=srv.headers("admin"),
                   timeout=30)
    return rows


PROBES: list[Callable[[Server], list[Row]]] = [ray_rows, job_rows, value_rows, size_rows, log_rows, malformed_rows,
                                                header_rows, fair_use_rows]
PROBES.append(front_rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep the server's CORRAL_HOME (its logs) afterwards")
    ap.add_argument("--only", nargs="+", metavar="PROBE", choices=[p.__name__ for p in PROBES],
                    help="run only these probes (e.g. front_rows)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="corral-probe-"))
    os.chmod(home, 0o755)  # the jobs' accounts pass through it to their checkpoint folders
    console = Console()
    console.print(f"corral serve in {home} ({'root: one OS account per user' if ROOT_USER else 'not root'})")
    srv = Server(home / "home")
    rows: list[Row] = []
    try:
        for probe in PROBES:
            if args.only and probe.__name__ not in args.only:
                continue
            t = time.monotonic()
            rows += probe(srv)
            console.print(f"  {probe.__name__}: {time.monotonic() - t:.1f} s")
    finally:
        srv.stop()
        if ROOT_USER:
            for line in Path("/etc/passwd").read_text().splitlines():
                if line.startswith("corral-probe-"):
                    subprocess.run(["userdel", line.split(":")[0]], check=False, capture_output=True)
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    table = Table(title="issue 25 probe, re-run")
    for col in ("area", "what was tried", "attempts", "held", "result"):
        table.add_column(col)
    for area, what, n, held in rows:
        table.add_row(area, what, str(n), str(held), "held" if held == n else "[red]FAILED[/]")
    console.print(table)
    sys.exit(0 if all(held == n for *_, n, held in rows) else 1)


if __name__ == "__main__":
    main()

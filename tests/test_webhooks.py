"""Webhooks on job state changes (docs/webhooks.md): what is sent and how it is signed, the allow list at creation and
at sending, retries and giving up, a hanging receiver that holds up nothing else, restarts and two dispatchers at
once that neither lose nor repeat a delivery, the cursor's wait at a gap in the event ids, who sees what, and the
commands. Every request goes to a real HTTP receiver on 127.0.0.1; the events come from a real controller (with a
backend without Ray) and the API. The store-facing tests run on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import StartingBackend, served, wait_until
from sqlalchemy import func, insert, select

from policies.heuristics import Fifo
from scheduler.cli.commands import main
from scheduler.live import webhooks as wh
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.runs import JobStatus
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job, JobEvent, Webhook, WebhookCursor, WebhookDelivery
from scheduler.live.webhook_dispatch import DispatchConfig, Dispatcher
from web import create_app

ALLOW = wh.AllowList.parse(["127.0.0.1:1024-65535"])  # the receivers' ports are the system's choice
FAST = DispatchConfig(poll_s=0.02, backoff_s=0.05, timeout_s=5.0)
JOB = {"name": "train", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 600}
NAMES = ["n0"]


# ---- a receiver on loopback -------------------------------------------------------------------------------------


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that records every POST. `script[path]`: the statuses to answer, in turn (then
    200); a path in `hang` waits for `release` before answering; `/redirect` answers 302 to `/ok`."""

    port: int = 0
    requests: list[Request] = field(default_factory=list)
    script: dict[str, list[int]] = field(default_factory=dict)
    hang: set[str] = field(default_factory=set)
    hanging: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path == path]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with rec.lock:
                rec.requests.append(Request(self.path, dict(self.headers), body))
                statuses = rec.script.get(self.path)
                status = statuses.pop(0) if statuses else 200
            if self.path in rec.hang:
                with rec.lock:
                    rec.hanging += 1
                rec.release.wait(60)
                with rec.lock:
                    rec.hanging -= 1
            self.send_response(302 if self.path == "/redirect" else status)
            if self.path == "/redirect":
                self.send_header("Location", rec.url("/ok"))
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"no" if status >= 300 else b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec.port = server.server_port
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield rec
    rec.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


# ---- the service around them ------------------------------------------------------------------------------------


class Finishing(StartingBackend):
    """Every run's workers start at the first poll and succeed at the next."""

    def __init__(self) -> None:
        super().__init__(NAMES, 2)
        self.seen: set[tuple[int, int]] = set()

    def poll(self) -> list[JobStatus]:
        out = []
        for st in super().poll():
            key = (st.job_id, st.attempt)
            if key in self.seen:
                st = JobStatus(job_id=st.job_id, attempt=st.attempt, phase="succeeded", started_at=st.started_at,
                               ended_at=[time.time()] * len(st.started_at), exit_codes=[0] * len(st.started_at),
                               done_s=600.0, error="")
            self.seen.add(key)
            out.append(st)
        return out


@dataclass
class Site:
    store: Store
    client: Any  # the app's test client
    ann: str
    bob: str
    root: str  # an admin

    def call(self, method: str, path: str, token: str, body: Any = None, **params: Any) -> Any:
        return self.client.open(f"/api/v1{path}", method=method, json=body, query_string=params,
                                headers={"Authorization": f"Bearer {token}"})

    def hook(self, token: str, url: str) -> dict[str, Any]:
        res = self.call("POST", "/webhooks", token, {"url": url})
        assert res.status_code == 201, res.json
        return dict(res.json)

    def submit(self, token: str, **fields: Any) -> dict[str, Any]:
        res = self.call("POST", "/jobs", token, {**JOB, **fields})
        assert res.status_code == 201, res.json
        return dict(res.json)


@pytest.fixture
def site(store: Store, corral_home: Path) -> Site:
    with store.session(write=True) as s:
        tokens = q.create_token(s, "ann"), q.create_token(s, "bob"), q.create_token(s, "root", admin=True)
    app = create_app(store, config={"CORRAL_WEBHOOK_ALLOW": ALLOW})
    return Site(store, app.test_client(), *tokens)


def controller(store: Store) -> Controller:
    ctl = Controller(store, Finishing(), build_live_cluster("dgx-a100", [2]), NAMES, lambda name: Fifo(),
                     default_policy="fifo", tick_s=0.05, preset="dgx-a100")
    ctl.recover()
    return ctl


def step(ctl: Controller) -> None:
    ctl._last_poll = 0.0  # poll every pass
    ctl.step()


@contextmanager
def dispatching(store: Store, config: DispatchConfig = FAST, allow: wh.AllowList = ALLOW,
                **kw: Any) -> Iterator[Dispatcher]:
    d = Dispatcher(store, allow, config=config, **kw).start()
    try:
        yield d
    finally:
        d.stop()


def deliveries(store: Store, **where: Any) -> list[WebhookDelivery]:
    with store.session() as s:
        rows = s.scalars(select(WebhookDelivery).filter_by(**where).order_by(WebhookDelivery.id)).all()
        for d in rows:
            _ = d.attempt_log  # loaded while the session is open
        return list(rows)


def events(requests: list[Request]) -> list[str]:
    return [r.json["event"] for r in requests]


# ---- signing and the allow list (no store) ----------------------------------------------------------------------


def test_a_signature_verifies_and_a_tampered_body_or_a_stale_or_foreign_one_does_not() -> None:
    secret, body = wh.new_secret(), b'{"event":"succeeded","job":{"id":7}}'
    header = wh.signature_header(secret, body, now=1_000_000)
    t, v1 = (part.split("=", 1)[1] for part in header.split(","))
    assert int(t) == 1_000_000 and len(v1) == 64
    assert wh.verify(secret, header, body, now=1_000_010)
    assert not wh.verify(secret, header, body.replace(b"7", b"8"), now=1_000_010)  # tampered body
    assert not wh.verify(secret, header.replace("t=1000000", "t=1000001"), body, now=1_000_010)  # tampered time
    assert not wh.verify(wh.new_secret(), header, body, now=1_000_010)  # another webhook's secret
    assert not wh.verify(secret, header, body, now=1_000_000 + wh.SIGNATURE_TOLERANCE_S + 1)  # replayed late
    assert not wh.verify(secret, "v1=" + v1, body, now=1_000_010) and not wh.verify(secret, "", body)


def test_the_docs_verification_example_accepts_a_signed_request_and_refuses_a_tampered_one() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "webhooks.md").read_text()
    example = next(block for block in re.findall(r"```python\n(.*?)```", page, re.DOTALL) if "def verify" in block)
    scope: dict[str, Any] = {}
    exec(example, scope)  # noqa: S102 (the docs' own code, run as a receiver would)
    secret, body = wh.new_secret(), b'{"event":"failed","job":{"id":3}}'
    header = wh.signature_header(secret, body)
    assert scope["verify"](secret, header, body)
    assert not scope["verify"](secret, header, body.replace(b"failed", b"succeeded"))
    assert not scope["verify"](secret, wh.signature_header(secret, body, now=time.time() - 600), body)


def test_the_allow_list_takes_addresses_blocks_names_and_domains_and_refuses_anything_else() -> None:
    allow = wh.AllowList.parse(["127.0.0.1:8080, 10.0.0.0/8", "hooks.example.com", ".corp.example", "*.ops.example"])
    assert allow.enabled and not wh.AllowList.parse([]).enabled and not wh.AllowList.parse([" , "]).enabled
    for bad in ("hooks..example.com", "-bad.example", "10.0.0.0/33", "http://x.example", "a b", "10.0.0.1:0",
                "10.0.0.1:70000", "10.0.0.1:9-8", "[fd00::1:80"):
        with pytest.raises(ValueError, match="--webhook-allow"):
            wh.AllowList.parse([bad])
    names = {"hooks.example.com": ["203.0.113.5"], "metadata.corp.example": ["169.254.169.254"],
             "db.corp.example": ["10.1.2.3"], "corp.example": ["10.9.9.9"], "a.ops.example": ["192.168.1.1"],
             "evil.example": ["127.0.0.1"], "mixed.example": ["10.0.0.1", "8.8.8.8"]}

    def resolver(host: str, port: int) -> list[str]:
        if host not in names:
            raise OSError("Name or service not known")
        return names[host]

    def why(url: str, allowed: wh.AllowList = allow) -> str | None:
        return wh.refusal(url, allowed, resolver)

    assert why("http://127.0.0.1:8080/hook?token=x") is None
    assert why("https://10.200.0.1/hook") is None  # inside the CIDR block
    assert why("http://[::ffff:127.0.0.1]:8080/hook") is None  # an IPv4-mapped address is judged as IPv4
    assert why("https://hooks.example.com/x") is None  # a name entry: whatever public address it has
    assert why("https://db.corp.example/x") is None and why("https://corp.example/x") is None  # a domain entry
    assert why("https://a.ops.example/x") is None
    assert why("https://evil.example:8080/x") is None  # not listed by name, but it resolves into allowed addresses
    assert "169.254.169.254" in str(why("http://metadata.corp.example/"))  # link-local: only an address entry allows
    assert "8.8.8.8" in str(why("http://mixed.example/"))  # every address must be allowed
    assert "10.0.0.1" in str(why("http://10.0.0.1/", wh.AllowList.parse(["127.0.0.1"])))
    assert "cannot resolve nowhere.example" in str(why("http://nowhere.example/"))
    assert "http:// or https://" in str(why("ftp://127.0.0.1/x")) and "http:// or https://" in str(why("127.0.0.1"))
    assert "credentials" in str(why("http://u:p@127.0.0.1/"))
    assert "port" in str(why("http://127.0.0.1:99999/"))
    assert "port" in str(why("http://127.0.0.1:0/"))  # not the scheme's port in disguise
    assert "spaces" in str(why("http://127.0.0.1/a b"))
    assert "webhooks are off" in str(why("http://127.0.0.1/", wh.AllowList()))
    assert wh.shown("https://hooks.example.com:8443/secret/path?token=abc") == "https://hooks.example.com:8443/..."


@contextmanager
def raw_server(handle: Any, tls: Any = None) -> Iterator[int]:
    """A bare TCP server on 127.0.0.1 (TLS with `tls`, an SSLContext) whose connections `handle(file)` answers."""
    import socketserver

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            with contextlib.suppress(OSError):  # the client hung up: what some tests want
                handle(self)

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

        def get_request(self) -> Any:
            sock, addr = super().get_request()
            return (tls.wrap_socket(sock, server_side=True) if tls is not None else sock), addr

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def answer_ok(h: Any) -> None:
    while h.rfile.readline() not in (b"\r\n", b""):  # the request line and headers
        pass
    h.rfile.read(2)  # the body ({})
    h.wfile.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")


def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_deadline() -> None:
    done = threading.Event()

    def trickle(h: Any) -> None:
        h.rfile.readline()
        h.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(300):  # a header byte at a time, each well within a socket timeout, 30 s in all
            if done.is_set():
                return
            h.wfile.write(b"X")
            h.wfile.flush()
            done.wait(0.1)

    with raw_server(trickle) as port:
        where, addresses = wh.destinations(f"http://127.0.0.1:{port}/", ALLOW)
        started = time.monotonic()
        out = wh.post(where, addresses, b"{}", {}, timeout_s=1.0)
        done.set()
    assert not out.ok and out.error == "timed out: no answer within 1 s"
    assert time.monotonic() - started < 10  # cut at its deadline, not after the receiver's 30 s


def test_https_checks_the_certificate_against_the_host_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate to test TLS with")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    allow = wh.AllowList.parse(["localhost:1024-65535", "127.0.0.1:1024-65535"])
    with raw_server(answer_ok, tls) as port:
        def post(host: str) -> wh.Outcome:
            where, addresses = wh.destinations(f"https://{host}:{port}/hook", allow)
            return wh.post(where, addresses, b"{}", {"Content-Type": "application/json"}, timeout_s=5.0)

        untrusted = post("localhost")  # a certificate no authority signed
        assert not untrusted.ok and "certificate verify failed" in str(untrusted.error)
        trusted = ssl.create_default_context(cafile=str(cert))
        monkeypatch.setattr(wh.ssl, "create_default_context", lambda: trusted)
        good = post("localhost")  # the name the certificate names, over the checked address
        assert good.ok and good.status == 204, good.error
        wrong = post("127.0.0.1")  # the same server, reached by a name its certificate does not name
        assert not wrong.ok and "mismatch" in str(wrong.error)


# ---- the API: refusals, ownership ---------------------------------------------------------------------------------


def test_urls_outside_the_allow_list_are_refused_naming_the_field_and_store_nothing(site: Site) -> None:
    outside = "10.0.0.1 port 80 is not among the destinations this server allows (127.0.0.1:1024-65535; "
    for url, expect in (("http://10.0.0.1/hook", outside),
                        ("ftp://127.0.0.1/hook", "http:// or https://"),
                        ("http://u:p@127.0.0.1/hook", "credentials")):
        res = site.call("POST", "/webhooks", site.ann, {"url": url})
        assert res.status_code == 422 and expect in res.json["errors"]["json"]["url"][0], res.json
        res = site.call("POST", "/jobs", site.ann, {**JOB, "webhook": url})
        assert res.status_code == 422 and expect in res.json["errors"]["json"]["webhook"][0], res.json
        assert res.json["message"].startswith("webhook: ")
    off = create_app(site.store).test_client()  # a server started without --webhook-allow
    res = off.post("/api/v1/webhooks", json={"url": "http://127.0.0.1/x"},
                   headers={"Authorization": f"Bearer {site.ann}"})
    assert res.status_code == 422 and "webhooks are off" in res.json["errors"]["json"]["url"][0]
    with site.store.session() as s:
        assert s.scalar(select(func.count()).select_from(Webhook)) == 0
        assert s.scalar(select(func.count()).select_from(Job)) == 0


def test_users_manage_only_their_own_webhooks_and_deliveries_and_admins_see_all(site: Site,
                                                                                 receiver: Receiver) -> None:
    mine = site.hook(site.ann, receiver.url("/ann"))
    assert mine["secret"].startswith("whsec_") and mine["user"] == "ann" and mine["job_id"] is None
    again = site.call("POST", "/webhooks", site.ann, {"url": receiver.url("/ann")})
    assert again.status_code == 409 and f"webhook {mine['id']}" in again.json["message"]
    job = site.submit(site.ann, webhook=receiver.url("/job"))
    assert set(job["webhook"]) == {"id", "url", "secret"} and job["webhook"]["secret"] != mine["secret"]
    listed = site.call("GET", "/webhooks", site.ann).json
    assert listed["total"] == 2 and {h["job_id"] for h in listed["webhooks"]} == {None, job["id"]}
    assert all("secret" not in h for h in listed["webhooks"])  # shown once, never listed
    assert site.call("GET", "/webhooks", site.bob).json == {"webhooks": [], "total": 0}
    assert site.call("GET", "/webhooks", site.bob, user="ann").status_code == 403
    assert site.call("GET", "/webhooks", site.root).json["total"] == 2
    assert site.call("GET", "/webhooks", site.root, user="bob").json["total"] == 0
    assert site.call("GET", f"/webhooks/{mine['id']}", site.bob).status_code == 403
    assert site.call("DELETE", f"/webhooks/{mine['id']}", site.bob).status_code == 403
    assert site.call("POST", f"/webhooks/{mine['id']}/secret", site.bob).status_code == 403
    rotated = site.call("POST", f"/webhooks/{mine['id']}/secret", site.ann).json
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != mine["secret"]
    Dispatcher(site.store, ALLOW).fan_out()  # queued, and no dispatcher sends them: pending
    queued = site.call("GET", "/webhooks/deliveries", site.ann).json
    assert queued["total"] == 2 and {d["status"] for d in queued["deliveries"]} == {"pending"}
    assert site.call("GET", "/webhooks/deliveries", site.bob).json["total"] == 0
    assert site.call("GET", "/webhooks/deliveries", site.root).json["total"] == 2
    one = queued["deliveries"][0]["id"]
    assert site.call("GET", f"/webhooks/deliveries/{one}", site.bob).status_code == 403
    assert json.loads(site.call("GET", f"/webhooks/deliveries/{one}", site.ann).json["body"])["event"] == "submitted"
    # Deleting one stops it: its pending delivery fails at once, saying why; the other still waits.
    gone = site.call("DELETE", f"/webhooks/{mine['id']}", site.ann)
    assert gone.status_code == 200 and gone.json["deleted_at"] is not None
    assert site.call("GET", f"/webhooks/{mine['id']}", site.ann).status_code == 404
    assert site.call("GET", "/webhooks", site.ann).json["total"] == 1
    assert [(d.status, d.last_error) for d in deliveries(site.store, webhook_id=mine["id"])] == [
        ("failed", "the webhook was deleted")]
    assert [d.status for d in deliveries(site.store, webhook_id=job["webhook"]["id"])] == ["pending"]


# ---- delivering ---------------------------------------------------------------------------------------------------


def test_a_jobs_own_webhook_and_its_users_webhook_both_fire_signed_with_their_secrets(site: Site,
                                                                                      receiver: Receiver) -> None:
    users = site.hook(site.ann, receiver.url("/user"))
    ctl = controller(site.store)
    job = site.submit(site.ann, webhook=receiver.url("/job?token=abc"))
    other = site.submit(site.bob)  # bob's job: nothing of it reaches ann's webhook
    with dispatching(site.store):
        wait_until("the job to succeed", lambda: (step(ctl), ctl.running == {} and not ctl.pending)[1],
                   timeout=30, every=0.05)
        lifecycle = ["submitted", "placed", "started", "succeeded"]
        wait_until("both webhooks to hear the job's whole life",
                   lambda: len(receiver.at("/user")) >= 4 and len(receiver.at("/job?token=abc")) >= 4, timeout=30)
    for path, hook, secret in (("/user", users["id"], users["secret"]),
                               ("/job?token=abc", job["webhook"]["id"], job["webhook"]["secret"])):
        got = receiver.at(path)
        assert events(got) == lifecycle, path
        for r in got:
            assert r.headers["Content-Type"] == "application/json" and r.headers["User-Agent"] == wh.USER_AGENT
            assert r.headers["X-Corral-Webhook"] == str(hook) and r.headers["X-Corral-Event"] == r.json["event"]
            assert wh.verify(secret, r.headers[wh.SIGNATURE_HEADER], r.body)
            assert not wh.verify(secret, r.headers[wh.SIGNATURE_HEADER], r.body.replace(b"ann", b"bob"))
            assert r.json["job"] == {"id": job["id"], "name": "train", "user": "ann", "team": "default"}
            assert r.json["type"] == "job.state_changed" and r.json["webhook_id"] == hook
        assert not wh.verify(users["secret"] if path != "/user" else job["webhook"]["secret"],
                             got[0].headers[wh.SIGNATURE_HEADER], got[0].body)  # each webhook its own secret
        states = [(r.json["old_state"], r.json["new_state"]) for r in got]
        assert states == [(None, "pending"), ("pending", "running"), ("running", "running"),
                          ("running", "succeeded")]
        done = got[-1].json
        assert (done["exit_code"], done["attempt"], done["reason"]) == (0, 1, "exit code 0")
        assert got[1].json["attempt"] == 1 and got[0].json["reason"] == "submitted by ann"
        assert got[0].json["attempt"] == 0  # no run yet, though the job had run by the time it was queued
        assert len({r.headers["X-Corral-Delivery"] for r in got}) == 4
    assert other["id"] not in {r.json["job"]["id"] for r in receiver.requests}
    with site.store.session() as s:  # ids match the events the controller and the API wrote
        kinds = {i: k for i, k in s.execute(select(JobEvent.id, JobEvent.kind).where(JobEvent.job_id == job["id"]))}
    assert all(kinds[r.json["event_id"]] == r.json["event"] for r in receiver.requests)
    assert {d.status for d in deliveries(site.store)} == {"delivered"}


def test_a_receiver_answering_500_then_200_gets_the_retry_with_the_same_body(site: Site, receiver: Receiver) -> None:
    receiver.script["/flaky"] = [500]
    site.hook(site.ann, receiver.url("/flaky"))
    site.submit(site.ann)
    with dispatching(site.store):
        wait_until("the retry to succeed", lambda: [d.status for d in deliveries(site.store)] == ["delivered"],
                   timeout=30)
    first, second = receiver.at("/flaky")
    assert first.body == second.body and first.headers["X-Corral-Delivery"] == second.headers["X-Corral-Delivery"]
    assert (first.headers["X-Corral-Attempt"], second.headers["X-Corral-Attempt"]) == ("1", "2")
    (d,) = deliveries(site.store)
    assert d.attempts == 2 and d.last_status_code == 200 and d.last_error is None
    assert [(a.number, a.status_code, a.error) for a in d.attempt_log] == [(1, 500, "HTTP 500 Internal Server Error"), (2, 200, None)]
    assert d.attempt_log[1].at - d.attempt_log[0].at >= FAST.backoff_s  # it waited its backoff


def test_a_receiver_that_keeps_failing_is_given_up_on_with_the_reason_after_a_doubling_backoff(
        site: Site, receiver: Receiver) -> None:
    receiver.script["/down"] = [503] * 10
    site.hook(site.ann, receiver.url("/down"))
    site.hook(site.ann, receiver.url("/redirect"))
    site.submit(site.ann)
    cfg = DispatchConfig(poll_s=0.02, backoff_s=0.1, max_attempts=3)
    with dispatching(site.store, cfg):
        wait_until("both to be given up on", lambda: {d.status for d in deliveries(site.store)} == {"failed"},
                   timeout=30)
    down, moved = deliveries(site.store)
    assert len(receiver.at("/down")) == 3 and down.attempts == 3
    assert down.last_error == "gave up after 3 attempts; the last: HTTP 503 Service Unavailable"
    times = [a.at for a in down.attempt_log]
    assert times[1] - times[0] >= 0.1 and times[2] - times[1] >= 0.2  # 0.1 s, then twice that
    assert len(receiver.at("/redirect")) == 3 and not receiver.at("/ok")  # a redirect is never followed
    assert moved.last_error == ("gave up after 3 attempts; the last: HTTP 302 Found: a redirect, which webhooks "
                                "never follow")


def test_a_hanging_receiver_holds_up_neither_other_deliveries_nor_a_controller_pass(site: Site,
                                                                                    receiver: Receiver) -> None:
    receiver.hang.add("/hang")
    site.hook(site.ann, receiver.url("/hang"))
    site.hook(site.bob, receiver.url("/ok"))
    ctl = controller(site.store)
    site.submit(site.ann)  # its events come first: a dispatcher sending one at a time would wait on them
    site.submit(site.bob)
    cfg = DispatchConfig(poll_s=0.02, timeout_s=60.0)  # a hang far longer than this test waits for anything
    with dispatching(site.store, cfg):
        wait_until("a request to hang", lambda: receiver.hanging == 1, timeout=20)
        wait_until("bob's submission to arrive meanwhile", lambda: events(receiver.at("/ok")) == ["submitted"],
                   timeout=20)
        passed = threading.Event()
        threading.Thread(target=lambda: (step(ctl), passed.set()), daemon=True).start()
        wait_until("a controller pass to finish while the request hangs", passed.is_set, timeout=20)
        assert receiver.hanging == 1 and len(receiver.at("/hang")) == 1
        wait_until("the placement to reach bob", lambda: "placed" in events(receiver.at("/ok")), timeout=20)
        assert receiver.hanging == 1  # still hanging: nothing waited for it
        receiver.release.set()
        wait_until("the hanging one to end", lambda: receiver.hanging == 0, timeout=20)


def test_a_restarted_dispatcher_neither_loses_nor_repeats_an_event(site: Site, receiver: Receiver) -> None:
    site.hook(site.ann, receiver.url("/ok"))
    first = site.submit(site.ann)
    with dispatching(site.store):
        wait_until("the first submission", lambda: len(receiver.at("/ok")) == 1, timeout=20)
    # Down: what happens now waits in the store.
    second = site.submit(site.ann)
    assert site.call("POST", f"/jobs/{first['id']}/cancel", site.ann).json["state"] == "cancelled"
    with dispatching(site.store):  # a new dispatcher, as after a restart: its memory is empty
        wait_until("what happened while it was down", lambda: len(receiver.at("/ok")) == 3, timeout=20)
    with dispatching(site.store) as third:  # and once more, with nothing new: nothing is sent again
        wait_until("a few turns", lambda: third.turns >= 5, timeout=20)
    got = [(r.json["job"]["id"], r.json["event"]) for r in receiver.at("/ok")]
    assert got == [(first["id"], "submitted"), (second["id"], "submitted"), (first["id"], "cancelled")]
    assert len({r.json["event_id"] for r in receiver.requests}) == 3
    assert [d.status for d in deliveries(site.store)] == ["delivered"] * 3
    with site.store.session() as s:
        assert s.get(WebhookCursor, 1).last_event_id == s.scalar(select(func.max(JobEvent.id)))  # type: ignore[union-attr]


def test_a_claim_that_lapses_unrecorded_is_sent_again_with_the_same_delivery_id(site: Site,
                                                                                receiver: Receiver) -> None:
    """At least once: a dispatcher that claimed a delivery (and perhaps sent it) but died before writing the outcome
    leaves a claim that lapses; the next one sends it, and the dead one's late outcome is not written."""
    site.hook(site.ann, receiver.url("/ok"))
    site.submit(site.ann)
    dead = Dispatcher(site.store, ALLOW, config=DispatchConfig(timeout_s=0.2, lock_margin_s=0.0))
    dead.fan_out()
    (claim,) = dead.claim(5)
    assert dead.claim(5) == []  # claimed: not claimed twice
    with dispatching(site.store):
        wait_until("the lapsed claim to be sent", lambda: len(receiver.at("/ok")) == 1, timeout=20)
        wait_until("its outcome", lambda: deliveries(site.store)[0].status == "delivered", timeout=20)
    assert receiver.at("/ok")[0].headers["X-Corral-Delivery"] == str(claim.delivery_id)
    assert not dead.record(claim, wh.Outcome(500, "HTTP 500", 1.0))  # too late: another dispatcher took it over
    (d,) = deliveries(site.store)
    assert (d.status, d.attempts) == ("delivered", 1)


def test_two_dispatchers_at_once_send_each_delivery_once(site: Site, receiver: Receiver, db_url: str) -> None:
    site.hook(site.ann, receiver.url("/ok"))
    jobs = [site.submit(site.ann, name=f"j{i}")["id"] for i in range(30)]
    other = Store.open(db_url)  # another replica's store, as during a handover
    try:
        with dispatching(site.store), dispatching(other):
            wait_until("every delivery", lambda: len(deliveries(site.store, status="delivered")) == 30, timeout=60)
    finally:
        other.close()
    assert sorted(r.json["job"]["id"] for r in receiver.requests) == jobs
    assert len({r.headers["X-Corral-Delivery"] for r in receiver.requests}) == 30


def test_only_a_leading_dispatcher_works(site: Site, receiver: Receiver) -> None:
    leads = threading.Event()
    site.hook(site.ann, receiver.url("/ok"))
    site.submit(site.ann)
    with dispatching(site.store, leading=leads.is_set) as d:
        wait_until("a few turns", lambda: d.turns >= 5, timeout=20)
        assert receiver.requests == [] and deliveries(site.store) == []  # a standby queues nothing, sends nothing
        leads.set()
        wait_until("the leader's delivery", lambda: len(receiver.at("/ok")) == 1, timeout=20)


def test_the_allow_list_is_checked_again_when_sending(site: Site, receiver: Receiver) -> None:
    site.hook(site.ann, receiver.url("/ok"))
    site.submit(site.ann)
    narrower = wh.AllowList.parse(["10.0.0.0/8"])  # the server restarted with another --webhook-allow
    with dispatching(site.store, allow=narrower):
        wait_until("the delivery to be refused", lambda: [d.status for d in deliveries(site.store)] == ["failed"],
                   timeout=20)
    (d,) = deliveries(site.store)
    assert receiver.requests == [] and d.attempts == 1
    assert str(d.last_error).startswith(f"refused: 127.0.0.1 port {receiver.port} is not among the destinations this "
                                        "server allows (10.0.0.0/8; ")


def test_with_webhooks_off_nothing_is_sent_then_or_later(site: Site, receiver: Receiver) -> None:
    site.hook(site.ann, receiver.url("/ok"))
    first = site.submit(site.ann)
    Dispatcher(site.store, ALLOW).fan_out()  # queued while on; then the server restarts without --webhook-allow
    second = site.submit(site.ann)
    with dispatching(site.store, allow=wh.AllowList()) as off:
        wait_until("the queued one to be refused", lambda: [d.status for d in deliveries(site.store)] == ["failed"],
                   timeout=20)
        wait_until("a few turns", lambda: off.turns >= 5, timeout=20)
    (d,) = deliveries(site.store)
    assert d.job_id == first["id"] and str(d.last_error).startswith("refused: webhooks are off on this server")
    with site.store.session() as s:  # the cursor moved over the second submission: turned on again, it is not sent
        assert s.get(WebhookCursor, 1).last_event_id == s.scalar(  # type: ignore[union-attr]
            select(func.max(JobEvent.id)).where(JobEvent.job_id == second["id"]))
    with dispatching(site.store) as on:
        wait_until("a few turns", lambda: on.turns >= 5, timeout=20)
    assert receiver.requests == [] and len(deliveries(site.store)) == 1


def test_the_cursor_waits_at_a_young_gap_in_the_event_ids_and_moves_past_an_old_one(site: Site,
                                                                                     receiver: Receiver) -> None:
    """On PostgreSQL an event id can become visible after a higher one (its transaction committed later): the
    events above are queued at once, the cursor stays below the gap until it fills (or is old), nothing is queued
    twice."""
    site.hook(site.ann, receiver.url("/ok"))
    job = site.submit(site.ann)
    d = Dispatcher(site.store, ALLOW, config=DispatchConfig(gap_wait_s=3600.0))
    d.fan_out()
    with site.store.session() as s:
        base = int(s.get(WebhookCursor, 1).last_event_id)  # type: ignore[union-attr]

    def add(event_id: int, kind: str) -> None:
        with site.store.session(write=True) as s:
            s.execute(insert(JobEvent), [{"id": event_id, "job_id": job["id"], "at": time.time(), "kind": kind,
                                          "message": kind, "data": {}}])

    def cursor() -> int:
        with site.store.session() as s:
            return int(s.get(WebhookCursor, 1).last_event_id)  # type: ignore[union-attr]

    add(base + 2, "placed")  # base + 1 is not visible yet
    d.fan_out()
    assert cursor() == base and [x.event for x in deliveries(site.store)] == ["submitted", "placed"]
    d.fan_out()
    assert len(deliveries(site.store)) == 2  # read again above the gap, not queued again
    add(base + 1, "cancelled")  # the late one commits
    d.fan_out()
    assert cursor() == base + 2 and [x.event for x in deliveries(site.store)] == ["submitted", "placed", "cancelled"]
    add(base + 5, "started")  # base + 3 and 4 never come (rolled back)
    d.fan_out()
    assert cursor() == base + 2
    d.cfg = DispatchConfig(gap_wait_s=0.0)  # (as if an hour had passed)
    d.fan_out()
    assert cursor() == base + 5 and len(deliveries(site.store)) == 4


def test_a_lost_runs_requeue_carries_the_loss_and_the_old_state(site: Site, receiver: Receiver) -> None:
    site.hook(site.ann, receiver.url("/ok"))
    job = site.submit(site.ann)
    now = time.time()
    with site.store.session(write=True) as s:  # as the controller writes them when a node goes (`_lose`)
        s.get(Job, job["id"]).attempt = 1  # type: ignore[union-attr]
        q.add_event(s, job["id"], "placed", "on n0", at=now, attempt=1)
        q.add_event(s, job["id"], "lost", "node n0 is gone", at=now + 1, attempt=1)
        q.add_event(s, job["id"], "requeued", "restart 1 of 3", at=now + 1)
        q.add_event(s, job["id"], "adopted", "not a change of state", at=now + 2)
    Dispatcher(site.store, ALLOW).fan_out()
    bodies = [json.loads(d.body) for d in deliveries(site.store)]
    assert [b["event"] for b in bodies] == ["submitted", "placed", "requeued"]  # not lost, not adopted
    requeued = bodies[-1]
    assert (requeued["old_state"], requeued["new_state"]) == ("running", "pending")
    assert requeued["reason"] == "lost: node n0 is gone; restart 1 of 3" and requeued["attempt"] == 1


# ---- no port scanning, no reading of answers, fair to every user (issue 46) ----------------------------------------


def test_port_0_and_the_servers_own_ports_are_refused_naming_the_field_even_on_an_allowed_host(site: Site) -> None:
    """127.0.0.1 is allowed on every port from 1024: still, the API's port, the database's (from its URL) and Ray's
    (the GCS port in use and Ray's defaults) are refused, and `:0` is no disguised port 80."""
    api_port = 18080
    own = wh.own_ports(api_port, "postgresql+psycopg://corral@127.0.0.1:15432/corral", "127.0.0.1:16379")
    allow = wh.AllowList.parse(["127.0.0.1:1024-65535", "127.0.0.1:80"]).forbidding(own)
    client = create_app(site.store, config={"CORRAL_WEBHOOK_ALLOW": allow}).test_client()
    auth = {"Authorization": f"Bearer {site.ann}"}
    refused = {0: "port", api_port: "this server's API", 15432: "this server's database",
               16379: "Ray's", 6379: "Ray's GCS", 8265: "Ray's dashboard", 10001: "Ray's client server",
               5432: "PostgreSQL's"}
    for port, what in refused.items():
        res = client.post("/api/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/x"}, headers=auth)
        assert res.status_code == 422 and what in res.json["errors"]["json"]["url"][0], (port, res.json)
        res = client.post("/api/v1/jobs", json={**JOB, "webhook": f"http://127.0.0.1:{port}/x"}, headers=auth)
        assert res.status_code == 422 and what in res.json["errors"]["json"]["webhook"][0], (port, res.json)
    with site.store.session() as s:
        assert s.scalar(select(func.count()).select_from(Webhook)) == 0
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    # An entry without a port allows 80 and 443 only.
    plain = wh.AllowList.parse(["127.0.0.1"])
    assert wh.refusal("http://127.0.0.1/x", plain) is None and wh.refusal("https://127.0.0.1/x", plain) is None
    assert "127.0.0.1 port 5000 is not among" in str(wh.refusal("http://127.0.0.1:5000/x", plain))
    ranged = wh.AllowList.parse(["10.0.0.0/8:8000-8999", "hooks.example.com:8443", "[fd00::/8]:9000"])
    names = {"hooks.example.com": ["203.0.113.5"]}
    assert wh.refusal("http://10.1.2.3:8500/x", ranged) is None and wh.refusal("http://[fd00::1]:9000/", ranged) is None
    assert wh.refusal("https://hooks.example.com:8443/x", ranged, lambda h, p: names[h]) is None
    assert "port 443" in str(wh.refusal("https://hooks.example.com/x", ranged, lambda h, p: names[h]))
    assert "port 9000" in str(wh.refusal("http://10.1.2.3:9000/x", ranged))
    assert "port 8265 is Ray's dashboard" in str(wh.refusal("http://10.1.2.3:8265/x", wh.AllowList.parse(
        ["10.0.0.0/8:8000-8999"]).forbidding(wh.own_ports(8080, "sqlite://", None))))


def test_serve_refuses_its_api_port_its_databases_and_every_port_its_ray_processes_listen_on() -> None:
    import socket

    from scheduler.cli.serve import webhook_allow_list

    with socket.socket() as ray_like:  # a port this process listens on, as a local Ray cluster's processes do
        ray_like.bind(("127.0.0.1", 0))
        ray_like.listen()
        listened = ray_like.getsockname()[1]
        allow = webhook_allow_list(wh.AllowList.parse(["127.0.0.1:1-65535"]), 18081,
                                   "postgresql://corral@db:15433/corral", "127.0.0.1:16380", local=True)
    for port in (18081, 15433, 16380, listened, 6379, 8265, 10001):
        assert allow.forbidden_why(port) is not None, port
        assert f"port {port} is " in str(wh.refusal(f"http://127.0.0.1:{port}/", allow))


def test_last_error_says_the_status_line_or_the_kind_of_error_and_never_a_byte_of_the_answer(
        site: Site, receiver: Receiver) -> None:
    """What a user's URL pointed at an internal service gets back: its status line, 'not HTTP', or 'connection
    refused', never the body of an error page, a reason phrase of its own, a redirect's Location or raw bytes."""
    marker = b"SECRET-7f3a"

    def raw(h: Any) -> None:  # a service that is not HTTP (Ray's GCS, a database) answers with bytes of its own
        h.rfile.readline()
        h.wfile.write(b"\x00\x01" + marker + b" gcs binary handshake\r\n\r\n")

    def error_page(h: Any) -> None:  # an HTTP service answering 401 with a body and a reason phrase of its own
        while h.rfile.readline() not in (b"\r\n", b""):
            pass
        body = b'{"message": "token ' + marker + b' is invalid"}'
        h.wfile.write(b"HTTP/1.1 401 " + marker + b"\r\nContent-Length: " + str(len(body)).encode() +
                      b"\r\nX-Leak: " + marker + b"\r\n\r\n" + body)

    def odd_status(h: Any) -> None:
        while h.rfile.readline() not in (b"\r\n", b""):
            pass
        h.wfile.write(b"HTTP/1.1 599 " + marker + b"\r\nLocation: http://" + marker + b"/\r\nContent-Length: 0"
                      b"\r\n\r\n")

    closed = socket_port_not_listening()
    with raw_server(raw) as raw_port, raw_server(error_page) as page_port, raw_server(odd_status) as odd_port:
        urls = {raw_port: "not HTTP: the answer is not an HTTP status line and headers",
                page_port: "HTTP 401 Unauthorized", odd_port: "HTTP 599", closed: "connection refused"}
        hooks = {site.hook(site.ann, f"http://127.0.0.1:{port}/hook")["id"]: want for port, want in urls.items()}
        site.submit(site.ann)
        with dispatching(site.store, DispatchConfig(poll_s=0.02, max_attempts=1)):
            wait_until("every delivery to be given up on", lambda: len(deliveries(site.store, status="failed")) == 4,
                       timeout=30)
    for d in deliveries(site.store):
        assert d.last_error == f"gave up after 1 attempts; the last: {hooks[d.webhook_id]}", d.last_error
        shown = site.call("GET", f"/webhooks/deliveries/{d.id}", site.ann)
        assert shown.status_code == 200 and marker not in shown.get_data()
        assert shown.json["attempt_log"][0]["error"] == hooks[d.webhook_id]
    listed = site.call("GET", "/webhooks/deliveries", site.ann)
    assert listed.json["total"] == 4 and marker not in listed.get_data()


def socket_port_not_listening() -> int:
    """A loopback port nothing listens on (bound a moment ago and let go): a connection to it is refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_one_users_hanging_receivers_delay_another_users_delivery_by_seconds_at_most(site: Site,
                                                                                      receiver: Receiver) -> None:
    """Issue 46: one user's many webhooks to a receiver that never answers took every worker, one 5-s timeout after
    another, and another user's delivery waited behind all of them (160 s). Now a user has at most 2 requests in
    flight and the users take turns."""
    release = threading.Event()
    lock = threading.Lock()
    hanging = [0, 0]  # now, most at once

    def never_answer(h: Any) -> None:
        h.rfile.readline()
        with lock:
            hanging[0] += 1
            hanging[1] = max(hanging[1], hanging[0])
        release.wait(60)  # bounded: released when the test ends
        with lock:
            hanging[0] -= 1

    with raw_server(never_answer) as port:
        try:
            for i in range(20):  # as many as one user may have
                site.hook(site.ann, f"http://127.0.0.1:{port}/hang/{i}")
            site.hook(site.bob, receiver.url("/bob"))
            for i in range(3):
                site.submit(site.ann, name=f"a{i}")  # 60 deliveries, each to hang its full 5 s
            cfg = DispatchConfig(poll_s=0.02)  # the default timeout, workers and share of them per user
            assert cfg.timeout_s <= 5
            with dispatching(site.store, cfg):
                wait_until("ann's requests to hang", lambda: hanging[0] >= 1, timeout=20, every=0.02)
                started = time.monotonic()
                site.submit(site.bob)
                wait_until("bob's delivery", lambda: receiver.at("/bob"), timeout=90, every=0.02)
                took = time.monotonic() - started
        finally:
            release.set()
    assert took < 10, f"bob's delivery took {took:.1f} s behind ann's hanging receivers"
    assert hanging[1] <= cfg.per_user  # ann never held more than her share of the workers


def test_a_jobs_own_webhook_counts_toward_the_users_limit_while_the_job_is_pending_or_running(
        site: Site, receiver: Receiver) -> None:
    limit = 20  # docs/webhooks.md
    for i in range(limit - 1):
        site.hook(site.ann, receiver.url(f"/own/{i}"))
    job = site.submit(site.ann, webhook=receiver.url("/job/1"))  # the 20th: allowed
    with site.store.session() as s:
        jobs_before = s.scalar(select(func.count()).select_from(Job))
    over = site.call("POST", "/jobs", site.ann, {**JOB, "webhook": receiver.url("/job/2")})
    assert over.status_code == 409 and over.json["message"].startswith("webhook: you have 20 webhooks"), over.json
    assert "(20, fixed by the server)" in over.json["message"]
    mine = site.call("POST", "/webhooks", site.ann, {"url": receiver.url("/own/x")})
    assert mine.status_code == 409 and "you have 20 webhooks" in mine.json["message"]
    with site.store.session() as s:  # the refused submission stored nothing
        assert s.scalar(select(func.count()).select_from(Job)) == jobs_before
        assert s.scalar(select(func.count()).select_from(Webhook)) == limit
    assert site.submit(site.ann)["id"]  # a job without a webhook is not refused
    assert site.call("POST", "/webhooks", site.bob, {"url": receiver.url("/bob")}).status_code == 201  # per user
    assert site.call("POST", f"/jobs/{job['id']}/cancel", site.ann).json["state"] == "cancelled"
    assert site.submit(site.ann, webhook=receiver.url("/job/3"))["webhook"]["id"]  # an ended job's no longer counts


# ---- the commands -------------------------------------------------------------------------------------------------


def test_the_webhook_commands_and_submit_webhook(corral_home: Path, receiver: Receiver) -> None:
    store = Store.open()
    with store.session(write=True) as s:
        token = q.create_token(s, "ann")
    with served(create_app(store, config={"CORRAL_WEBHOOK_ALLOW": ALLOW})) as url:
        def corral(*args: str) -> Any:
            result = CliRunner().invoke(main, list(args), env={"CORRAL_URL": url, "CORRAL_TOKEN": token})
            assert "Traceback" not in result.output
            return result

        added = corral("webhook", "add", receiver.url("/cli"), "--description", "my bot")
        assert added.exit_code == 0, added.output
        hook_id = int(added.stdout.split()[1])
        secret = added.stdout.split("secret: ")[1].split()[0]
        assert secret.startswith("whsec_") and "shown only now" in added.stdout
        refused = corral("webhook", "add", "http://10.1.2.3/x")
        assert refused.exit_code == 1 and "url: 10.1.2.3 port 80 is not among the destinations" in refused.stderr
        submitted = corral("submit", "--name", "j", "--model", "ResNet-50-bs64", "--gpus", "1", "--duration", "60",
                           "--webhook", receiver.url("/job"))
        assert submitted.exit_code == 0, submitted.output
        assert submitted.stdout.startswith("submitted job ") and ", secret whsec_" in submitted.stdout
        bad = corral("submit", "--name", "j", "--model", "ResNet-50-bs64", "--gpus", "1", "--duration", "60",
                     "--webhook", "gopher://127.0.0.1/")
        assert bad.exit_code == 1 and "webhook: must be an http:// or https:// URL" in bad.stderr
        listed = corral("webhook", "list")
        assert listed.exit_code == 0 and "my bot" in listed.stdout and "all jobs" in listed.stdout
        assert "job 1" in listed.stdout and secret not in listed.stdout
        assert json.loads(corral("webhook", "list", "--json").stdout)["total"] == 2
        with dispatching(store):
            wait_until("both deliveries", lambda: len(receiver.requests) == 2, timeout=20)
            wait_until("their outcomes", lambda: len(deliveries(store, status="delivered")) == 2, timeout=20)
        shown = corral("webhook", "deliveries")
        assert shown.exit_code == 0 and shown.stdout.count("delivered") == 2 and "HTTP 200" in shown.stdout
        one = deliveries(store)[0].id
        detail = corral("webhook", "delivery", str(one))
        assert detail.exit_code == 0 and "1. " in detail.stdout and "HTTP 200" in detail.stdout
        assert '"event":"submitted"' in detail.stdout
        rotated = corral("webhook", "rotate", str(hook_id))
        assert rotated.exit_code == 0 and "new secret whsec_" in rotated.stdout and secret not in rotated.stdout
        removed = corral("webhook", "rm", str(hook_id))
        assert removed.exit_code == 0 and removed.stdout.startswith(f"deleted webhook {hook_id}")
        missing = corral("webhook", "rm", str(hook_id))
        assert missing.exit_code == 1 and f"webhook {hook_id} not found" in missing.stderr
    store.close()

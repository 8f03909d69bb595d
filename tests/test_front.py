"""The HTTP front (issue 46, item 2): idle and slow connections closed within seconds, one address capped, bodies over
the cap refused from their headers. Each test starts `web.front.make_server` in a thread on an ephemeral loopback port
with a small WSGI app, and talks to it with raw sockets (to send exactly what a hostile client sends)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask, request

from web.front import FrontChannel, FrontLimits, FrontServer, make_server
from web.limits import MAX_BODY_BYTES

WAIT_S = 30.0  # the most any condition below is waited for: generous, for a busy machine


def small_app() -> Flask:
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES

    @app.get("/")
    def hello() -> str:
        return "ok"

    @app.post("/echo")
    def echo() -> str:
        return str(len(request.get_data()))

    return app


Serve = Callable[..., FrontServer]


@pytest.fixture
def serve() -> Iterator[Serve]:
    servers: list[tuple[FrontServer, threading.Thread]] = []

    def start(**limits: Any) -> FrontServer:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = make_server(small_app(), sock, FrontLimits(**{"threads": 4} | limits))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        return server

    yield start
    for server, thread in servers:
        server.stop()
        thread.join(WAIT_S)


def port_of(server: FrontServer) -> int:
    return int(server.effective_port)


def get(server: FrontServer, source: str = "127.0.0.1") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=WAIT_S, source_address=(source, 0))
    try:
        conn.request("GET", "/")
        return conn.getresponse().status
    finally:
        conn.close()


def connect(server: FrontServer, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port_of(server)), timeout=WAIT_S, source_address=(source, 0))


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (bounded by the socket's timeout and 1 MB)."""
    out = b""
    while len(out) < 2**20:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        out += chunk
    return out


def wait_for(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_accepted_connections_send_without_waiting_for_acks(serve: Serve) -> None:
    """TCP_NODELAY on every accepted connection, as waitress sets it: without it the response's last small segment
    waited for the client's delayed ACK, 40 ms a request on a keep-alive connection (23 submissions a second per
    client, whatever the server's speed)."""
    server = serve()
    client = connect(server)
    try:
        assert wait_for(lambda: any(isinstance(ch, FrontChannel) for ch in list(server._map.values())))
        channel = next(ch for ch in list(server._map.values()) if isinstance(ch, FrontChannel))
        assert channel.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        client.close()


def test_an_idle_connection_is_closed_within_the_timeout_while_others_are_served(serve: Serve) -> None:
    server = serve(idle_timeout_s=1.0)
    idle = connect(server)
    opened = time.monotonic()
    assert get(server) == 200  # the idle one holds nothing another client needs
    assert idle.recv(1) == b""  # closed by the server (a timeout here raises instead)
    assert time.monotonic() - opened < 1.0 + 5.0  # the timeout, plus a cleanup pass a second and a busy machine
    idle.close()


def test_a_request_trickled_a_byte_at_a_time_is_cut_off(serve: Serve) -> None:
    """slowloris: each byte keeps the connection from being idle; the request's deadline still closes it."""
    server = serve(idle_timeout_s=2.0, request_timeout_s=1.0)
    slow = connect(server)
    opened = time.monotonic()
    header = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 1000
    closed = False
    for byte in header:  # a byte every 0.1 s: never 2 s idle; the whole header would take 100 s
        try:
            slow.send(bytes([byte]))
        except OSError:
            closed = True
            break
        if time.monotonic() - opened > WAIT_S:
            break
        time.sleep(0.1)
    assert closed, "the server kept the slow request open"
    assert time.monotonic() - opened < 1.0 + 5.0
    assert get(server) == 200
    slow.close()


def test_connections_beyond_the_cap_from_one_address_are_refused_while_the_server_serves(serve: Serve) -> None:
    server = serve(max_per_address=4)
    held = [connect(server) for _ in range(4)]
    assert wait_for(lambda: server.connections_from("127.0.0.1") == 4)
    extra = connect(server)
    answer = read_all(extra)
    assert answer.startswith(b"HTTP/1.1 503 ") and b"at most 4 at once" in answer
    extra.close()
    assert get(server, source="127.0.0.2") == 200  # another address is served
    held.pop().close()
    assert wait_for(lambda: server.connections_from("127.0.0.1") == 3)
    assert get(server) == 200  # and this one again once it holds fewer than its cap
    for sock in held:
        sock.close()


def test_an_over_cap_content_length_is_refused_from_the_headers_alone(serve: Serve) -> None:
    server = serve()
    sock = connect(server)
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 209715200\r\n\r\n")  # and not one byte of the body
    answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 413 ")
    sock.close()
    # Exactly the cap is still a body the API takes (its own check refuses only beyond it).
    conn = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=WAIT_S)
    conn.request("POST", "/echo", body=b"x" * MAX_BODY_BYTES)
    resp = conn.getresponse()
    assert (resp.status, resp.read()) == (200, str(MAX_BODY_BYTES).encode())
    conn.close()


def test_a_chunked_body_is_refused_once_it_passes_the_cap(serve: Serve) -> None:
    server = serve()
    sock = connect(server)
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n" % 65536 + b"y" * 65536 + b"\r\n"
    for _ in range(MAX_BODY_BYTES // 65536 + 1):  # one chunk past the cap, and no final chunk
        sock.sendall(chunk)
    answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 413 ")
    sock.close()


def test_oversized_headers_are_refused(serve: Serve) -> None:
    server = serve(max_header_bytes=4096)
    sock = connect(server)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8192 + b"\r\n\r\n")
    assert b" 431 " in read_all(sock).split(b"\r\n", 1)[0]  # waitress answers it as HTTP/1.0
    sock.close()


def test_one_callers_queued_requests_do_not_delay_anothers(serve: Serve) -> None:
    """One worker thread; alice's first request holds it and four more of hers wait; bob's one request, queued after
    them, is served next (waitress alone served in arrival order: bob last)."""
    order: list[str] = []
    gate = threading.Semaphore(0)
    app = Flask(__name__)

    @app.get("/hold")
    def hold() -> str:
        order.append(request.headers["Authorization"])
        gate.acquire(timeout=WAIT_S)
        return "ok"

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = make_server(app, sock, FrontLimits(threads=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        def call(who: str) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=WAIT_S)
            conn.request("GET", "/hold", headers={"Authorization": who})
            return conn.getresponse().status

        callers = [threading.Thread(target=call, args=("Bearer alice",))]
        callers[0].start()
        assert wait_for(lambda: order == ["Bearer alice"])
        for who in ["Bearer alice"] * 4 + ["Bearer bob"]:
            callers.append(threading.Thread(target=call, args=(who,)))
            callers[-1].start()
            queued = len(callers) - 1
            assert wait_for(lambda q=queued: len(server.task_dispatcher.queue) == q)  # in this order
        for _ in range(6):
            gate.release()
        for t in callers:
            t.join(WAIT_S)
        assert order == ["Bearer alice", "Bearer bob"] + ["Bearer alice"] * 4
    finally:
        server.stop()
        thread.join(WAIT_S)


def test_stop_ends_the_loop_even_when_its_trigger_is_already_closed() -> None:
    """CI once saw `stop()` fail with EBADF: the trigger's pipe was closed before it (cause not found). Stopping then
    closes the server's connections and socket itself, and its loop still ends."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = make_server(small_app(), sock, FrontLimits(threads=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert get(server) == 200
    server.trigger.close()
    server.stop()
    thread.join(WAIT_S)
    assert not thread.is_alive()

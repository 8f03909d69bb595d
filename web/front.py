"""The HTTP front: waitress, set up for hostile clients (docs/security.md, "The HTTP front").

waitress reads every request in full on one I/O thread before a worker thread sees it, so a slow or idle client costs
a socket, never a worker. What it lacks out of the box, this module adds:

- idle connections (no byte either way for `idle_timeout_s`) are closed, and so is a request (its headers and body)
  still incomplete `request_timeout_s` after its first byte: a slowloris client trickling a byte at a time is cut off
  too (waitress alone only closes a connection idle for `channel_timeout`, which a trickle resets);
- one peer address holds at most `max_per_address` connections: the next is answered 503 and closed at once;
- requests wait for a worker thread in a queue per caller (their bearer token, or their address without one),
  served in turn (`FairQueue`): one user's hundred queued requests do not delay another's one;
- `max_connections` in all, with the process' file limit raised to fit (`raise_fd_limit`), and poll(), not select()
  with its 1,024-descriptor ceiling;
- a body over the API's cap is refused (413) from its `Content-Length` before any of it is read, a chunked one as soon
  as it passes the cap (waitress' parser does both once `max_request_body_size` is the cap); headers over
  `max_header_bytes` likewise (431).
"""

from __future__ import annotations

import errno
import logging
import resource
import select
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from web.limits import MAX_BODY_BYTES

log = logging.getLogger("corral.front")

FD_MARGIN = 256  # descriptors kept for what is not a client: the store, Ray's client, log files, the listening socket
# How often Python hands the GIL from a busy thread to a waiting one (its default is 5 ms). A request that waits on
# the database or a socket gives up the GIL at each call and waits up to an interval to get it back from every busy
# thread: beside 8 threads building large answers, 30 small SQLite reads took 58 ms at the median and 2 s at worst
# with 5 ms, 10 ms and 57 ms with 1 ms (the convoy effect). `corral serve` sets it at start.
SWITCH_INTERVAL_S = 0.001


@dataclass(frozen=True)
class FrontLimits:
    """How much of the server a client may hold. Defaults: far above what people, the CLI, the dashboard and scripts
    use (a browser opens up to 6 connections to a host, the CLI one), far below what a flood needs."""

    threads: int = 16  # workers answering requests (waitress' `threads`)
    idle_timeout_s: float = 10.0  # a connection with no byte either way this long is closed
    request_timeout_s: float = 15.0  # a request (headers and body) must arrive within this of its first byte
    max_connections: int = 4096  # open connections in all; beyond, new ones wait in the kernel's backlog
    max_per_address: int = 64  # open connections from one peer address; beyond, 503 and closed (0: no cap)
    max_header_bytes: int = 16 * 1024  # request line and headers
    max_body_bytes: int = MAX_BODY_BYTES  # a request's body

    def problems(self) -> list[str]:
        """What is wrong with these limits, by flag name (empty: nothing)."""
        out = []
        if self.threads < 1:
            out.append("--threads: at least 1")
        if self.idle_timeout_s <= 0:
            out.append("--idle-timeout: more than 0 s")
        if self.request_timeout_s <= 0:
            out.append("--request-timeout: more than 0 s")
        if self.max_connections < 1:
            out.append("--max-connections: at least 1")
        if self.max_per_address < 0:
            out.append("--max-connections-per-address: 0 (no cap) or more")
        return out


def raise_fd_limit(wanted: int) -> int:
    """Raise this process' soft limit on open files towards `wanted` (at most the hard limit); return the soft limit
    now in force. Many systems start processes at 1,024, too few for thousands of connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:  # a container may forbid it: keep what there is
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    return soft


def connections_for_fd_limit(limits: FrontLimits) -> FrontLimits:
    """`limits` with `max_connections` lowered to what the open-file limit allows (raised first as far as it goes):
    past it accept() fails with EMFILE on every pass of the loop, a busy loop that serves no one."""
    soft = raise_fd_limit(limits.max_connections + FD_MARGIN)
    fits = max(1, soft - FD_MARGIN)
    if fits < limits.max_connections:
        log.warning("--max-connections %d lowered to %d: this process may open %d files (ulimit -n)",
                    limits.max_connections, fits, soft)
        return FrontLimits(**{**limits.__dict__, "max_connections": fits})
    return limits


_READ = select.POLLIN | select.POLLPRI


def _refusal(cap: int) -> bytes:
    body = (f"too many connections from your address: at most {cap} at once (the server's "
            "--max-connections-per-address); close some and retry\n").encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Retry-After: 1\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


class FairQueue:
    """waitress' task queue (a deque it appends to, pops from the left, tests and sizes, always under its
    dispatcher's lock), made fair: a deque per caller, and the caller served least recently goes first. A caller is
    the bearer token a request carries (so one user's many connections are one caller), or its peer address."""

    REMEMBERED = 4096  # callers whose last turn is remembered; one forgotten counts as never served

    def __init__(self) -> None:
        self._waiting: dict[Hashable, deque[Any]] = {}
        self._last: OrderedDict[Hashable, int] = OrderedDict()  # caller -> the turn it was last served at
        self._turn = 0
        self._size = 0

    @staticmethod
    def caller(task: Any) -> Hashable:
        try:
            token = task.requests[0].headers.get("AUTHORIZATION")
            # hash(): the queue remembers callers after their requests, and need not keep their tokens to do so
            return ("token", hash(token)) if token else ("address", task.addr[0])
        except (AttributeError, IndexError, TypeError):
            return ("other", None)

    def append(self, task: Any) -> None:
        self._waiting.setdefault(self.caller(task), deque()).append(task)
        self._size += 1

    def popleft(self) -> Any:
        key = min(self._waiting, key=lambda k: self._last.get(k, -1))  # waitress pops only when not empty
        waiting = self._waiting[key]
        task = waiting.popleft()
        if not waiting:
            del self._waiting[key]
        self._size -= 1
        self._turn += 1
        self._last[key] = self._turn
        self._last.move_to_end(key)
        if len(self._last) > self.REMEMBERED:
            self._last.popitem(last=False)
        return task

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0


class FrontChannel(HTTPChannel):
    """waitress' connection, which also knows since when its current request has been arriving and gives its place
    back to its address' count when it closes."""

    counted: str | None = None  # the address this connection counts against, until it closes
    _partial: object | None = None  # the request being read when last seen
    _partial_since = 0.0

    def received(self, data: bytes) -> bool:
        done: bool = super().received(data)
        if self.request is not self._partial:  # a new request began arriving (or none is arriving)
            self._partial, self._partial_since = self.request, time.time()
        return done

    def del_channel(self, map: Any = None) -> None:
        super().del_channel(map)
        host, self.counted = self.counted, None
        if host is not None:
            self.server.release_address(host)


class FrontServer(TcpWSGIServer):
    """waitress' TCP server with the rules of this module: see its docstring."""

    channel_class = FrontChannel

    def __init__(self, application: Callable[..., Any], sock: socket.socket, limits: FrontLimits) -> None:
        self.limits = limits
        self._per_address: dict[str, int] = {}
        self._address_lock = threading.Lock()  # a worker thread can close a channel (a failed send)
        self._refused = 0
        self._refusal = _refusal(limits.max_per_address)
        adj = Adjustments(
            sockets=[sock], threads=limits.threads,
            connection_limit=limits.max_connections,
            channel_timeout=max(1, round(limits.idle_timeout_s)),  # ours is `maintenance`; this one is unused
            cleanup_interval=1,  # `maintenance` runs every second
            max_request_header_size=limits.max_header_bytes,
            # waitress refuses a Content-Length >= this one; the API allows exactly its cap (werkzeug refuses > it)
            max_request_body_size=limits.max_body_bytes + 1,
            asyncore_use_poll=True,  # select() fails past descriptor 1,023
            ident="corral",
        )
        # waitress warns at every request that waits for a thread: under a flood, thousands of lines a second
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)
        dispatcher = ThreadedTaskDispatcher()
        dispatcher.queue = FairQueue()  # before its threads start
        dispatcher.set_thread_count(adj.threads)
        super().__init__(application, {}, True, sock, dispatcher=dispatcher, adj=adj, bind_socket=False,
                         sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()))

    def handle_accept(self) -> None:
        try:
            accepted = self.accept()
            if accepted is None:
                return
            conn, addr = accepted
            # waitress' own options, TCP_NODELAY first: without it a response's last small segment waits for the
            # client's delayed ACK (40 ms on Linux), which held every keep-alive client to ~23 requests a second.
            self.set_socket_options(conn)
        except OSError:  # the peer went away before accept(); waitress logs and goes on too
            return
        host = str(addr[0]) if isinstance(addr, tuple) else str(addr)
        cap = self.limits.max_per_address
        with self._address_lock:
            held = self._per_address.get(host, 0)
            if not cap or held < cap:
                self._per_address[host] = held + 1
                admitted = True
            else:
                admitted = False
        if not admitted:
            self._refuse(conn, host)
            return
        try:
            channel = self.channel_class(self, conn, addr, self.adj, map=self._map)
        except OSError:  # the peer reset the connection already
            self.release_address(host)
            conn.close()
            return
        channel.counted = host

    def _refuse(self, conn: socket.socket, host: str) -> None:
        try:
            conn.setblocking(False)
            conn.send(self._refusal)  # a few hundred bytes: the socket's buffer takes them at once
        except OSError:
            pass
        conn.close()
        self._refused += 1
        if self._refused & (self._refused - 1) == 0:  # 1, 2, 4, 8...: a flood does not flood the log
            log.warning("refused a connection from %s: it holds %d, the most per address (%d refused so far)", host,
                        self.limits.max_per_address, self._refused)

    def release_address(self, host: str) -> None:
        with self._address_lock:
            held = self._per_address.get(host, 0) - 1
            if held > 0:
                self._per_address[host] = held
            else:
                self._per_address.pop(host, None)

    def connections_from(self, host: str) -> int:
        with self._address_lock:
            return self._per_address.get(host, 0)

    def run(self) -> None:
        """waitress' loop, with `_poll` for its poll2: see there."""
        try:
            while self._map:
                self._poll(self.adj.asyncore_loop_timeout)
        except (SystemExit, KeyboardInterrupt):
            self.task_dispatcher.shutdown()

    def _poll(self, timeout: float) -> None:
        """wasyncore.poll2, asking a FrontChannel what it waits for without calling its readable() and writable():
        their conditions, inlined (waitress 3's HTTPChannel). Each pass asks every open connection, so under a flood
        of thousands this is most of the loop's time."""
        pollster = select.poll()
        register = pollster.register
        lookahead = self.adj.channel_request_lookahead
        for fd, obj in list(self._map.items()):
            if type(obj) is FrontChannel:
                if obj.total_outbufs_len or obj.will_close or obj.close_when_flushed:
                    register(fd, select.POLLOUT)  # writable, and so not readable
                elif len(obj.requests) <= lookahead:
                    register(fd, _READ)
                continue
            flags = _READ if obj.readable() else 0
            if obj.writable() and not obj.accepting:
                flags |= select.POLLOUT
            if flags:
                register(fd, flags)
        try:
            ready = pollster.poll(int(timeout * 1000))
        except OSError as err:
            if err.args[0] != errno.EINTR:
                raise
            ready = []
        for fd, flags in ready:
            obj = self._map.get(fd)
            if obj is not None:
                wasyncore.readwrite(obj, flags)

    def stop(self) -> None:
        """From any thread: close every connection and the listening socket, which ends `run()`, then stop the
        workers (for tests and benchmarks; `corral serve` ends `run()` with KeyboardInterrupt)."""
        try:
            self.trigger.pull_trigger(lambda: wasyncore.close_all(self._map))
        except OSError:  # the trigger's pipe is closed already (CI saw EBADF here once, cause not found): close here
            wasyncore.close_all(self._map)
        self.task_dispatcher.shutdown()

    def maintenance(self, now: float) -> None:
        """Close connections idle for `idle_timeout_s`, and those whose request is still arriving `request_timeout_s`
        after its first byte. One being answered (a worker holds its request) is left alone."""
        idle_cut = now - self.limits.idle_timeout_s
        slow_cut = now - self.limits.request_timeout_s
        for channel in list(self.active_channels.values()):
            if channel.requests:
                continue
            if channel.last_activity < idle_cut or (channel.request is not None and
                                                    getattr(channel, "_partial_since", now) < slow_cut):
                channel.will_close = True


def make_server(app: Callable[..., Any], sock: socket.socket, limits: FrontLimits) -> FrontServer:
    """The front serving `app` on the listening socket `sock` (bound already); `server.run()` serves until
    KeyboardInterrupt, `server.close()` stops accepting."""
    return FrontServer(app, sock, limits)

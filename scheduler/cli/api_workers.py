"""`corral serve --api-workers N`: the API answered by N processes of its own beside the controller's.

One process runs the controller (the leader: on SQLite it alone holds the store's lock; on PostgreSQL it holds or
waits for the lease) and answers no request. It binds the API's address before anything starts (SO_REUSEPORT, not
listening: it holds the port while API processes come and go) and hands the socket down (`pass_fds`); each of N API
processes binds a listening socket of its own on exactly that address beside it, and the kernel spreads new
connections evenly over them by their addresses and ports (one shared listening socket would give most of them to
whichever process polls first). SO_REUSEPORT admits only sockets of the same OS user, so no one else can take a share
of the port; nothing listens anywhere else. Each API process opens the store
itself (SQLite's writers from several processes wait for its lock: `busy_timeout`, and every write takes it with
`BEGIN IMMEDIATE`, `scheduler.live.store.db`) and serves the same app as the in-process API, so a job is stored by
one request in one transaction whichever process answers it; the controller places it.

A change the controller must see (a submission, a cancel) is committed first, then the API process writes a byte to
a pipe the controller's process reads (`WakePipe`): the controller wakes at once, as with the in-process API; a full
pipe means a wake is already pending. Each API process exits as soon as the controller's process is gone (its stdin,
a pipe from it, reads end-of-file), so a `kill -9` of `corral serve` leaves no process answering on its port, and
`corral serve` restarts one that dies.

What an API process keeps in memory is its own, as a replica's is (`web.fair_use`): the per-user submission rate
and requests in progress are counted per process, so N processes admit up to N times `submit_rate` from one user.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

log = logging.getLogger("corral")

RESTART_PAUSE_S = 1.0  # between restarts of an API process that keeps dying (a broken store, a full disk)
STOP_WAIT_S = 10.0  # at shutdown: how long an API process may take to finish its requests before it is killed


@dataclass(frozen=True)
class WorkerSettings:
    """What an API process needs to serve as the in-process API would: sent to it pickled on its stdin."""

    db_url: str
    fd: int  # the socket `corral serve` bound, inherited: its address is the one to listen on
    wake_fd: int  # the write end of the controller's wake pipe, inherited
    front: Any  # web.front.FrontLimits
    app_config: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)  # the controller's status at start (for /health)
    switch_interval_s: float = 0.001


class WakePipe:
    """The controller's doorbell for its own API processes: they write a byte, a thread here calls `wake`."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        self._wake = wake
        self._thread = threading.Thread(target=self._listen, name="corral-api-wake", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        try:
            while os.read(self.read_fd, 4096):  # end-of-file once every write end is closed
                self._wake()
        except OSError:
            pass
        finally:
            os.close(self.read_fd)

    def close(self) -> None:
        """Close this process' write end (the API processes' are gone with them): the thread then ends."""
        with contextlib.suppress(OSError):
            os.close(self.write_fd)


class ApiWorkers:
    """N API processes on `sock`, started, watched (one that dies is started again) and stopped by `corral serve`."""

    def __init__(self, count: int, sock: socket.socket, settings: WorkerSettings) -> None:
        self.count = count
        self.sock = sock
        self.settings = settings
        self.procs: list[subprocess.Popen[bytes]] = []
        self._stopping = threading.Event()

    def _spawn(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", "from scheduler.cli.api_workers import main; main()"],
                                stdin=subprocess.PIPE, pass_fds=(self.settings.fd, self.settings.wake_fd),
                                env={**os.environ, "PYTHONPATH": _python_path()})
        assert proc.stdin is not None
        proc.stdin.write(pickle.dumps(self.settings))
        proc.stdin.flush()  # kept open: the API process exits when it closes (this process gone)
        return proc

    def start(self) -> None:
        self.procs = [self._spawn() for _ in range(self.count)]
        log.info("API: %d processes (pids %s) on one socket; this process (pid %d) runs the controller",
                 self.count, ", ".join(str(p.pid) for p in self.procs), os.getpid())

    def watch(self) -> None:
        """Until KeyboardInterrupt (SIGTERM, SIGINT): start again any API process that exited."""
        while not self._stopping.is_set():
            for i, proc in enumerate(self.procs):
                if proc.poll() is not None:
                    log.warning("API process %d exited with %s; starting another", proc.pid, proc.returncode)
                    _close(proc.stdin)
                    self._stopping.wait(RESTART_PAUSE_S)
                    if self._stopping.is_set():
                        return
                    self.procs[i] = self._spawn()
            self._stopping.wait(0.5)

    def stop(self) -> None:
        """Each API process stops accepting and finishes its requests in flight (SIGTERM), then is waited for."""
        self._stopping.set()
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            _close(proc.stdin)


def _python_path() -> str:
    """PYTHONPATH for an API process: this checkout's root first, so it runs the same Corral as `corral serve`."""
    root = str(Path(__file__).resolve().parents[2])
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    return os.pathsep.join([root, *rest])


def _close(stream: IO[bytes] | None) -> None:
    if stream is not None:
        with contextlib.suppress(OSError):
            stream.close()


def _exit_with_parent() -> None:
    """End this API process the moment `corral serve` is gone (its end of our stdin closed)."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        os._exit(0)


def _waker(fd: int) -> Callable[[], None]:
    def wake() -> None:
        with contextlib.suppress(BlockingIOError):  # the pipe is full: the controller has wakes pending already
            os.write(fd, b"!")

    return wake


def main() -> None:
    """An API process (started by `ApiWorkers`): serve the app on the inherited socket until SIGTERM."""
    from scheduler.live import doorbell
    from scheduler.live.store import Store
    from web import create_app
    from web.front import make_server

    settings: WorkerSettings = pickle.load(sys.stdin.buffer)
    threading.Thread(target=_exit_with_parent, name="corral-parent", daemon=True).start()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s[api %(process)d]: "
                                                   "%(message)s")
    sys.setswitchinterval(settings.switch_interval_s)

    def _terminate(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    store = Store.open(settings.db_url, migrate=False)  # `corral serve` brought the schema to head
    wake = _waker(settings.wake_fd)
    ringer = doorbell.Ringer(store) if doorbell.shared(store) else None

    def notify() -> None:
        wake()
        if ringer is not None:
            ringer.ring()

    app = create_app(store, notify=notify, config=settings.app_config,
                     controller_status=lambda: controller_status(store, settings.status))
    server = make_server(app, own_socket(settings.fd), settings.front)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        if ringer is not None:
            ringer.stop()
        store.close()


def own_socket(fd: int) -> socket.socket:
    """A socket of this process's own on the address of the one `corral serve` bound (`fd`, inherited, then closed),
    in the same SO_REUSEPORT group: the kernel then gives this process its share of the new connections."""
    bound = socket.socket(fileno=fd)
    sock = socket.socket(bound.family, bound.type, bound.proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(bound.getsockname())
    bound.close()
    return sock


def controller_status(store: Any, at_start: dict[str, Any]) -> dict[str, Any]:
    """The controller's role for /health from an API process: on SQLite it always leads (its status at start); on
    PostgreSQL the lease row says whether it still holds the lease."""
    if at_start.get("epoch") is None and store.engine.dialect.name == "sqlite":
        return dict(at_start)
    from scheduler.live.leader import Lease

    lease = Lease(store, replica=at_start.get("replica")).status()
    role = "leader" if lease.get("leader") == at_start.get("replica") else "standby"
    return {**at_start, "controller": role, **lease}

"""The CUDA MPS control daemon of one node, run while fractional jobs (share < 1) run there.

The hand-off between the node agent and the workers is files on the node, not a Ray actor:

* the agent writes `mps.json` in its node folder (the control binary, the pipe and log folders, or "disabled") and
  passes the folder to `ray start` as `CORRAL_NODE_DIR`, which every Ray worker process on that node inherits;
* a fractional worker takes a *lease* (a file named after it, holding its pid and the pid's start time) under an
  exclusive `flock`; the first lease starts `nvidia-cuda-mps-control -d`, and the release of the last one sends `quit`.

Why files: a lease outlives nothing it should not. A worker whose actor is killed before its finish hook runs leaves
a lease whose pid is gone, and the next acquire, release or the agent's periodic `sweep` drops it, so the daemon
stops even then. `flock` is released by the kernel when its holder dies, so no crash leaves the lock held. A per-node
Ray actor would need the agent to be a Ray driver, would die with the controller's view of the node, and would still
need the same liveness checks on its callers.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

NODE_DIR_ENV = "CORRAL_NODE_DIR"  # set by the agent for `ray start`; Ray's workers on the node inherit it
CONFIG_FILE = "mps.json"
CONTROL_TIMEOUT_S = 30.0
_SOCKET_PATH_MAX = 107  # sun_path: the daemon's socket is PIPE_DIR/control


class MpsError(Exception):
    """The MPS control daemon could not be started or stopped."""


@dataclass(frozen=True, slots=True)
class MpsConfig:
    control: str  # path of nvidia-cuda-mps-control
    pipe_dir: str  # CUDA_MPS_PIPE_DIRECTORY: the daemon's sockets; clients find it here
    log_dir: str  # CUDA_MPS_LOG_DIRECTORY

    def daemon_env(self) -> dict[str, str]:
        return {"CUDA_MPS_PIPE_DIRECTORY": self.pipe_dir, "CUDA_MPS_LOG_DIRECTORY": self.log_dir}

    def client_env(self) -> dict[str, str]:
        """What a job's process needs to reach this node's daemon rather than a default one in /tmp/nvidia-mps."""
        return {"CUDA_MPS_PIPE_DIRECTORY": self.pipe_dir}

    def socket_path_too_long(self) -> bool:
        return len(os.path.join(self.pipe_dir, "control")) > _SOCKET_PATH_MAX


def write_config(node_dir: Path, config: MpsConfig | None) -> None:
    """The agent's word to the workers: this node's daemon, or none (fractional jobs run without MPS)."""
    body = {"enabled": False} if config is None else {"enabled": True, **asdict(config)}
    tmp = node_dir / (CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(body))
    tmp.replace(node_dir / CONFIG_FILE)


def read_config(node_dir: Path) -> MpsConfig | None:
    try:
        body = json.loads((node_dir / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not body.get("enabled"):
        return None
    return MpsConfig(body["control"], body["pipe_dir"], body["log_dir"])


def _start_time(pid: int) -> str | None:
    """The pid's start time in clock ticks since boot (field 22 of /proc/PID/stat): with the pid it names one process,
    even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(lease: dict[str, object]) -> bool:
    pid = int(str(lease.get("pid", 0)))
    start = _start_time(pid) if pid > 0 else None
    return start is not None and start == lease.get("start")  # no start time: no such process


class MpsDaemon:
    """Starts and stops `nvidia-cuda-mps-control` with this node's pipe and log folders."""

    def __init__(self, config: MpsConfig) -> None:
        self.config = config

    def _run(self, args: list[str], stdin: str | None) -> None:
        Path(self.config.pipe_dir).mkdir(parents=True, exist_ok=True)
        Path(self.config.log_dir).mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run([self.config.control, *args], input=stdin, env={**os.environ,
                                  **self.config.daemon_env()}, capture_output=True, text=True,
                                  timeout=CONTROL_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MpsError(f"{self.config.control} {' '.join(args)}: {exc}") from None
        if proc.returncode != 0:
            raise MpsError(f"{self.config.control} {' '.join(args)} exited with {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-500:]}")

    def start(self) -> None:
        self._run(["-d"], None)  # -d: daemonise; it returns once the daemon is up

    def stop(self) -> None:
        self._run([], "quit\n")  # what `echo quit | nvidia-cuda-mps-control` does


class MpsManager:
    """The node's daemon and its leases. Every method takes the node-wide lock, so the agent and any number of
    workers (separate processes) can call them at once."""

    def __init__(self, node_dir: Path, config: MpsConfig) -> None:
        self.config = config
        self.daemon = MpsDaemon(config)
        self._root = node_dir / "mps"
        self._leases = self._root / "leases"
        self._running = self._root / "daemon-running"  # written after `-d` succeeded, removed after `quit`
        self._leases.mkdir(parents=True, exist_ok=True)

    @classmethod
    def for_this_node(cls) -> MpsManager | None:
        """In a worker: the manager of the node agent this Ray node was started by, or None (no agent, or an agent
        without MPS: virtual GPUs, no binary)."""
        node_dir = os.environ.get(NODE_DIR_ENV)
        if not node_dir:
            return None
        config = read_config(Path(node_dir))
        return cls(Path(node_dir), config) if config is not None else None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with (self._root / "lock").open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released on close, or by the kernel if this process dies
            yield

    def _live_leases(self) -> list[str]:
        """Lease owners whose process still runs; dead ones' files are removed."""
        live = []
        for path in sorted(self._leases.iterdir()):
            try:
                lease = json.loads(path.read_text())
            except (OSError, ValueError):
                lease = {}
            if _alive(lease):
                live.append(path.name)
            else:
                path.unlink(missing_ok=True)
        return live

    def acquire(self, owner: str, pid: int | None = None) -> dict[str, str]:
        """Take a lease for `owner` (a worker's name), starting the daemon if it is the first; returns the variables
        the job's process needs. MpsError if the daemon does not start (no lease is taken then)."""
        pid = os.getpid() if pid is None else pid
        with self._locked():
            self._live_leases()
            if not self._running.exists():
                self.daemon.start()
                self._running.write_text(str(pid))
            (self._leases / owner).write_text(json.dumps({"pid": pid, "start": _start_time(pid)}))
        return self.config.client_env()

    def release(self, owner: str) -> None:
        """Drop `owner`'s lease; stop the daemon if no live lease is left."""
        with self._locked():
            (self._leases / owner).unlink(missing_ok=True)
            self._stop_if_unused()

    def sweep(self) -> bool:
        """Drop leases of workers that died without releasing, and stop an unused daemon; True if it stopped."""
        with self._locked():
            return self._stop_if_unused()

    def leases(self) -> list[str]:
        with self._locked():
            return self._live_leases()

    def daemon_running(self) -> bool:
        return self._running.exists()

    def shutdown(self) -> None:
        """The agent is leaving (or starting over after a crash): stop a daemon it left running, forget leases."""
        with self._locked():
            for path in self._leases.iterdir():
                path.unlink(missing_ok=True)
            if self._running.exists():
                try:
                    self.daemon.stop()
                finally:
                    self._running.unlink(missing_ok=True)

    def _stop_if_unused(self) -> bool:
        if self._live_leases() or not self._running.exists():
            return False
        try:
            self.daemon.stop()
        finally:  # a daemon that will not quit is not ours to retry forever; the next start says if it still runs
            self._running.unlink(missing_ok=True)
        return True

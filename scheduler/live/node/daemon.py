"""`corral node start`: discover the GPUs, join Ray with Corral's resources for them, run MPS and report health (to
`health.json`, and to the Corral API with `--api`).

The agent is the parent of `ray start --block` and stays in the foreground until it exits, so whoever started the
agent (systemd, compose, a test) owns the node: SIGTERM or SIGINT to the agent reaches Ray, and the agent exits with
Ray's status.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import IO, Any

from scheduler.core.errors import SpecError
from scheduler.core.paths import corral_home
from scheduler.live import environments, ray_auth
from scheduler.live.node.environments import VENVS_VAR, declared_venvs
from scheduler.live.node.hardware import NodeHardware, discovered, virtual
from scheduler.live.node.health import readings, write_health
from scheduler.live.node.mps import NODE_DIR_ENV, MpsConfig, MpsError, MpsManager, write_config
from scheduler.live.node.nvml import Nvml, NvmlUnavailable
from scheduler.live.node.report import HealthPusher
from scheduler.live.runs import check_node_labels, check_rack, node_resources

MPS_CONTROL = "nvidia-cuda-mps-control"
TOKEN_ENV = "CORRAL_TOKEN"  # the admin token health is pushed with: the agent's alone, never passed on to Ray
# Node names become Ray resource names (corral_node_NAME, corral_gpu_NAME_I). No "_": the controller finds a node's
# GPUs by the prefix corral_gpu_NAME_, which for a node "a" would also match a node "a_b"'s.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$")
_PR_SET_PDEATHSIG = 1


class AgentError(Exception):
    """The agent cannot start; the message tells the user what to do."""


@dataclass(frozen=True)
class AgentOptions:
    address: str
    name: str
    gpus: int | None  # None: --gpus auto (NVML)
    preset: str | None = None
    rack: str | None = None  # the rack the node sits in (None: none named; it fills racks in order)
    labels: tuple[tuple[str, str], ...] = ()  # its operator's labels (`--label k=v`): constraints select nodes by them
    node_dir: Path | None = None  # default CORRAL_HOME/nodes/NAME
    mps_control: str | None = None  # None: nvidia-cuda-mps-control on PATH, if any
    ray_args: tuple[str, ...] = ()
    health_interval_s: float = 10.0
    dry_run: bool = False
    api: str | None = None  # the Corral API's base URL to push health to (None: health.json only)
    api_token: str | None = None  # an admin's token for it (from CORRAL_TOKEN)
    allow_unauthenticated_ray: bool = False  # join a Ray cluster without a token (docs/security.md says why not)

    @property
    def folder(self) -> Path:
        return self.node_dir if self.node_dir is not None else corral_home() / "nodes" / self.name


def default_name() -> str:
    return socket.gethostname().split(".")[0]


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise AgentError(f"--name {name!r}: use letters, digits, '.' and '-' (at most 63, no '_'): it becomes part of "
                         "Ray resource names")
    return name


def discover(opts: AgentOptions, nvml_module: ModuleType | Any | None = None) -> tuple[NodeHardware, Nvml | None]:
    """The node's GPUs: `--gpus N` virtual ones, or NVML's (with the session kept open for health readings)."""
    try:
        if opts.gpus is not None:
            return virtual(opts.gpus, opts.preset), None
        try:
            nvml = Nvml(nvml_module)
        except NvmlUnavailable as exc:
            raise AgentError(f"--gpus auto found no usable GPU: {exc}\nOn a machine without NVIDIA GPUs or driver, "
                             "pass --gpus N --preset P to offer N virtual GPUs (e.g. --gpus 8 --preset dgx-a100), "
                             "as `corral node-resources` does.") from None
        devices = nvml.devices()
        if not devices:
            nvml.close()
            raise AgentError("--gpus auto: NVML works but sees no GPU. Pass --gpus N --preset P for virtual GPUs.")
        return discovered(devices, opts.preset), nvml
    except SpecError as exc:
        raise AgentError(str(exc)) from None


def find_mps_control(explicit: str | None) -> str | None:
    """The MPS control program: `explicit` (a path or a name on PATH; "none": no MPS on this node), else the one on
    PATH, if any."""
    if explicit == "none":
        return None
    if explicit is not None:
        path = shutil.which(explicit)
        if path is None:
            raise AgentError(f"--mps-control {explicit}: not an executable file")
        return str(Path(path).resolve())
    return shutil.which(MPS_CONTROL)


def ray_executable() -> str:
    # The `ray` beside this Python first: the one whose version matches the Ray library the workers import.
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if found is None:
        raise AgentError("the `ray` command is not installed beside this Python nor on PATH")
    return found


def ray_command(opts: AgentOptions, resources: dict[str, float]) -> list[str]:
    return [ray_executable(), "start", f"--address={opts.address}", f"--resources={json.dumps(resources)}",
            "--block", *opts.ray_args]


def _die_with_parent() -> None:
    # Runs in the child before exec: if the agent is SIGKILLed (so cannot forward anything), the kernel sends Ray
    # SIGTERM, and Ray stops its node instead of staying behind in its own process group (`ray start` makes one).
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the forwarded signals still work
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class NodeAgent:
    def __init__(self, opts: AgentOptions, out: Callable[[str], None] | None = None,
                 nvml_module: ModuleType | Any | None = None) -> None:
        self.opts = opts
        self._out = out or (lambda line: print(line, flush=True))
        self._nvml_module = nvml_module
        self._child: subprocess.Popen[bytes] | None = None
        self._signals = 0
        self._stop = threading.Event()
        self.mps: MpsManager | None = None
        self.hardware: NodeHardware | None = None
        self._nvml: Nvml | None = None
        self._folder_lock: IO[str] | None = None
        self.pusher: HealthPusher | None = None

    # -- setup --

    def prepare(self, write: bool = True) -> list[str]:
        """Discover, write the node folder (hardware, MPS config) and return the `ray start` command. `write=False`
        (a dry run) changes nothing on disk: an agent may be running with this folder."""
        opts = self.opts
        check_name(opts.name)
        if opts.rack is not None:
            try:
                check_rack(opts.rack)
            except SpecError as exc:
                raise AgentError(str(exc)) from None
        try:
            check_node_labels(dict(opts.labels))
        except SpecError as exc:
            raise AgentError(str(exc)) from None
        self.hardware, self._nvml = discover(opts, self._nvml_module)
        hw = self.hardware
        folder = opts.folder
        if write:
            folder.mkdir(parents=True, exist_ok=True)
            self._hold_folder(folder)
            (folder / "node.json").write_text(json.dumps({"name": opts.name, "rack": opts.rack,
                                                                     "labels": dict(opts.labels), **hw.as_json()},
                                                         indent=1))
        self._out(f"corral node {opts.name}: {hw.summary}" + (f", preset {hw.preset}" if hw.preset else "")
                  + (f", rack {opts.rack}" if opts.rack else "")
                  + (f", labels {', '.join(f'{k}={v}' for k, v in opts.labels)}" if opts.labels else ""))
        venvs, venv_notes = declared_venvs()
        for note in [*hw.notes, *venv_notes]:
            self._out(f"  note: {note}")
        if venvs:
            self._out(f"  virtual environments ({VENVS_VAR}): {', '.join(venvs)}")
        self._setup_mps(folder, write)
        # The preset and the rack travel with the node: the controller models it as this server (no preset: as
        # `corral serve --preset`, the service's fallback) in this rack (none: it fills racks in order).
        # So do the names of the virtual environments its operator declared: a job naming one no node has is refused
        # at submission.
        resources = node_resources(opts.name, hw.gpus, hw.preset, opts.rack, dict(opts.labels), venvs)
        self._out(f"  resources: {json.dumps(resources)}")
        self._out(f"  node folder: {folder} (health in {folder / 'health.json'})")
        self._setup_push()
        return ray_command(opts, resources)

    def _setup_push(self) -> None:
        opts = self.opts
        if opts.api is None:
            return
        if not opts.api_token:
            # Not fatal: the node is useful without it, and the map shows it has no report.
            self._out(f"  health: not pushed to {opts.api}: {TOKEN_ENV} is not set (an admin creates a token with "
                      "`corral token create --user node-agent --admin`)")
            return
        self.pusher = HealthPusher(opts.api, opts.api_token, opts.name, self._out)
        self._out(f"  health: pushed to {self.pusher.url} every {opts.health_interval_s:g} s")

    def _hold_folder(self, folder: Path) -> None:
        # One agent per folder, for as long as it runs (the kernel drops the lock when it exits, however it exits):
        # a second agent would reset the first one's MPS daemon under its running jobs.
        self._folder_lock = (folder / "agent.lock").open("a")
        try:
            fcntl.flock(self._folder_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._folder_lock.close()
            raise AgentError(f"another node agent is running with {folder} (node {self.opts.name}); stop it, or "
                             "give this one another --name or --state-dir") from None

    def _setup_mps(self, folder: Path, write: bool) -> None:
        control = find_mps_control(self.opts.mps_control)
        if control is None:
            if write:
                write_config(folder, None)
            virtual_gpus = self.hardware is not None and self.hardware.source == "virtual"
            self._out(f"  MPS: no {MPS_CONTROL} on PATH: fractional jobs run without MPS, their shares are "
                      + ("bookkeeping only (virtual GPUs)" if virtual_gpus else
                         "NOT enforced on these real GPUs (install the CUDA toolkit's MPS or pass --mps-control)"))
            return
        config = MpsConfig(control, str(folder / "mps" / "pipe"), str(folder / "mps" / "log"))
        if write:
            self.mps = MpsManager(folder, config)
            try:
                self.mps.shutdown()  # a daemon a previous agent here left running (it crashed): start afresh
            except MpsError as exc:
                self._out(f"  MPS: stopping the previous daemon failed: {exc}")
            write_config(folder, config)
        self._out(f"  MPS: {control}, started before the first fractional job, stopped after the last; "
                  f"CUDA_MPS_PIPE_DIRECTORY={config.pipe_dir}")
        if config.socket_path_too_long():
            self._out("  MPS: warning: the pipe folder's path is too long for a Unix socket; pass a shorter "
                      "--state-dir")

    # -- running --

    def run(self) -> int:
        """Prepare, then run Ray in the foreground; returns the exit status to leave with."""
        argv = self.prepare(write=not self.opts.dry_run)
        if self.opts.dry_run:
            self._out("  dry run: would run " + " ".join(argv))
            self.close()
            return 0
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            env = {**os.environ, NODE_DIR_ENV: str(self.opts.folder), "CORRAL_NODE_NAME": self.opts.name}
            env.pop(TOKEN_ENV, None)  # an admin's token: Ray's workers, and the jobs they run, have no use for it
            env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            env.update(self._ray_env())
            self._child = subprocess.Popen(argv, env=env, preexec_fn=_die_with_parent)  # noqa: PLW1509 - see above
            self._out(f"  joining Ray at {self.opts.address}: ray start pid {self._child.pid}")
            if self._signals:  # a signal came before there was a child to forward it to
                self._child.send_signal(signal.SIGTERM)
            health = threading.Thread(target=self._health_loop, daemon=True, name="corral-node-health")
            health.start()
            code = self._child.wait()
            self._stop.set()
            health.join(timeout=self.opts.health_interval_s + 30)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.close()
        status = code if code >= 0 else 128 - code  # killed by a signal: report it as a shell would
        self._out(f"corral node {self.opts.name}: Ray exited with status {status}")
        return status

    def _ray_env(self) -> dict[str, str]:
        """What `ray start` needs to join safely: the cluster's token (Ray checks it on every call, so a job on this
        node cannot drive Ray as Ray's user), and a private folder for Ray's sockets and logs."""
        # Ray's private folder, and the plugin that prepares jobs' environments (`scheduler.live.environments`)
        env = {"RAY_TMPDIR": str(ray_auth.private_temp_dir()), **environments.plugin_env()}
        try:
            source = ray_auth.existing_token()
            if source is None and not self.opts.allow_unauthenticated_ray:
                raise AgentError(
                    f"no Ray token on this machine: copy the cluster's token (the server's CORRAL_HOME/ray-token) to "
                    f"{ray_auth.token_path()} with mode 0600, or set {ray_auth.TOKEN_PATH_VAR}; "
                    "--allow-unauthenticated-ray joins without one")
            ray_auth.check_cluster_auth(self.opts.address, self.opts.allow_unauthenticated_ray)
        except SpecError as exc:
            raise AgentError(str(exc)) from None
        if source is None:
            self._out("  Ray: joining WITHOUT a token (--allow-unauthenticated-ray): anyone who reaches the cluster "
                      "runs code as its workers' user")
            return env
        self._out(f"  Ray: token from {source}")
        return {**env, **ray_auth.token_env(source)}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        child = self._child
        if child is None or child.poll() is not None:
            return
        if self._signals == 1:
            # Both become SIGTERM: `ray start` drains and stops its node on SIGTERM. (Ray made itself its own process
            # group, so a terminal's Ctrl-C reaches only the agent: forwarding it is the only way Ray hears of it.)
            child.send_signal(signal.SIGTERM)
        else:  # asked twice: stop waiting for the drain
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)

    def _health_loop(self) -> None:
        while True:
            self.report_health()
            if self._stop.wait(self.opts.health_interval_s):
                return

    def report_health(self, agent: str = "running") -> dict[str, Any]:
        """Read the GPUs, write health.json, and push the report to the API (with `--api`; a failed push is logged by
        the pusher and tried again at the next reading)."""
        report = self.check_health(agent)
        if self.pusher is not None:
            self.pusher.push(report, self.opts.health_interval_s)
        return report

    def check_health(self, agent: str = "running") -> dict[str, Any]:
        """Read the GPUs, write health.json, and stop an MPS daemon whose workers died without releasing it."""
        assert self.hardware is not None
        mps_state: dict[str, object] = {"enabled": self.mps is not None}
        if self.mps is not None:
            try:
                if self.mps.sweep():
                    self._out("  MPS: stopped the daemon: its last client had died without releasing it")
            except MpsError as exc:
                self._out(f"  MPS: {exc}")
            mps_state.update(daemon_running=self.mps.daemon_running(), clients=self.mps.leases())
        return write_health(self.opts.folder, self.opts.name, self.hardware, readings(self.hardware, self._nvml),
                            mps_state, agent=agent)

    def close(self) -> None:
        """Give back what `prepare` took: the MPS daemon if one runs, NVML, the folder (health says "stopped")."""
        if self.mps is not None:
            try:
                self.mps.shutdown()  # the node left Ray, so its workers are gone: nothing needs the daemon
            except MpsError as exc:
                self._out(f"  MPS: {exc}")
        if self.hardware is not None and self._folder_lock is not None:  # not after a dry run: it wrote nothing
            with contextlib.suppress(OSError):
                self.report_health(agent="stopped")  # the API's last word from this agent: it has left
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None
        if self._folder_lock is not None:
            self._folder_lock.close()
            self._folder_lock = None


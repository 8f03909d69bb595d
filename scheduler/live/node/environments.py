"""A job's environment built on its node, inside Ray's runtime environment agent (`ray_backend.CorralEnvPlugin` calls
`prepare`, then the worker's process gets `context_vars`): a virtual environment with the job's pip packages, the
operator's named virtual environment, or a container image pulled by the node's container runtime.

What only the node's operator names comes from the node's environment, read where the agent runs:
`CORRAL_WHEELS` (a folder of wheels: pip installs from it alone, `--no-index --find-links`; unset, pip uses the
node's own index configuration) and `CORRAL_VENVS` (`name=/path/to/venv,...`: the virtual environments a job may name).

Each environment is built once per node, in `CORRAL_HOME/envs/<host>/<hash>` (`CORRAL_ENVS` to say elsewhere; the hash of what it holds and where its
packages come from), under a lock: two workers of one job, or two jobs asking for the same packages, share it. Its
`build.log` (pip's output) and `build.json` (its build time) are what the job's log shows of its preparation.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scheduler.core.paths import corral_home
from scheduler.live.environments import EnvRefused, check_venv

WHEELS_VAR = "CORRAL_WHEELS"
VENVS_VAR = "CORRAL_VENVS"
ENVS_VAR = "CORRAL_ENVS"  # where the node builds environments (default: CORRAL_HOME/envs/<host>)
CONTAINER_RUNTIMES = ("podman", "apptainer")  # in the order they are preferred
HOST_ONLY = ("PATH", "VIRTUAL_ENV")  # the host's programs mean nothing inside an image
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
BUILD_TIMEOUT_S = 1800.0  # one pip install or image pull, at most

# What the worker's process learns of its environment (`context_vars`), read by `scheduler.live.worker`.
BIN_VAR = "CORRAL_ENV_BIN"  # put first on the job's PATH: its `python` is the environment's
LOG_VAR = "CORRAL_ENV_LOG"  # the preparation's log, copied into the job's
BUILD_VAR = "CORRAL_ENV_BUILD"  # what the preparation did, as JSON (seconds, whether it was cached)
RUNTIME_VAR = "CORRAL_CONTAINER_RUNTIME"
IMAGE_VAR = "CORRAL_CONTAINER_IMAGE"


class PrepareError(RuntimeError):
    """The node cannot prepare this environment; the message says why, and is the job's reason."""


def wheel_dir() -> Path | None:
    value = os.environ.get(WHEELS_VAR)
    return Path(value).expanduser() if value else None


def named_venvs() -> dict[str, Path]:
    """The virtual environments the operator declared on this node (`CORRAL_VENVS`)."""
    out = {}
    for item in (os.environ.get(VENVS_VAR) or "").split(","):
        name, sep, path = item.strip().partition("=")
        if sep and name and path:
            out[name.strip()] = Path(path.strip()).expanduser()
    return out


def declared_venvs() -> tuple[tuple[str, ...], list[str]]:
    """The names of the virtual environments declared on this node (`named_venvs`) that a job may name, sorted, which
    the node advertises (`scheduler.live.runs.node_resources`); and a note for each declared name no job could name
    (`scheduler.live.environments.check_venv`), which is left out."""
    names, notes = [], []
    for name in sorted(named_venvs()):
        try:
            names.append(check_venv(name))
        except EnvRefused as exc:
            notes.append(f"{VENVS_VAR}: {exc}; not advertised")
    return tuple(names), notes


def container_runtime() -> str | None:
    """The node's container runtime's name, the first of CONTAINER_RUNTIMES on its PATH; None if it has none."""
    return next((name for name in CONTAINER_RUNTIMES if shutil.which(name)), None)


def env_hash(config: dict[str, Any]) -> str:
    """What an environment is cached by: what it holds and where its packages come from (another wheel folder or
    Python is another environment)."""
    key = {"config": config, "wheels": str(wheel_dir() or ""), "python": sys.executable}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def envs_root() -> Path:
    """Where this node keeps its environments: `CORRAL_ENVS`, else `CORRAL_HOME/envs/<host>` (the home may be a folder
    the nodes share: each builds its own, never one into another's while it runs there)."""
    named = os.environ.get(ENVS_VAR)
    return Path(named).expanduser() if named else corral_home() / "envs" / socket.gethostname()


def env_dir(config: dict[str, Any], root: Path | None = None) -> Path:
    return (root or envs_root()) / env_hash(config)


# Ray's agent keeps built environments under these URIs in its cache of the plugin's (`ray_backend.CorralEnvPlugin`):
# it counts the workers using each, and once the cache holds more than its size (RAY_RUNTIME_ENV_CORRAL_ENV_CACHE_
# SIZE_GB, 10 by default) it deletes the least recently used one no worker uses (`remove`).
URI_SCHEME = "corral-env://"
HASH_RE = re.compile(r"[0-9a-f]{32}")


def env_uri(config: dict[str, Any]) -> str | None:
    """The URI of the environment `config` builds; None for an operator's venv, which nothing builds or deletes."""
    return None if "venv" in config else URI_SCHEME + env_hash(config)


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under `folder` (links not followed): what its environment takes of the node's disk."""
    total = 0
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(parent, name)).st_size
    return total


def remove(uri: str, root: Path | None = None) -> int:
    """Delete the environment `uri` names, under its build lock (never while it is being built): the bytes freed. A URI
    of anything but an environment's hash deletes nothing, so no other path can be reached through it. (A podman
    image stays in podman's own storage, for its `podman image prune`.)"""
    name = uri.removeprefix(URI_SCHEME)
    if not uri.startswith(URI_SCHEME) or not HASH_RE.fullmatch(name):
        return 0
    folder = (root or envs_root()) / name
    with _locked(folder.with_suffix(".lock")):
        freed = folder_bytes(folder)
        shutil.rmtree(folder, ignore_errors=True)
    folder.with_suffix(".lock").unlink(missing_ok=True)
    return freed


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: list[str], log: Path, what: str) -> None:
    with log.open("ab") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        try:
            code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=BUILD_TIMEOUT_S, check=False).returncode
        except subprocess.TimeoutExpired:
            raise PrepareError(f"{what}: no result within {BUILD_TIMEOUT_S:g} s") from None
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-12:]
        raise PrepareError(f"{what} failed (exit code {code}):\n" + "\n".join(tail))


def _pip_env(folder: Path, packages: list[str], log: Path) -> None:
    """A virtual environment of this node's Python with `packages`: pip reads them from a requirements file (a package
    is never an argument), from the operator's wheel folder alone if there is one."""
    venv = folder / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], log, "creating the virtual environment")
    requirements = folder / "requirements.txt"
    requirements.write_text("".join(p + "\n" for p in packages))
    source = ["--no-index", "--find-links", str(wheels)] if (wheels := wheel_dir()) is not None else []
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-input",
          "--disable-pip-version-check", "--no-cache-dir", *source, "-r", str(requirements)], log,
         "pip install" + (f" from {wheels}" if wheels else ""))


def _image(folder: Path, image: str, log: Path) -> str:
    runtime = container_runtime()
    if runtime is None:
        raise PrepareError(f"image {image}: this node has no container runtime (neither {' nor '.join(CONTAINER_RUNTIMES)}"
                           " is on its PATH)")
    if runtime == "podman":
        _run(["podman", "pull", "--quiet", image], log, f"podman pull {image}")
    else:  # apptainer runs a local image file: pulled once into the environment's folder
        _run(["apptainer", "pull", "--force", str(folder / "image.sif"), f"docker://{image}"], log,
             f"apptainer pull {image}")
    return runtime


def prepare(config: dict[str, Any], root: Path | None = None) -> dict[str, str]:
    """Build the environment `config` describes on this node, or find it built, and return what the worker's process
    gets (`context_vars`). PrepareError says why it cannot be."""
    if "venv" in config:
        return context_vars(config, root)  # nothing to build: the operator's, checked there
    folder = env_dir(config, root)
    folder.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(folder.parent, 0o711)  # a job running as its own account runs its environment's python, lists nothing
    with _locked(folder.with_suffix(".lock")):
        done = folder / "build.json"
        if done.exists():
            return context_vars(config, root, cached=True)
        shutil.rmtree(folder, ignore_errors=True)  # an earlier build that failed half-way
        folder.mkdir(parents=True)
        log = folder / "build.log"
        started = time.monotonic()
        try:
            if "pip" in config:
                _pip_env(folder, list(config["pip"]), log)
            if "image" in config:
                _image(folder, config["image"], log)
        except PrepareError:
            if log.exists():  # kept for the operator; the folder is not cached
                shutil.copyfile(log, folder.with_name(folder.name + ".failed.log"))
            shutil.rmtree(folder, ignore_errors=True)
            raise
        done.write_text(json.dumps({"build_s": round(time.monotonic() - started, 3), "at": time.time()}))
    return context_vars(config, root)


def context_vars(config: dict[str, Any], root: Path | None = None, cached: bool = False) -> dict[str, str]:
    """The variables Ray gives the worker's process: where the environment's programs and build log are."""
    if "venv" in config:
        venvs = named_venvs()
        path = venvs.get(config["venv"])
        if path is None:
            known = ", ".join(sorted(venvs)) or "none"
            raise PrepareError(f"no virtual environment {config['venv']!r} on this node ({VENVS_VAR} names: {known})")
        if not (path / "bin" / "python").exists():
            raise PrepareError(f"virtual environment {config['venv']!r}: {path}/bin/python is missing on this node")
        return {BIN_VAR: str(path / "bin"), BUILD_VAR: json.dumps({"venv": config["venv"]})}
    folder = env_dir(config, root)
    out = {LOG_VAR: str(folder / "build.log")}
    built = json.loads((folder / "build.json").read_text()) if (folder / "build.json").exists() else {}
    out[BUILD_VAR] = json.dumps({**built, "cached": cached, "hash": folder.name})
    if "pip" in config:
        out[BIN_VAR] = str(folder / "venv" / "bin")
    if "image" in config:
        runtime = container_runtime() or ""
        out[RUNTIME_VAR] = runtime
        out[IMAGE_VAR] = str(folder / "image.sif") if runtime == "apptainer" else config["image"]
    return out


def container_argv(runtime: str, image: str, command: str, workdir: str, env_names: list[str]) -> list[str]:
    """The job's command inside its image: the job's folder mounted at the same path and its working directory, its
    variables passed by name (their values stay in the environment, off the command line), the host's network (the
    rendezvous of a multi-node job) and its GPUs."""
    if runtime == "podman":
        passed = [arg for name in env_names if name not in HOST_ONLY for arg in ("--env", name)]
        # GPUs through NVIDIA's CDI spec, where the node has one (`nvidia-ctk cdi generate`)
        gpus = ["--device", "nvidia.com/gpu=all"] if any(Path(d, "nvidia.yaml").exists() for d in CDI_DIRS) else []
        return ["podman", "run", "--rm", "--network=host", *gpus, "-v", f"{workdir}:{workdir}", "-w", workdir,
                *passed, image, "/bin/sh", "-c", command]
    return ["apptainer", "exec", "--nv", "--bind", workdir, "--pwd", workdir, image, "/bin/sh", "-c", command]


def job_vars(env: dict[str, str]) -> dict[str, str]:
    """A command job's variables inside the environment its worker was started in: the environment's programs first
    on its PATH (its `python` is the environment's), as `activate` would. Unchanged outside one."""
    bin_dir = os.environ.get(BIN_VAR)
    if not bin_dir:
        return env
    return {**env, "PATH": f"{bin_dir}:{env.get('PATH', '')}", "VIRTUAL_ENV": str(Path(bin_dir).parent)}


def preparation_log() -> str:
    """What the job's log says of its preparation, in the worker's process: what was built and how long it took, and
    the build's own log (pip's output); "" outside an environment."""
    built = os.environ.get(BUILD_VAR)
    if not built:
        return ""
    try:
        info = json.loads(built)
    except ValueError:
        info = {}
    if "venv" in info:
        return f"[corral] environment: the node's virtual environment {info['venv']!r}\n"
    # Ray's agent reuses a prepared environment for the next worker that asks for the same one, so this may describe
    # a build for an earlier run: it says when it was.
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["at"])) if "at" in info else "earlier"
    took = f" in {info['build_s']:.1f} s" if "build_s" in info else ""
    lines = [f"[corral] preparing: environment {info.get('hash', '')}, built on this node {when}{took}\n"]
    log = os.environ.get(LOG_VAR)
    if log:
        with contextlib.suppress(OSError):
            lines += [f"[corral] preparing | {line}\n" for line in Path(log).read_text(errors="replace").splitlines()]
    return "".join(lines)

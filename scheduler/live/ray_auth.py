"""Ray behind a token, in private folders: what every Ray cluster Corral starts or joins is set up with.

Ray runs whatever code anyone who reaches its GCS sends it, as the user Ray runs as. Ray (2.52 and later) checks a
shared secret on every RPC when `RAY_AUTH_MODE=token`; the secret is read from `RAY_AUTH_TOKEN`, or from the file
`RAY_AUTH_TOKEN_PATH` names. Corral keeps it in `CORRAL_HOME/ray-token` (0600, the server's user alone): the server,
the Ray processes it starts and the node agents read it there (or where `RAY_AUTH_TOKEN_PATH` says), and a job never
sees it (a command job's environment is built from scratch: `scheduler.live.worker.command_env`).

Ray's session folders (its Unix sockets, the object store's socket, logs) are made world-writable by Ray itself, so
they live under a folder only the server's user may enter: `CORRAL_HOME/ray`.

This module imports no Ray: it writes files and environment variables, read by Ray's processes when they start, and
asks a cluster whether it wants a token from a separate process (which does import Ray).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from scheduler.core.errors import SpecError
from scheduler.core.paths import corral_home

TOKEN_FILE = "ray-token"
MODE_VAR, TOKEN_VAR, TOKEN_PATH_VAR = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"
# Ray's longest socket path below its temporary folder: ray/session_2026-11-25_01-13-49_272967_5479/sockets/plasma_store
# (Unix sockets' paths are at most 107 bytes on Linux).
_SOCKET_TAIL = 66
_SOCKET_MAX = 107

AUTH_PROBE_TIMEOUT_S = 30.0
# Run in a separate process holding no token (an empty HOME hides ~/.ray/auth_token): exit 0 if the GCS answers it,
# 10 if the GCS refuses it for want of a token. Any other end: the GCS could not be asked (ray.init says why).
_AUTH_PROBE = """
import sys
from ray._private.services import canonicalize_bootstrap_address_or_die
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
address = canonicalize_bootstrap_address_or_die(None) if sys.argv[1] == "auto" else sys.argv[1]
try:
    GcsClient(address=address).internal_kv_keys(b"corral", None, timeout=5)
except AuthenticationError:
    sys.exit(10)
"""

log = logging.getLogger(__name__)


def token_path(home: Path | None = None) -> Path:
    return (home or corral_home()) / TOKEN_FILE


def ensure_token(home: Path | None = None) -> Path:
    """The cluster token's file under CORRAL_HOME, made (256 random bits, mode 0600) if there is none yet. An existing
    one is kept, so a restarted server or node agent rejoins the Ray processes that outlived it."""
    path = token_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    if not path.read_text().strip():
        raise SpecError(f"{path} is empty: delete it and start again to make a new Ray token")
    return path


def existing_token(home: Path | None = None) -> Path | str | None:
    """Where the token for joining a Ray cluster comes from, in Ray's own order of preference: `RAY_AUTH_TOKEN`
    (returned as the variable's name), the file `RAY_AUTH_TOKEN_PATH` names, then `CORRAL_HOME/ray-token`. None: no
    token anywhere."""
    if os.environ.get(TOKEN_VAR):
        return TOKEN_VAR
    named = os.environ.get(TOKEN_PATH_VAR)
    if named:
        if not Path(named).is_file():
            raise SpecError(f"{TOKEN_PATH_VAR}={named}: no such file")
        return Path(named)
    path = token_path(home)
    return path if path.is_file() else None


def token_env(source: Path | str) -> dict[str, str]:
    """The variables that make a Ray process (and those it starts) authenticate with this token."""
    env = {MODE_VAR: "token"}
    if isinstance(source, Path):
        env[TOKEN_PATH_VAR] = str(source)
    return env


def use_token(source: Path | str) -> None:
    """Authenticate this process, and every Ray process it starts from now on, with the token."""
    os.environ.update(token_env(source))
    if isinstance(source, Path):
        os.environ.pop(TOKEN_VAR, None)


# What `use_token` and a local cluster's private folder set in this process's environment.
RAY_ENV = (MODE_VAR, TOKEN_VAR, TOKEN_PATH_VAR, "RAY_TMPDIR")


def saved_env() -> dict[str, str | None]:
    """The Ray variables this module may set, as they are now (to be given back with `restore_env`: a test, or a
    process that starts a second cluster, must not inherit the first one's token)."""
    return {k: os.environ.get(k) for k in RAY_ENV}


def restore_env(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def private_temp_dir(home: Path | None = None) -> Path:
    """A folder for Ray's session folders that only the server's user may enter: `CORRAL_HOME/ray` (0700), or, when
    CORRAL_HOME's path is too long for Ray's Unix sockets under it, a fresh 0700 folder in the system's temporary
    directory. Ray makes its own folders inside it world-writable; this one's mode is what keeps others out. An
    operator's `RAY_TMPDIR` (e.g. a container-local folder) is used instead, made private the same way."""
    if os.environ.get("RAY_TMPDIR"):
        folder = Path(os.environ["RAY_TMPDIR"])
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        return folder
    folder = (home or corral_home()) / "ray"
    if len(str(folder)) + 1 + _SOCKET_TAIL > _SOCKET_MAX:
        return Path(tempfile.mkdtemp(prefix="corral-ray-"))  # mkdtemp makes it 0700
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder


def cluster_requires_token(address: str) -> bool | None:
    """Whether the Ray cluster at `address` refuses a client without a token (None: it could not be asked)."""
    if address != "auto" and not _reachable(address):
        return None  # nobody there yet (a head still starting): whoever joins finds out
    with tempfile.TemporaryDirectory() as empty_home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
        env["HOME"] = empty_home
        try:
            proc = subprocess.run([sys.executable, "-c", _AUTH_PROBE, address], env=env, capture_output=True,
                                  timeout=AUTH_PROBE_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return None
    return {0: False, 10: True}.get(proc.returncode)


def _reachable(address: str, timeout_s: float = 3.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def check_cluster_auth(address: str, allow_unauthenticated: bool) -> None:
    """Refuse to join a Ray cluster that lets anyone in, unless the operator said so; and say plainly what to do
    when the cluster wants a token this machine does not have."""
    required = cluster_requires_token(address)
    if required is False and not allow_unauthenticated:
        raise SpecError(
            f"the Ray cluster at {address} accepts clients without a token: anyone who reaches it can run code as its "
            "workers' user. Start every Ray node with RAY_AUTH_MODE=token and the token of CORRAL_HOME/ray-token "
            "(docs/deployment.md), or pass --allow-unauthenticated-ray to join it anyway")
    if required is False:
        log.warning("joining the Ray cluster at %s, which accepts clients without a token "
                    "(--allow-unauthenticated-ray)", address)
    if required and existing_token() is None:
        raise SpecError(
            f"the Ray cluster at {address} requires a token: copy its token to {token_path()} (mode 0600) "
            f"or set {TOKEN_PATH_VAR}")

"""A command job's environment: pip packages, a node's named virtual environment, a container image and a working
directory uploaded with the job. What a user may give is checked here (the API's schema calls these rules), and what
the controller hands Ray is built here, as Ray's `runtime_env` of the job's workers (`runtime_env`).

Nothing a user sends becomes code on the server, a path or an option to pip: a package is a PEP 508 requirement
with no URL (`pip` gets it in a requirements file, never as an argument), a virtual environment and a wheel folder
are named by the node's operator (`CORRAL_VENVS`, `CORRAL_WHEELS`), and a working directory is a zip archive kept as
data under its content's hash, never unpacked on the server. The node builds the environment
(`scheduler.live.node.environments`), inside Ray's runtime environment agent, which caches it per node.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import re
import stat
import zipfile
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from scheduler.core.paths import corral_home

MAX_PACKAGES = 64
MAX_PACKAGE_CHARS = 200
# A working directory travels in the submission's JSON (the body is at most web.limits.MAX_BODY_BYTES, 1 MiB): the
# archive at most this many bytes, its files at most MAX_UNZIPPED_BYTES and MAX_ARCHIVE_FILES once unpacked (a zip
# bomb is refused at submission, before Ray unpacks it on a node). Larger code belongs in a wheel in the node's folder.
MAX_ARCHIVE_BYTES = 512 * 1024
MAX_UNZIPPED_BYTES = 64 * 1024 * 1024
MAX_ARCHIVE_FILES = 4096
# OCI references: [registry[:port]/]path[:tag][@digest], lower-case path parts (the distribution spec's grammar,
# loosely: no spaces, no option-like leading '-', no scheme).
IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*(:[0-9]{1,5})?(/[a-z0-9][a-z0-9._-]*)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?"
                      r"(@sha256:[0-9a-f]{64})?$")
MAX_IMAGE_CHARS = 255
VENV_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

# How long a run's workers may take to have their environment prepared (a virtual environment and its packages, an
# image pulled; each step at most `node.environments.BUILD_TIMEOUT_S`): Ray's setup timeout for it, and the time the
# controller gives such a run on top of its start timeout.
PREPARE_TIMEOUT_S = 3600.0

# The name Corral's runtime-environment plugin answers to in a `runtime_env` (`ray_backend.CorralEnvPlugin`), and the
# variable that loads it in every Ray node's runtime environment agent (Ray reads it when the node starts).
PLUGIN_FIELD = "corral_env"
PLUGIN_CLASS = "scheduler.live.ray_backend.CorralEnvPlugin"
PLUGINS_VAR = "RAY_RUNTIME_ENV_PLUGINS"


def plugin_env() -> dict[str, str]:
    """The variable that makes a Ray node's agent load Corral's plugin: in the environment of `ray start` (`corral
    node start` sets it) or of a local cluster's processes (`RayBackend.local`)."""
    return {PLUGINS_VAR: json.dumps([{"class": PLUGIN_CLASS}])}


class EnvRefused(ValueError):
    """A field of an environment is refused: `field` names it, the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_package(spec: str) -> str:
    """A pip package: a PEP 508 requirement (name, extras, version, markers), never a URL, a path or an option."""
    if not isinstance(spec, str) or not spec.strip() or len(spec) > MAX_PACKAGE_CHARS:
        raise EnvRefused("pip", f"a package is 1 to {MAX_PACKAGE_CHARS} characters, got {spec!r:.60}")
    if spec.lstrip().startswith("-"):
        raise EnvRefused("pip", f"{spec!r:.60}: a package, not an option to pip")
    if "$" in spec:  # pip expands ${VAR} in a requirements file: the node's variables are none of the job's business
        raise EnvRefused("pip", f"{spec!r:.60}: no '$' (pip would read it as a variable of the node's)")
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        raise EnvRefused("pip", f"{spec!r:.60} is not a requirement such as 'numpy>=1.26': {exc}") from None
    if req.url:
        raise EnvRefused("pip", f"{spec!r:.60}: a package from the node's index or wheel folder, not a URL")
    return str(req)


def check_image(image: str) -> str:
    if len(image) > MAX_IMAGE_CHARS or not IMAGE_RE.match(image):
        raise EnvRefused("image", f"{image!r:.80} is not an image reference such as 'docker.io/library/"
                                "python:3.11' (lower-case registry and path, an optional tag or sha256 digest)")
    return image


def check_venv(name: str) -> str:
    if not VENV_NAME_RE.match(name):
        raise EnvRefused("venv", f"{name!r:.80}: a virtual environment is named by the node's operator "
                                "(1 to 64 letters, digits, '.', '_' or '-'), never a path")
    return name


def archive_of(encoded: str) -> bytes:
    """The working directory's zip archive from its base64 text, checked: its size, its files' count and unpacked
    size, and every name a plain relative path (no '..', no absolute path, no link, nothing but files and folders)."""
    if len(encoded) > (MAX_ARCHIVE_BYTES * 4) // 3 + 4:
        raise EnvRefused("working_dir", f"the archive is over {MAX_ARCHIVE_BYTES // 1024} KiB")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise EnvRefused("working_dir", "not base64 text of a zip archive") from None
    if len(data) > MAX_ARCHIVE_BYTES:
        raise EnvRefused("working_dir", f"the archive is over {MAX_ARCHIVE_BYTES // 1024} KiB")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError):
        raise EnvRefused("working_dir", "not a zip archive") from None
    if len(infos) > MAX_ARCHIVE_FILES:
        raise EnvRefused("working_dir", f"at most {MAX_ARCHIVE_FILES} files, got {len(infos)}")
    if sum(i.file_size for i in infos) > MAX_UNZIPPED_BYTES:
        raise EnvRefused("working_dir", f"at most {MAX_UNZIPPED_BYTES // 2**20} MiB once unpacked")
    for info in infos:
        name = info.filename
        parts = name.replace("\\", "/").split("/")
        kind = stat.S_IFMT(info.external_attr >> 16)  # a Unix file type, when the archiver wrote one
        if name.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
            raise EnvRefused("working_dir", f"{name!r:.80}: names inside the archive are relative paths")
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            raise EnvRefused("working_dir", f"{name!r:.80}: only files and folders (no links)")
    return data


def check(env: dict[str, Any]) -> dict[str, Any]:
    """A submitted environment, checked and normalised (EnvRefused naming the field otherwise): what the job's
    row keeps. Empty parts are dropped; None if nothing is left."""
    out: dict[str, Any] = {}
    packages = env.get("pip") or []
    if len(packages) > MAX_PACKAGES:
        raise EnvRefused("pip", f"at most {MAX_PACKAGES} packages, got {len(packages)}")
    if packages:
        out["pip"] = [check_package(p) for p in packages]
    if env.get("venv"):
        out["venv"] = check_venv(env["venv"])
    if env.get("image"):
        out["image"] = check_image(env["image"])
    if env.get("working_dir"):
        archive_of(env["working_dir"])
        out["working_dir"] = env["working_dir"]
    if "pip" in out and "venv" in out:
        raise EnvRefused("venv", "give pip packages or a node's virtual environment, not both (an operator "
                                "adds packages to a named environment)")
    if "image" in out and ("pip" in out or "venv" in out):
        raise EnvRefused("image", "a container image brings its own Python: no pip packages or venv with it")
    return out


def summary(env: dict[str, Any] | None) -> dict[str, Any] | None:
    """An environment as a job's JSON shows it: the archive by its size and hash, not its bytes."""
    if not env:
        return None
    shown = {k: v for k, v in env.items() if k != "working_dir"}
    if "working_dir" in env:
        data = base64.b64decode(env["working_dir"])
        shown["working_dir"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return shown


def archive_path(encoded: str, home: Path | None = None) -> Path:
    """The working directory's archive as a file Ray can upload, named by its content's hash under the home's
    `workdirs/` (written once; the name is never the user's)."""
    data = base64.b64decode(encoded)
    folder = (home or corral_home()) / "workdirs"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()}.zip"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def archive_folder(folder: Path) -> str:
    """A folder as a job's `working_dir` (the `corral submit --working-dir` side): its files, zipped and base64,
    following no link; EnvRefused past the sizes a submission may carry."""
    if not folder.is_dir():
        raise EnvRefused("working_dir", f"{folder} is not a folder")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            zf.write(path, path.relative_to(folder).as_posix())
            if buf.tell() > MAX_ARCHIVE_BYTES:
                break
    if buf.tell() > MAX_ARCHIVE_BYTES:
        raise EnvRefused("working_dir", f"{folder} zips to over {MAX_ARCHIVE_BYTES // 1024} KiB: put larger code "
                         "in a wheel in the nodes' wheel folder")
    encoded = base64.b64encode(buf.getvalue()).decode()
    archive_of(encoded)  # the server's checks, before the request
    return encoded


def runtime_env(env: dict[str, Any] | None) -> dict[str, Any] | None:
    """Ray's `runtime_env` for the workers of a job with environment `env` (its archive written by `archive_path`):
    Ray's own `working_dir`, and Corral's plugin for the rest (built on the node: `scheduler.live.node.environments`).
    None: the job runs in the node's own environment."""
    if not env:
        return None
    out: dict[str, Any] = {}
    if "working_dir" in env:
        out["working_dir"] = str(archive_path(env["working_dir"]))
    node_side = {k: env[k] for k in ("pip", "venv", "image") if k in env}
    if node_side:
        out[PLUGIN_FIELD] = node_side
    if out:  # (Ray's default is 10 minutes: a large pip install takes longer)
        out["config"] = {"setup_timeout_seconds": int(PREPARE_TIMEOUT_S)}
    return out or None

"""A command job's environment as a submission gives it, and as a job's JSON shows it: the rules are
`scheduler.live.environments`' (one place), each refusal a 422 naming `environment.<field>`."""

from __future__ import annotations

from typing import Any

from marshmallow import ValidationError, fields, post_load, validate

from scheduler.live import environments as envs
from web.schemas.base import RequestSchema


class EnvironmentSchema(RequestSchema):
    pip = fields.List(fields.String(validate=validate.Length(min=1, max=envs.MAX_PACKAGE_CHARS)), load_default=None,
                      validate=validate.Length(max=envs.MAX_PACKAGES), metadata={"description": (
                          f"packages (at most {envs.MAX_PACKAGES}) as requirements, e.g. 'numpy>=1.26': installed on "
                          "the node into an environment of their own, from its operator's wheel folder or its package "
                          "index (never a URL, a path or an option to pip)")})
    venv = fields.String(load_default=None, metadata={
        "description": "a virtual environment the node's operator named (CORRAL_VENVS): the job's `python` is its"})
    image = fields.String(load_default=None, metadata={
        "description": "a container image the command runs in, on a node with podman or Apptainer"})
    working_dir = fields.String(load_default=None, metadata={
        "description": f"a zip archive of the folder the command runs in, as base64 (at most "
                       f"{envs.MAX_ARCHIVE_BYTES // 1024} KiB; {envs.MAX_UNZIPPED_BYTES // 2**20} MiB and "
                       f"{envs.MAX_ARCHIVE_FILES} files unpacked)"})

    @post_load
    def _checked(self, data: dict[str, Any], **_: Any) -> dict[str, Any] | None:
        try:
            return envs.check(data) or None
        except envs.EnvRefused as exc:
            raise ValidationError({exc.field: [str(exc)]}) from None


class EnvironmentShown(fields.Field):
    """An environment as a job's JSON shows it (`environments.summary`: the archive by its size and hash)."""

    def _serialize(self, value: Any | None, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        return envs.summary(value)


def environment_rules(data: dict[str, Any]) -> dict[str, list[str]]:
    """What an environment may go with, by field: a command job only; a working directory uploaded or named on the
    node (`workdir`), not both, and not for an array."""
    env = data.get("environment")
    if not env:
        return {}
    if data.get("kind") != "command":
        return {"environment": ["Command jobs only: an emulated job runs no command."]}
    if "working_dir" in env and data.get("workdir"):
        return {"workdir": ["Give workdir or environment.working_dir, not both."]}
    if "working_dir" in env and data.get("array"):  # each task is a row of its own: a copy of the archive each
        return {"environment": ["An array's tasks take no working_dir: put shared code in a wheel in the nodes' wheel "
                                "folder, or in a node's virtual environment."]}
    return {}

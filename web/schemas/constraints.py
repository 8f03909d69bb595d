"""A job's constraints as a submission gives them and a job shows them: where it may run (`scheduler.core.constraints`:
GPU type, node labels, node list, exclusion). The core checks them; a refusal is a 422 naming the field."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, post_load, validate

from scheduler.core.constraints import LABEL_RE, MAX_LABELS, MAX_NODES, ConstraintError, Constraints
from web.schemas.base import RequestSchema

_NAME = fields.String(validate=validate.Length(min=1, max=253))


class ConstraintsArgs(RequestSchema):
    """Where a submitted job may run. Each part is optional; all that are given must hold."""

    gpu_type = fields.String(load_default=None, validate=validate.Regexp(LABEL_RE), metadata={
        "description": "its GPUs' type: a type's name (H100-80GB) or its family (h100), any case"})
    labels = fields.Dict(keys=fields.String(), values=fields.String(), load_default=None,
                         validate=validate.Length(max=MAX_LABELS), metadata={
        "maxProperties": MAX_LABELS, "description": (
            "node labels every node it runs on carries, {key: value}: the hardware's (gpu=h100, interconnect=nvlink) "
            "and those given by `corral node start --label`")})
    nodes = fields.List(_NAME, load_default=None, validate=validate.Length(max=MAX_NODES), metadata={
        "description": f"only these nodes, by name (at most {MAX_NODES}; Slurm's --nodelist)"})
    # (`exclude` is a Schema's own attribute: the field is named otherwise, and keyed `exclude`.)
    excluded = fields.List(_NAME, data_key="exclude", load_default=None, validate=validate.Length(max=MAX_NODES),
                           metadata={"description": f"never these nodes (at most {MAX_NODES}; Slurm's --exclude)"})

    @post_load
    def _checked(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any] | None:
        """The core's rule (`Constraints.make`), its refusal naming the part; stored as `to_json` gives it (None:
        none given)."""
        try:
            made = Constraints.make(data.get("gpu_type"), data.get("labels") or {}, data.get("nodes") or (),
                                    data.get("excluded") or ())
        except ConstraintError as exc:
            raise ValidationError({exc.field: [f"{exc.why}."]}) from None
        return made.to_json() if made is not None else None


class ConstraintsSchema(Schema):
    gpu_type = fields.String()
    labels = fields.Dict(keys=fields.String(), values=fields.String())
    nodes = fields.List(fields.String())
    excluded = fields.List(fields.String(), data_key="exclude", attribute="exclude")


def submitted_field() -> fields.Nested:
    """`constraints` as a submission gives it (null or {}: anywhere)."""
    return fields.Nested(ConstraintsArgs, load_default=None, allow_none=True, metadata={
        "description": "where it may run: gpu_type, labels, nodes, exclude (scheduler.core.constraints); a job no "
                       "node could ever run is refused (422) naming the part of them at fault"})


def shown_field() -> fields.Nested:
    """`constraints` as a job shows it (null: anywhere)."""
    return fields.Nested(ConstraintsSchema, allow_none=True, metadata={
        "description": "where it may run (null: anywhere)"})

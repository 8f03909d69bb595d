"""Priority classes: named priorities an admin defines (`/priority-classes`)."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

import web.limits as lim
from web.schemas.base import RequestSchema, db_int, name_rule


class PriorityClassCreateArgs(RequestSchema):
    name = fields.String(required=True, validate=name_rule, metadata={
        "description": "1 to 64 letters, digits, '.', '_' or '-', not starting with '-'"})
    value = db_int(-lim.MAX_PRIORITY, lim.MAX_PRIORITY, strict=True, required=True, metadata={
        "description": "the priority its jobs get (higher first)"})
    preemptible = fields.Boolean(truthy={True}, falsy={False}, load_default=True, metadata={
        "description": "false: its jobs are never preempted (and, with teams, run only within their team's quota)"})
    description = fields.String(load_default=None, validate=validate.Length(max=500))


class PriorityClassSchema(Schema):
    name = fields.String()
    value = fields.Integer()
    preemptible = fields.Boolean()
    description = fields.String(allow_none=True)
    created_at = fields.Float()
    created_by = fields.String(allow_none=True)


class PriorityClassListSchema(Schema):
    priority_classes = fields.List(fields.Nested(PriorityClassSchema), metadata={"description": "highest value first"})

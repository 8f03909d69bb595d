"""Job arrays: an array with its tasks' states (`GET /arrays/ID`, and in a job's answer)."""

from __future__ import annotations

from marshmallow import Schema, fields


class ArrayTaskSchema(Schema):
    id = fields.Integer()
    index = fields.Integer()
    state = fields.String()
    held_by = fields.String(allow_none=True, metadata={"description": "who holds it, if it is held"})


class ArraySchema(Schema):
    id = fields.Integer()
    name = fields.String()
    user = fields.String()
    count = fields.Integer()
    max_running = fields.Integer(allow_none=True)
    submitted_at = fields.Float()
    states = fields.Dict(keys=fields.String(), values=fields.Integer(), metadata={"description": "tasks per state"})
    held = fields.Integer(metadata={"description": "pending tasks held (`POST /arrays/ID/hold`)"})
    tasks = fields.List(fields.Nested(ArrayTaskSchema), metadata={"description": "by index"})

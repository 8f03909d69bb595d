"""The service's health (`GET /health`)."""

from __future__ import annotations

from marshmallow import Schema, fields


class HealthSchema(Schema):
    status = fields.String()
    database = fields.String()
    version = fields.String()
    time = fields.Float()
    controller = fields.String(metadata={"description": "this replica's controller: leader or standby"})
    replica = fields.String(metadata={"description": "this replica's id (host:pid:random)"})
    epoch = fields.Integer(allow_none=True, metadata={"description": "the controller lease's epoch (null: SQLite, "
                                                                     "one process, no lease)"})
    leader = fields.String(allow_none=True, metadata={"description": "the replica holding the lease"})
    lease = fields.String(metadata={"description": "the lease's terms and time left, or why there is none"})

"""Job logs: reading a job's logs, or following one rank's (`GET /jobs/ID/logs`)."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

import web.limits as lim
from web.schemas.base import RequestSchema, db_int


class LogsArgs(RequestSchema):
    attempt = db_int(metadata={"description": "default: the current run"})
    rank = db_int(metadata={"description": "default: every rank"})
    tail = fields.Integer(load_default=200, validate=validate.Range(min=1, max=100_000),
                          metadata={"description": "last lines per rank"})
    offset = fields.Integer(validate=validate.Range(min=0, max=2**62), metadata={
        "description": "follow a log: what it holds from this byte on (with `rank`; start from the `end` a previous "
                       "answer gave) instead of its last lines"})
    wait_s = fields.Float(load_default=0.0, validate=validate.Range(min=0.0, max=lim.MAX_LOG_WAIT_S), metadata={
        "description": "with `offset`: when there is nothing new yet, wait up to this long for it (long polling)"})

    @validates_schema
    def _follow_rules(self, data: dict[str, Any], **_: Any) -> None:
        if "offset" in data and "rank" not in data:
            raise ValidationError("give the rank whose log to follow", "rank")
        if data.get("wait_s") and "offset" not in data:
            raise ValidationError("waiting is for following a log: give offset (and rank)", "wait_s")


class RankLogSchema(Schema):
    rank = fields.Integer()
    path = fields.String(metadata={"description": "the log's name among the job's logs (`job-7/attempt-2/rank-0.log`), "
                                                  "never a folder of the server's"})
    text = fields.String()
    end = fields.Integer(metadata={"description": "the byte offset just past `text`: the `offset` to follow from"})


class LogsSchema(Schema):
    job_id = fields.Integer()
    attempt = fields.Integer()
    state = fields.String(metadata={"description": "the job's state now"})
    current_attempt = fields.Integer(metadata={"description": "the job's run now (a follower of an older one moves on)"})
    logs = fields.List(fields.Nested(RankLogSchema))

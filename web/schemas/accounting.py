"""`GET /accounting`: a period's GPU-hours, ended jobs, waits and JCTs per user, team or day."""

from __future__ import annotations

import time
from typing import Any

from marshmallow import Schema, ValidationError, fields, post_load, validate

import web.limits as lim
from scheduler.live.accounting_table import GROUPS
from web.schemas.base import RequestSchema


class AccountingArgs(RequestSchema):
    since = fields.Float(load_default=None, validate=validate.Range(min=0.0, max=lim.MAX_UNIX_TIME), metadata={
        "description": "the period's start, Unix seconds (default: 30 days before `until`)"})
    until = fields.Float(load_default=None, validate=validate.Range(min=0.0, max=lim.MAX_UNIX_TIME), metadata={
        "description": "the period's end, Unix seconds (default: now)"})
    by = fields.String(load_default="user", validate=validate.OneOf(GROUPS), metadata={
        "description": "one row per user, per team (the job's at submission) or per UTC day"})

    @post_load
    def _period(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The period with its defaults filled (until: now; since: 30 days before), checked: it ends after it starts
        and lasts at most a year (a request's cost is its period's allocations and jobs)."""
        until = data["until"] if data["until"] is not None else time.time()
        since = data["since"] if data["since"] is not None else until - lim.ACCOUNTING_DEFAULT_PERIOD_S
        if until <= since:
            raise ValidationError({"until": ["Must be after since."]})
        if until - since > lim.ACCOUNTING_MAX_PERIOD_S:
            raise ValidationError({"since": [f"A period is at most {lim.ACCOUNTING_MAX_PERIOD_S / 86400:g} days."]})
        return {**data, "since": since, "until": until}


class AccountingRowSchema(Schema):
    key = fields.String(metadata={"description": "the user, team or UTC day (YYYY-MM-DD); 'total' for the total"})
    gpu_hours = fields.Float(metadata={"description": "GPU-hours held (shares weighted) within the period"})
    idle_gpu_hours = fields.Float(metadata={"description": "of those, held before the run's workers started"})
    jobs_ended = fields.Integer(metadata={"description": "jobs that ended in the period, and by how"})
    jobs_succeeded = fields.Integer()
    jobs_failed = fields.Integer()
    jobs_cancelled = fields.Integer()
    jobs_timed_out = fields.Integer()
    jobs_started = fields.Integer(metadata={"description": "jobs whose first run started in the period"})
    wait_p50_s = fields.Float(allow_none=True, metadata={"description": "submission to first start, of those"})
    wait_p95_s = fields.Float(allow_none=True)
    jct_p50_s = fields.Float(allow_none=True, metadata={"description": "submission to success, of jobs that "
                                                        "succeeded in the period"})
    jct_p95_s = fields.Float(allow_none=True)
    preemptions = fields.Integer()


class AccountingSchema(Schema):
    since = fields.Float()
    until = fields.Float()
    by = fields.String()
    rows = fields.List(fields.Nested(AccountingRowSchema))
    total = fields.Nested(AccountingRowSchema)

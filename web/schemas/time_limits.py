"""The cluster's time limits: the default a job gets and the most it may give (`/time-limits`)."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validates_schema

import web.limits as lim
from web.schemas.base import RequestSchema, bounded


class TimeLimitsArgs(RequestSchema):
    """Only the fields given change; null clears one."""

    default_s = bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, allow_none=True, metadata={
        "description": "the time limit a job gets when it gives none (null: none)"})
    max_s = bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, allow_none=True, metadata={
        "description": "the most a job may give (null: no maximum)"})

    @validates_schema
    def _something(self, data: dict[str, Any], **kwargs: Any) -> None:
        if not data:
            raise ValidationError("give default_s, max_s or both", "_schema")


class TimeLimitsSchema(Schema):
    default_s = fields.Float(allow_none=True, metadata={"description": "a job's time limit when it gives none"})
    max_s = fields.Float(allow_none=True, metadata={"description": "the most a job may give"})

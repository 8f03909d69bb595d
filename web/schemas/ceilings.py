"""Priority ceilings (scheduler.live.priority_ceilings): what a user's or a team's jobs may ask for."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

import web.limits as lim
from web.schemas.base import db_int, name_rule


class CeilingArgs:
    """A priority ceiling's settings (scheduler.live.priority_ceilings), for a user or a team; null clears one."""

    max_priority = db_int(-lim.MAX_PRIORITY, lim.MAX_PRIORITY, strict=True, allow_none=True, metadata={
        "description": "the highest priority a job may give (null: the team's, then the built-in 0)"})
    allow_nonpreemptible = fields.Boolean(truthy={True}, falsy={False}, allow_none=True, metadata={
        "description": "whether a job may give preemptible: false (null: the team's, then the built-in false)"})
    priority_classes = fields.List(fields.String(validate=name_rule), allow_none=True,
                                   validate=validate.Length(max=lim.MAX_CEILING_CLASSES), metadata={
        "description": "the priority classes a job may name whatever their figures (null: the team's, then none); a "
                       "class within max_priority and allow_nonpreemptible may always be named"})


class CeilingSchema(Schema):
    max_priority = fields.Integer(metadata={"description": "the highest priority a job may give (403 above it)"})
    allow_nonpreemptible = fields.Boolean(metadata={"description": "whether a job may give preemptible: false"})
    priority_classes = fields.List(fields.String(), metadata={
        "description": "classes a job may name whatever their figures"})

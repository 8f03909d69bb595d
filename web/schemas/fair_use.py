"""Fair use (web.fair_use): the cluster's default limits and a user's overrides, as set and as they apply."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, pre_load, validate, validates_schema

import web.limits as lim
from web.schemas.base import RequestSchema
from web.schemas.ceilings import CeilingArgs


class LimitsArgs(RequestSchema):
    """Only the limits given change; null clears one (back to the cluster's default, or the built-in one)."""

    max_pending = fields.Integer(strict=True, allow_none=True, validate=validate.Range(min=1, max=lim.MAX_PENDING_LIMIT),
                                 metadata={"description": "jobs a user may have pending at once"})
    submit_rate = fields.Float(allow_none=True, allow_nan=False,
                               validate=validate.Range(min=0, min_inclusive=False, max=lim.MAX_SUBMIT_RATE),
                               metadata={"description": "submissions a second, on average (a token bucket)"})
    submit_burst = fields.Integer(strict=True, allow_none=True, validate=validate.Range(min=1, max=lim.MAX_SUBMIT_BURST),
                                  metadata={"description": "submissions at once before the rate applies"})
    whatif_per_min = fields.Integer(strict=True, allow_none=True,
                                    validate=validate.Range(min=1, max=lim.MAX_WHATIF_PER_MIN),
                                    metadata={"description": "what-if calls a minute"})
    request_rate = fields.Float(allow_none=True, allow_nan=False,
                                validate=validate.Range(min=0, min_inclusive=False, max=lim.MAX_REQUEST_RATE),
                                metadata={"description": "API requests a second, on average (a token bucket)"})
    request_burst = fields.Integer(strict=True, allow_none=True,
                                   validate=validate.Range(min=1, max=lim.MAX_REQUEST_BURST),
                                   metadata={"description": "API requests at once before the rate applies"})

    BOOLEANS: tuple[str, ...] = ()  # the fields that are booleans; every other one is a number

    @pre_load
    def _no_booleans(self, data: Any, **kwargs: Any) -> Any:
        # JSON true is not 1: a boolean for a number is a mistake, refused by name.
        if isinstance(data, dict):
            bad = {k: ["Not a valid number."] for k, v in data.items()
                   if k in self.fields and k not in self.BOOLEANS and isinstance(v, bool)}
            if bad:
                raise ValidationError(bad)
        return data

    @validates_schema
    def _something(self, data: dict[str, Any], **kwargs: Any) -> None:
        if not data:
            *most, last = self.fields
            raise ValidationError(f"nothing to change: give {', '.join(most)} or {last}")


class UserLimitsArgs(CeilingArgs, LimitsArgs):
    """A user's overrides: the fair-use limits and their priority ceiling. Only those given change; null clears one
    (a limit back to the cluster's default, a ceiling's setting back to the team's)."""

    BOOLEANS = ("allow_nonpreemptible",)


LIMIT_SOURCES = ("user", "team", "cluster", "built-in")


class LimitsSchema(Schema):
    user = fields.String(allow_none=True, metadata={"description": "null: the cluster-wide defaults"})
    exempt = fields.Boolean(metadata={"description": "an admin: no limit applies"})
    max_pending = fields.Integer(metadata={"description": "jobs pending at once (429 past it)"})
    submit_rate = fields.Float(metadata={"description": "submissions a second after the burst (429, Retry-After)"})
    submit_burst = fields.Integer(metadata={"description": "submissions at once"})
    whatif_per_min = fields.Integer(metadata={"description": "what-if calls a minute (429, Retry-After)"})
    request_rate = fields.Float(metadata={"description": "API requests a second after the burst (429, Retry-After)"})
    request_burst = fields.Integer(metadata={"description": "API requests at once"})
    max_priority = fields.Integer(metadata={"description": "a user's: the highest priority their jobs may give"})
    allow_nonpreemptible = fields.Boolean(metadata={"description": "a user's: may their jobs be non-preemptible"})
    priority_classes = fields.List(fields.String(), metadata={
        "description": "a user's: the classes their jobs may name whatever their figures"})
    sources = fields.Dict(keys=fields.String(), values=fields.String(validate=validate.OneOf(LIMIT_SOURCES)),
                          metadata={"description": "where each value comes from: user (an override), team (the "
                                                   "user's team's ceiling), cluster (an admin's default) or built-in"})

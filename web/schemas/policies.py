"""Policies: the ones available and the active one (`GET /policies`, `PUT /policies/active`)."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from web.schemas.base import RequestSchema


class ActivePolicyArgs(RequestSchema):
    name = fields.String(required=True, validate=validate.Length(min=1, max=300))


class PoliciesSchema(Schema):
    available = fields.List(fields.String())
    active = fields.String(allow_none=True)
    guard = fields.Dict(allow_none=True, metadata={
        "description": "an active guarded:POLICY's guard (docs/learned-policies.md): acting (the policy deciding now), "
                       "learned, fallback (null: the learned policy acts), best (the best fallback), ratio, low, "
                       "high (the learned policy's JCT over the best fallback's in replays of the kept windows), "
                       "windows, verdicts, text (in words), switches (the latest, each with at, to and text); null: "
                       "no guard, or no verdict yet"})


class ActivePolicySchema(Schema):
    active = fields.String()

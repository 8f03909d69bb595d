"""Policies: the ones available and the active one (`GET /policies`, `PUT /policies/active`)."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from web.schemas.base import RequestSchema


class ActivePolicyArgs(RequestSchema):
    name = fields.String(required=True, validate=validate.Length(min=1, max=300))


class PoliciesSchema(Schema):
    available = fields.List(fields.String())
    active = fields.String(allow_none=True)


class ActivePolicySchema(Schema):
    active = fields.String()

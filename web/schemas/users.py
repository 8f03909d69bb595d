"""Users: moving one to a team, and a user as listed."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from web.schemas.base import RequestSchema


class UserPatchArgs(RequestSchema):
    team = fields.String(required=True, validate=validate.Length(min=1, max=64), metadata={
        "description": "the team to move the user to; refused while they have jobs pending or running"})


class UserSchema(Schema):
    name = fields.String()
    team = fields.String()
    admin = fields.Boolean()
    created_at = fields.Float()
    active_jobs = fields.Integer(metadata={"description": "jobs pending or running (a user with any cannot move)"})


class UserListSchema(Schema):
    users = fields.List(fields.Nested(UserSchema))
    total = fields.Integer(metadata={"description": "how many there are, all pages"})

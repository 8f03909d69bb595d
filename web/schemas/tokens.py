"""API tokens as listed: never the token itself."""

from __future__ import annotations

from marshmallow import Schema, fields


class TokenSchema(Schema):
    """A token as listings show it: never the token itself (only its hash is stored), its first characters instead."""

    id = fields.Integer()
    prefix = fields.String(metadata={"description": "the token's first characters, as `corral token list` prints"})
    user = fields.String()
    admin = fields.Boolean(metadata={"description": "whether the token's user is an admin"})
    created_at = fields.Float()
    expires_at = fields.Float(allow_none=True)
    revoked = fields.Boolean()
    revoked_at = fields.Float(allow_none=True)


class TokenListSchema(Schema):
    tokens = fields.List(fields.Nested(TokenSchema))
    total = fields.Integer(metadata={"description": "how many there are, all pages"})

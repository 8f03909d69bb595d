"""API tokens, for admins: list them (never the token itself) and revoke one. Creating a token stays with the CLI
(`corral token create`), which opens the store directly: the first token cannot require a token."""

from __future__ import annotations

from typing import Any

from flask import current_app
from flask_smorest import Blueprint, abort

from scheduler.live.store import queries as q
from scheduler.live.store.models import ApiToken
from web.api.context import page, store, write_session
from web.auth import CACHE_KEY, TokenCache, protect, require_admin
from web.schemas.base import PageArgs
from web.schemas.tokens import TokenListSchema, TokenSchema

MAX_TOKEN_ID = 2**63 - 1


def token_json(t: ApiToken) -> dict[str, Any]:
    return {"id": t.id, "prefix": t.prefix, "user": t.user.name, "admin": t.user.admin, "created_at": t.created_at,
            "expires_at": t.expires_at, "revoked": t.revoked, "revoked_at": t.revoked_at}


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("tokens", __name__, url_prefix=prefix, description="API tokens (admins only)"))

    @blp.route("/tokens", methods=["GET"])
    @blp.arguments(PageArgs(), location="query")
    @blp.response(200, TokenListSchema)
    def list_tokens(args: dict[str, Any]) -> Any:
        """List API tokens (admins)

        Each token's id, prefix, owner, creation, expiry and revocation; never the token itself.
        """
        require_admin()
        with store().session() as s:
            tokens, total = page(q.list_tokens(s), args)
            return {"tokens": [token_json(t) for t in tokens], "total": total}

    @blp.route("/tokens/<int:token_id>", methods=["DELETE"])
    @blp.response(200, TokenSchema)
    def revoke(token_id: int) -> Any:
        """Revoke a token: it stops working on the next request, on this server and on every other one
        sharing the database (they compare the revocations on each request before trusting their token cache)."""
        require_admin()
        with write_session() as s:
            token = s.get(ApiToken, token_id) if token_id <= MAX_TOKEN_ID else None
            if token is None:
                abort(404, message=f"token {token_id} not found")
            body = token_json(q.revoke_token(s, token))
        cache: TokenCache = current_app.extensions[CACHE_KEY]
        cache.clear()
        return body

    return blp

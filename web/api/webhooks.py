"""Webhooks: URLs Corral calls on the state changes of a user's jobs (`scheduler.live.webhooks`, docs/webhooks.md).
A user creates, lists and deletes their own and reads their deliveries; an admin sees everyone's. A job's own webhook
is given at submission (`webhook`, scheduler/live/submissions.py) and listed here with the user's.

Nothing is sent anywhere the server's allow list (`corral serve --webhook-allow`) does not name: a URL outside it is
refused when given, with a 422 naming the field, and checked again before each request."""

from __future__ import annotations

import time
from typing import Any, NoReturn

from flask import current_app
from flask_smorest import Blueprint, abort
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from scheduler.live import webhooks as wh
from scheduler.live.store.models import User, Webhook, WebhookDelivery
from scheduler.live.webhook_dispatch import add_webhook, cancel_pending, limit_refusal
from web.api.context import store, write_session
from web.auth import caller, protect
from web.schemas.webhooks import (
    DeliveryDetailSchema,
    DeliveryListArgs,
    DeliveryListSchema,
    WebhookCreateArgs,
    WebhookCreatedSchema,
    WebhookListArgs,
    WebhookListSchema,
    WebhookSchema,
)

ALLOW_KEY = "CORRAL_WEBHOOK_ALLOW"  # app.config: the AllowList (`corral serve --webhook-allow`); absent: none


def allow_list() -> wh.AllowList:
    allow = current_app.config.get(ALLOW_KEY)
    return allow if isinstance(allow, wh.AllowList) else wh.AllowList()


def invalid(field: str, why: str) -> NoReturn:
    """422 naming the field, shaped as the schemas' own errors."""
    abort(422, message=f"{field}: {why}", errors={"json": {field: [why]}})


def check_url(field: str, url: str) -> None:
    """422 naming `field` unless `url` is one this server may call (form, scheme, allow list, resolved addresses)."""
    why = wh.refusal(url, allow_list())
    if why is not None:
        invalid(field, why)


def webhook_json(hook: Webhook, user: str, *, secret: bool = False) -> dict[str, Any]:
    body = {"id": hook.id, "url": hook.url, "description": hook.description, "user": user, "job_id": hook.job_id,
            "created_at": hook.created_at, "deleted_at": hook.deleted_at}
    if secret:
        body["secret"] = hook.secret
    return body


def delivery_json(d: WebhookDelivery, user: str, *, full: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": d.id, "webhook_id": d.webhook_id, "user": user, "event_id": d.event_id, "job_id": d.job_id,
        "event": d.event, "status": d.status, "attempts": d.attempts, "created_at": d.created_at,
        "next_attempt_at": d.next_at if d.status == "pending" else None, "last_attempt_at": d.last_attempt_at,
        "last_status_code": d.last_status_code, "last_error": d.last_error, "finished_at": d.finished_at,
    }
    if full:
        body["body"] = d.body
        body["attempt_log"] = [{"number": a.number, "at": a.at, "status_code": a.status_code, "error": a.error,
                                "duration_ms": a.duration_ms} for a in d.attempt_log]
    return body


# ---- views ----------------------------------------------------------------------------------------------------------


def _owned(s: Session, hook_id: int) -> Webhook:
    hook = s.get(Webhook, hook_id)
    if hook is None or hook.deleted_at is not None:
        abort(404, message=f"webhook {hook_id} not found")
    who = caller()
    if hook.user_id != who.id and not who.admin:
        abort(403, message=f"webhook {hook_id} belongs to another user")
    return hook


def _user_filter(s: Session, wanted: str | None) -> int | None:
    """The user whose items to list: the caller, or for an admin `wanted` (None: everyone's). -1: no such user."""
    who = caller()
    if not who.admin:
        if wanted is not None and wanted != who.name:
            abort(403, message=f"only admins may list another user's webhooks ({wanted!r})")
        return who.id
    if wanted is None:
        return None
    user_id = s.scalar(select(User.id).where(User.name == wanted))
    return -1 if user_id is None else int(user_id)


def _names(s: Session, ids: set[int]) -> dict[int, str]:
    return {i: n for i, n in s.execute(select(User.id, User.name).where(User.id.in_(ids)))} if ids else {}


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("webhooks", __name__, url_prefix=prefix,
                            description="Webhooks: signed requests on your jobs' state changes, and their deliveries"))

    @blp.route("/webhooks", methods=["POST"])
    @blp.arguments(WebhookCreateArgs())
    @blp.response(201, WebhookCreatedSchema, description="the webhook, with its secret (shown only now)")
    def create_webhook(args: dict[str, Any]) -> Any:
        """Create a webhook for all your jobs

        Called (POST, JSON, signed with the secret this answer holds, which is never shown again) on every state
        change of every job of yours from now on. The URL must be http(s) and among the destinations the server
        allows: otherwise 422 naming `url`, and nothing is stored.
        """
        check_url("url", args["url"])
        who = caller()
        with write_session() as s:
            mine = s.scalars(select(Webhook).where(Webhook.user_id == who.id, Webhook.job_id.is_(None),
                                                   Webhook.deleted_at.is_(None))).all()
            same = next((h for h in mine if h.url == args["url"]), None)
            if same is not None:
                abort(409, message=f"you already have webhook {same.id} for this URL")
            full = limit_refusal(s, who.id)
            if full is not None:
                abort(409, message=full)
            hook = add_webhook(s, who.id, args["url"], description=args["description"])
            return webhook_json(hook, who.name, secret=True), 201

    @blp.route("/webhooks", methods=["GET"])
    @blp.arguments(WebhookListArgs(), location="query")
    @blp.response(200, WebhookListSchema)
    def list_webhooks(args: dict[str, Any]) -> Any:
        """List webhooks

        Yours (your own and your jobs'), newest first; an admin sees everyone's, or one user's. Never their secrets.
        """
        with store().session() as s:
            user_id = _user_filter(s, args.get("user"))
            q = select(Webhook).where(Webhook.deleted_at.is_(None))
            if user_id is not None:
                q = q.where(Webhook.user_id == user_id)
            if "job" in args:
                q = q.where(Webhook.job_id == args["job"])
            total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
            hooks = s.scalars(q.order_by(Webhook.id.desc()).limit(args["limit"]).offset(args["offset"])).all()
            names = _names(s, {h.user_id for h in hooks})
            return {"webhooks": [webhook_json(h, names[h.user_id]) for h in hooks], "total": total}

    @blp.route("/webhooks/<int:webhook_id>", methods=["GET"])
    @blp.response(200, WebhookSchema)
    def show_webhook(webhook_id: int) -> Any:
        """Show a webhook (yours, or any for an admin), without its secret"""
        with store().session() as s:
            hook = _owned(s, webhook_id)
            return webhook_json(hook, _names(s, {hook.user_id})[hook.user_id])

    @blp.route("/webhooks/<int:webhook_id>", methods=["DELETE"])
    @blp.response(200, WebhookSchema, description="the webhook, deleted")
    def delete_webhook(webhook_id: int) -> Any:
        """Delete a webhook

        Nothing more is sent to it: its pending deliveries fail at once ("the webhook was deleted"); its delivery log
        stays readable for as long as the server keeps it.
        """
        with write_session() as s:
            hook = _owned(s, webhook_id)
            now = time.time()
            hook.deleted_at = now
            cancel_pending(s, hook.id, "the webhook was deleted", now)
            return webhook_json(hook, _names(s, {hook.user_id})[hook.user_id])

    @blp.route("/webhooks/<int:webhook_id>/secret", methods=["POST"])
    @blp.response(200, WebhookCreatedSchema, description="the webhook with its new secret (shown only now)")
    def rotate_secret(webhook_id: int) -> Any:
        """Give a webhook a new secret

        Requests from now on are signed with the new secret only (one already in flight may still carry the old).
        For a lost secret, or a leaked one.
        """
        with write_session() as s:
            hook = _owned(s, webhook_id)
            hook.secret = wh.new_secret()
            return webhook_json(hook, _names(s, {hook.user_id})[hook.user_id], secret=True)

    @blp.route("/webhooks/deliveries", methods=["GET"])
    @blp.arguments(DeliveryListArgs(), location="query")
    @blp.response(200, DeliveryListSchema)
    def list_deliveries(args: dict[str, Any]) -> Any:
        """List webhook deliveries

        The requests queued for your webhooks, newest first, with where each stands: pending (and when it is tried
        next), delivered, or failed (and why). Filter by webhook, job or status; an admin sees everyone's.
        """
        with store().session() as s:
            user_id = _user_filter(s, args.get("user"))
            q = select(WebhookDelivery, Webhook.user_id).join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
            if user_id is not None:
                q = q.where(Webhook.user_id == user_id)
            for key, column in (("webhook", WebhookDelivery.webhook_id), ("job", WebhookDelivery.job_id),
                                ("status", WebhookDelivery.status)):
                if key in args:
                    q = q.where(column == args[key])
            total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
            rows = s.execute(q.order_by(WebhookDelivery.id.desc()).limit(args["limit"]).offset(args["offset"])).all()
            names = _names(s, {owner for _, owner in rows})
            return {"deliveries": [delivery_json(d, names[owner]) for d, owner in rows], "total": total}

    @blp.route("/webhooks/deliveries/<int:delivery_id>", methods=["GET"])
    @blp.response(200, DeliveryDetailSchema)
    def show_delivery(delivery_id: int) -> Any:
        """Show a delivery: the body sent and every attempt's outcome"""
        with store().session() as s:
            d = s.get(WebhookDelivery, delivery_id)
            if d is None:
                abort(404, message=f"delivery {delivery_id} not found")
            who = caller()
            if d.webhook.user_id != who.id and not who.admin:
                abort(403, message=f"delivery {delivery_id} belongs to another user")
            return delivery_json(d, _names(s, {d.webhook.user_id})[d.webhook.user_id], full=True)

    return blp

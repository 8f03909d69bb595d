"""Webhooks (docs/webhooks.md): creating one, listing them and their deliveries, and each as shown."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

import web.limits as lim
from scheduler.live import webhooks as wh
from scheduler.live.webhook_dispatch import DELIVERY_STATUSES
from web.schemas.base import RequestSchema


class WebhookCreateArgs(RequestSchema):
    url = fields.String(required=True, validate=validate.Length(min=1, max=wh.MAX_URL), metadata={
        "description": "http:// or https:// URL, among the destinations the server allows (--webhook-allow)"})
    description = fields.String(load_default="", validate=validate.Length(max=wh.MAX_DESCRIPTION))


class WebhookListArgs(RequestSchema):
    user = fields.String(validate=validate.Length(min=1, max=64), metadata={
        "description": "another user's webhooks (admins)"})
    job = fields.Integer(validate=validate.Range(min=1, max=lim.DB_INT_MAX), metadata={
        "description": "only this job's own webhook"})
    limit = fields.Integer(load_default=lim.MAX_PAGE, validate=validate.Range(min=1, max=lim.MAX_PAGE))
    offset = fields.Integer(load_default=0, validate=validate.Range(min=0, max=lim.DB_INT_MAX))


class DeliveryListArgs(RequestSchema):
    webhook = fields.Integer(validate=validate.Range(min=1, max=lim.DB_INT_MAX))
    job = fields.Integer(validate=validate.Range(min=1, max=lim.DB_INT_MAX))
    status = fields.String(validate=validate.OneOf(DELIVERY_STATUSES))
    user = fields.String(validate=validate.Length(min=1, max=64), metadata={
        "description": "another user's deliveries (admins)"})
    limit = fields.Integer(load_default=lim.DEFAULT_DELIVERY_PAGE, validate=validate.Range(min=1, max=lim.MAX_PAGE))
    offset = fields.Integer(load_default=0, validate=validate.Range(min=0, max=lim.DB_INT_MAX))


class WebhookSchema(Schema):
    id = fields.Integer()
    url = fields.String()
    description = fields.String()
    user = fields.String(metadata={"description": "whose it is"})
    job_id = fields.Integer(allow_none=True, metadata={"description": "a job's own webhook; null: the user's, for "
                                                                      "all their jobs"})
    created_at = fields.Float()
    deleted_at = fields.Float(allow_none=True)


class WebhookCreatedSchema(WebhookSchema):
    secret = fields.String(metadata={"description": "signs every request (X-Corral-Signature); shown only now"})


class WebhookListSchema(Schema):
    webhooks = fields.List(fields.Nested(WebhookSchema))
    total = fields.Integer(metadata={"description": "how many match, all pages"})


class DeliverySchema(Schema):
    id = fields.Integer(metadata={"description": "also sent as X-Corral-Delivery, the same on every attempt"})
    webhook_id = fields.Integer()
    user = fields.String()
    event_id = fields.Integer()
    job_id = fields.Integer()
    event = fields.String(metadata={"description": "the job event's kind (submitted, placed, succeeded, ...)"})
    status = fields.String(metadata={"description": "pending, delivered or failed (given up: last_error says why)"})
    attempts = fields.Integer()
    created_at = fields.Float()
    next_attempt_at = fields.Float(allow_none=True)
    last_attempt_at = fields.Float(allow_none=True)
    last_status_code = fields.Integer(allow_none=True)
    last_error = fields.String(allow_none=True)
    finished_at = fields.Float(allow_none=True)


class AttemptSchema(Schema):
    number = fields.Integer()
    at = fields.Float()
    status_code = fields.Integer(allow_none=True)
    error = fields.String(allow_none=True)
    duration_ms = fields.Float()


class DeliveryDetailSchema(DeliverySchema):
    body = fields.String(metadata={"description": "the JSON sent, byte for byte"})
    attempt_log = fields.List(fields.Nested(AttemptSchema))


class DeliveryListSchema(Schema):
    deliveries = fields.List(fields.Nested(DeliverySchema))
    total = fields.Integer(metadata={"description": "how many match, all pages"})

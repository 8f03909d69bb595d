"""The model catalog (`GET /models`)."""

from __future__ import annotations

from marshmallow import Schema, fields


class ModelSchema(Schema):
    name = fields.String()
    kind = fields.String()
    compute_ms = fields.Float()
    sm = fields.Float()
    membw = fields.Float()
    mem_gb = fields.Float()
    grad_mb = fields.Float()
    overlap = fields.Float()
    latency_ms = fields.Float()
    slo_ms = fields.Float()
    source = fields.String()


class ModelsSchema(Schema):
    models = fields.List(fields.Nested(ModelSchema))

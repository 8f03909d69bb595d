"""Nodes: the health report a node agent pushes (`PUT /nodes/NAME/health`), draining, and both as shown."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

import web.limits as lim
from scheduler.live.node.report import MAX_XIDS  # the agent sends the latest ones
from web.schemas.base import RequestSchema

# What a node agent pushes (`PUT /nodes/<name>/health`) is its health.json, less what the server derives or does not
# keep (web.limits bounds it).
GPU_HEALTH_STATUSES = ("ok", "degraded", "unreachable", "virtual")


class GpuHealthArgs(RequestSchema):
    index = fields.Integer(required=True, strict=True, validate=validate.Range(min=0, max=lim.MAX_NODE_GPUS - 1),
                           metadata={"description": "the GPU's index on its node (CUDA's, NVML's)"})
    status = fields.String(required=True, validate=validate.OneOf(GPU_HEALTH_STATUSES), metadata={
        "description": "ok; degraded (uncorrected ECC errors or a critical XID since the agent started); "
                       "unreachable (NVML cannot query it); virtual (no hardware behind it)"})
    temperature_c = fields.Integer(strict=True, load_default=None, allow_none=True,
                                   validate=validate.Range(min=-100, max=300))
    ecc_uncorrected = fields.Integer(strict=True, load_default=None, allow_none=True,
                                     validate=validate.Range(min=0, max=lim.DB_INT_MAX),
                                     metadata={"description": "volatile count; null: ECC off or not supported"})
    xid_errors = fields.List(fields.Integer(strict=True, validate=validate.Range(min=0, max=lim.DB_INT_MAX)),
                             load_default=list, validate=validate.Length(max=MAX_XIDS),
                             metadata={"description": f"critical XID codes since the agent started (the latest "
                                                      f"{MAX_XIDS})"})
    error = fields.String(load_default="", validate=validate.Length(max=1000))


class MpsHealthArgs(RequestSchema):
    enabled = fields.Boolean(required=True)
    daemon_running = fields.Boolean(load_default=None, allow_none=True)
    clients = fields.Integer(strict=True, load_default=0, validate=validate.Range(min=0, max=lim.DB_INT_MAX))


class NodeHealthArgs(RequestSchema):
    """A node's GPU health report. Unknown fields are refused; the node's overall status is derived from its GPUs'."""

    agent = fields.String(required=True, validate=validate.OneOf(["running", "stopped"]),
                          metadata={"description": "stopped: the agent has left, this is its last report"})
    updated_at = fields.Float(required=True, allow_nan=False, validate=validate.Range(min=0, max=1e11),
                              metadata={"description": "when the agent read the GPUs (Unix seconds, the node's clock)"})
    interval_s = fields.Float(required=True, allow_nan=False,
                              validate=validate.Range(min=lim.MIN_REPORT_INTERVAL_S, max=lim.MAX_REPORT_INTERVAL_S),
                              metadata={"description": "seconds between the agent's reports: a report older than 3 "
                                                       "of them is shown as stale"})
    gpus = fields.List(fields.Nested(GpuHealthArgs), required=True,
                       validate=validate.Length(min=1, max=lim.MAX_NODE_GPUS))
    mps = fields.Nested(MpsHealthArgs, load_default=None, allow_none=True)

    @validates_schema
    def _one_reading_per_gpu(self, data: dict[str, Any], **kwargs: Any) -> None:
        seen: set[int] = set()
        for i, gpu in enumerate(data.get("gpus") or ()):
            if gpu["index"] in seen:
                raise ValidationError({"gpus": {i: {"index": [f"GPU {gpu['index']} is reported twice."]}}})
            seen.add(gpu["index"])


class GpuHealthSchema(Schema):
    index = fields.Integer(metadata={"description": "the GPU's index on its node (`local_index` in `gpus`)"})
    status = fields.String(metadata={"description": "ok, degraded, unreachable or virtual"})
    temperature_c = fields.Integer(allow_none=True)
    ecc_uncorrected = fields.Integer(allow_none=True)
    xid_errors = fields.List(fields.Integer())
    error = fields.String()


class MpsHealthSchema(Schema):
    enabled = fields.Boolean()
    daemon_running = fields.Boolean(allow_none=True)
    clients = fields.Integer()


class NodeHealthSchema(Schema):
    status = fields.String(metadata={"description": "ok, or degraded when any GPU is not ok (virtual GPUs are)"})
    stale = fields.Boolean(metadata={"description": "the report is older than 3 of its agent's reporting intervals: "
                                                    "the agent, or its way to the API, is down"})
    age_s = fields.Float(metadata={"description": "seconds since the API received the report"})
    agent = fields.String(metadata={"description": "running, or stopped: the agent's last report"})
    updated_at = fields.Float(metadata={"description": "when the agent read the GPUs (the node's clock)"})
    interval_s = fields.Float()
    gpus = fields.List(fields.Nested(GpuHealthSchema))
    mps = fields.Nested(MpsHealthSchema, allow_none=True)


class NodeDrainArgs(RequestSchema):
    reason = fields.String(load_default="", validate=validate.Length(max=500),
                           metadata={"description": "why, shown on the cluster map and in the jobs' reasons"})
    now = fields.Boolean(load_default=False, metadata={
        "description": "also checkpoint and requeue the jobs running there now (they spend no restart); false: "
                       "they finish, and nothing new starts there"})


class DrainSchema(Schema):
    at = fields.Float(metadata={"description": "when the node was drained (Unix seconds)"})
    by = fields.String(allow_none=True)
    reason = fields.String()
    now = fields.Boolean(metadata={"description": "its jobs were checkpointed and requeued at once"})


class NodeDrainSchema(Schema):
    name = fields.String()
    drain = fields.Nested(DrainSchema, allow_none=True, metadata={"description": "null: not drained"})

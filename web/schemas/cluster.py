"""The cluster map (`GET /cluster`): nodes, their GPUs and tenants, the totals and the queue."""

from __future__ import annotations

from marshmallow import Schema, fields

from web.schemas.nodes import DrainSchema, NodeHealthSchema


class TenantSchema(Schema):
    job_id = fields.Integer()
    name = fields.String(allow_none=True, metadata={"description": "null for another user's job (see GET /cluster)"})
    share = fields.Float()
    user = fields.String(allow_none=True, metadata={"description": "null for another user's job"})
    team = fields.String(metadata={"description": "the team whose quota the job runs under"})


class GpuSchema(Schema):
    index = fields.Integer()
    local_index = fields.Integer()
    gpu_type = fields.String()
    mem_gb = fields.Float()
    free_share = fields.Float()
    tenants = fields.List(fields.Nested(TenantSchema))
    closed = fields.String(allow_none=True, metadata={
        "description": "why no new job may start on this GPU (its node is down or drained, or its agent reports it "
                       "faulty); null: open"})


class NodeSchema(Schema):
    name = fields.String()
    index = fields.Integer()
    preset = fields.String()
    labels = fields.Dict(keys=fields.String(), values=fields.String(), metadata={
        "description": "the labels its operator gave it (`corral node start --label`), which jobs' constraints select "
                       "nodes by, besides its hardware's (see `constraint_labels`)"})
    constraint_labels = fields.Dict(keys=fields.String(), values=fields.String(), metadata={
        "description": "every label a job's `constraints.labels` matches on this node: its hardware's (`gpu`: its GPU "
                       "type's family, e.g. h100; `interconnect`: nvlink or pcie) with its operator's `labels` over "
                       "them (the operator's win on a key both give). The keys not in `labels` are the hardware's"})
    rack = fields.String(allow_none=True, metadata={
        "description": "the rack the node names (`corral node start --rack`): nodes naming one rack share it in the "
                       "cluster model; null: it names none, and fills racks in order"})
    alive = fields.Boolean()
    since = fields.Float(metadata={"description": "When the node came up or went down (Unix seconds): when `alive` "
                                                  "last changed, or when it was first seen"})
    address = fields.String(allow_none=True)
    gpus = fields.List(fields.Nested(GpuSchema))
    health = fields.Nested(NodeHealthSchema, allow_none=True, metadata={
        "description": "the GPUs' health as the node's agent last reported it (`corral node start --api`); null: "
                       "never reported"})
    health_at = fields.Float(allow_none=True, metadata={
        "description": "when the API received that report (Unix seconds, the API's clock)"})
    drain = fields.Nested(DrainSchema, allow_none=True, metadata={"description": "null: not drained"})


class TotalsSchema(Schema):
    nodes = fields.Integer()
    gpus = fields.Integer()
    gpus_usable = fields.Integer(metadata={"description": "GPUs that may take new jobs: not on a down or drained "
                                                          "node, not faulty"})
    gpus_free = fields.Integer(metadata={"description": "usable GPUs with no tenant"})
    gpus_allocated = fields.Integer(metadata={"description": "GPUs with any tenant"})
    gpus_shared = fields.Integer(metadata={"description": "GPUs with more than one tenant"})
    share_allocated = fields.Float(metadata={"description": "sum of the tenants' shares, in GPUs"})


class QueueSchema(Schema):
    pending = fields.Integer()
    running = fields.Integer()


class ClusterSchema(Schema):
    nodes = fields.List(fields.Nested(NodeSchema))
    totals = fields.Nested(TotalsSchema)
    queue = fields.Nested(QueueSchema)
    active_policy = fields.String(allow_none=True)
    fabric = fields.String(allow_none=True, metadata={
        "description": "the fabric preset the contention model sees above the servers (`corral serve --fabric`); "
                       "null: none, one uplink per rack"})

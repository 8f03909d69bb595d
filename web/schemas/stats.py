"""The dashboard's figures: `GET /stats`, `/stats/network` and `/stats/teams` (scheduler.live.figures)."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

import web.limits as lim
from web.schemas.base import RequestSchema
from web.schemas.ceilings import CeilingSchema


class StatsArgs(RequestSchema):
    window_s = fields.Float(load_default=3600.0, validate=validate.Range(min=10.0, max=lim.STATS_MAX_WINDOW_S))
    bucket_s = fields.Float(load_default=60.0, validate=validate.Range(min=1.0, max=lim.STATS_MAX_WINDOW_S))

    @validates_schema
    def _bucket_fits(self, data: dict[str, Any], **kwargs: Any) -> None:
        if data["bucket_s"] > data["window_s"]:
            raise ValidationError({"bucket_s": ["Must not exceed window_s."]})
        if data["window_s"] / data["bucket_s"] > lim.STATS_MAX_BUCKETS:
            least = data["window_s"] / lim.STATS_MAX_BUCKETS
            raise ValidationError({"bucket_s": [f"At most {lim.STATS_MAX_BUCKETS} buckets: use a bucket of at least {least:g} s."]})


class BucketSchema(Schema):
    start = fields.Float(metadata={"description": "bucket start, Unix seconds"})
    end = fields.Float()
    finished = fields.Integer(metadata={"description": "jobs that reached a terminal state in the bucket"})
    succeeded = fields.Integer()
    avg_jct_s = fields.Float(allow_none=True, metadata={"description": "mean submit-to-finish of jobs that "
                                                        "succeeded in the bucket"})
    max_jct_s = fields.Float(allow_none=True)
    started = fields.Integer(metadata={"description": "jobs whose first run started in the bucket"})
    avg_queue_s = fields.Float(allow_none=True, metadata={"description": "mean submit-to-first-placement of jobs "
                                                          "first placed in the bucket"})
    pending = fields.Integer(metadata={"description": "jobs waiting at the bucket's end"})
    running = fields.Integer(metadata={"description": "jobs holding GPUs at the bucket's end"})
    share_allocated = fields.Float(metadata={"description": "GPUs allocated (sum of shares), time-averaged"})
    utilisation = fields.Float(allow_none=True, metadata={
        "description": "GPU-time allocated / GPU-time in the cluster, over the part of the bucket the service existed "
                       "(None before it began)"})


class StatsSchema(Schema):
    now = fields.Float()
    window_s = fields.Float()
    bucket_s = fields.Float()
    gpus = fields.Integer()
    buckets = fields.List(fields.Nested(BucketSchema))
    summary = fields.Dict(metadata={"description": "the same quantities over the whole window; `since`: where the "
                                    "span the averages cover starts (the window's start, or when the service began)"})


class NodeNetSchema(Schema):
    node = fields.String()
    preset = fields.String()
    nic_gbps = fields.Float(allow_none=True)
    demand_gbps = fields.Float()
    # marshmallow's metaclass takes declared fields off the class, so a field named `load` does not shadow
    # Schema.load; its types cannot say so.
    load = fields.Float(allow_none=True,  # type: ignore[assignment]
                        metadata={"description": "sum of the duty cycles of the jobs crossing the NIC (may exceed 1: "
                                                 "they contend)"})
    jobs = fields.List(fields.Integer(), metadata={"description": "the multi-node jobs crossing this NIC"})


class UplinkSchema(Schema):
    rack = fields.Integer()
    name = fields.String(allow_none=True)  # the rack's name where its nodes declare one
    load = fields.Float()  # type: ignore[assignment]  # no shadowing: see NodeNetSchema.load
    jobs = fields.List(fields.Integer())


class NetworkSchema(Schema):
    approximate = fields.Boolean()
    method = fields.String()
    nodes = fields.List(fields.Nested(NodeNetSchema))
    uplinks = fields.List(fields.Nested(UplinkSchema))
    fabric = fields.String(allow_none=True, metadata={"description": "the fabric preset the cluster is modelled on "
                                                      "(`corral serve --fabric`); null: one uplink per rack"})


class TeamStatsArgs(RequestSchema):
    window_s = fields.Float(load_default=3600.0, validate=validate.Range(min=10.0, max=lim.STATS_MAX_WINDOW_S))
    points = fields.Integer(load_default=60, validate=validate.Range(min=1, max=lim.STATS_MAX_BUCKETS))


class TeamSeriesSchema(Schema):
    gpus_in_use = fields.List(fields.Float(), metadata={"description": "mean GPUs held (shares as fractions) over "
                                                        "the step ending at each of `times`"})
    usage_ratio = fields.List(fields.Float(allow_none=True), metadata={
        "description": "fair-share usage over quota at each of `times` (null: the team has no quota)"})


class TeamStatSchema(Schema):
    name = fields.String()
    quota_gpus = fields.Float()
    borrow_limit_gpus = fields.Float(allow_none=True, metadata={"description": "null: no limit but the cluster"})
    in_use_gpus = fields.Float(metadata={"description": "its running jobs' GPUs now"})
    borrowed_gpus = fields.Float(metadata={"description": "in use beyond its quota"})
    lent_gpus = fields.Float(metadata={"description": "its idle quota that borrowers hold"})
    pending_jobs = fields.Integer()
    running_jobs = fields.Integer()
    priority_ceiling = fields.Nested(CeilingSchema, metadata={
        "description": "what its members' jobs may ask for where they have no setting of their own"})
    usage_gpu_s = fields.Float(metadata={"description": "fair-share usage now: GPU-seconds decayed with the "
                                         "half-life"})
    usage_ratio = fields.Float(allow_none=True, metadata={
        "description": "usage_gpu_s / quota_gpus, the fair-share order's key (lowest first); null without quota"})
    series = fields.Nested(TeamSeriesSchema)


class TeamStatsSchema(Schema):
    now = fields.Float()
    window_s = fields.Float()
    step_s = fields.Float()
    half_life_s = fields.Float()
    gpus = fields.Integer(metadata={"description": "GPUs in the cluster"})
    times = fields.List(fields.Float(), metadata={"description": "the series' instants, Unix seconds, the last "
                                                  "one `now`"})
    teams = fields.List(fields.Nested(TeamStatSchema))

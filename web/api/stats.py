"""`GET /stats`: job completion time, queueing delay, queue length and GPU share allocated over a recent window;
`GET /stats/network`: each node's NIC demand, approximated from the running multi-node jobs; and `GET /stats/teams`:
each team's quota, what it holds, borrows and lends now, and its fair-share usage and GPUs in use over a window.

HTTP only: the figures are `scheduler.live.figures`', computed from the store alone, so they answer while the
controller is down. The dashboard's metrics page and cluster map plot them.
"""

from __future__ import annotations

from typing import Any

from flask import current_app
from flask_smorest import Blueprint
from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from scheduler.core.tenancy import DEFAULT_HALF_LIFE_S
from scheduler.live.figures import compute_stats, compute_team_stats, network_load
from web.api.context import store
from web.auth import protect
from web.schemas.base import RequestSchema
from web.schemas.ceilings import CeilingSchema

MAX_BUCKETS = 2000
MAX_WINDOW_S = 30 * 86400.0


class StatsArgs(RequestSchema):
    window_s = fields.Float(load_default=3600.0, validate=validate.Range(min=10.0, max=MAX_WINDOW_S))
    bucket_s = fields.Float(load_default=60.0, validate=validate.Range(min=1.0, max=MAX_WINDOW_S))

    @validates_schema
    def _bucket_fits(self, data: dict[str, Any], **kwargs: Any) -> None:
        if data["bucket_s"] > data["window_s"]:
            raise ValidationError({"bucket_s": ["Must not exceed window_s."]})
        if data["window_s"] / data["bucket_s"] > MAX_BUCKETS:
            least = data["window_s"] / MAX_BUCKETS
            raise ValidationError({"bucket_s": [f"At most {MAX_BUCKETS} buckets: use a bucket of at least {least:g} s."]})


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
    utilisation = fields.Float(allow_none=True, metadata={"description": "share_allocated / GPUs in the cluster"})


class StatsSchema(Schema):
    now = fields.Float()
    window_s = fields.Float()
    bucket_s = fields.Float()
    gpus = fields.Integer()
    buckets = fields.List(fields.Nested(BucketSchema))
    summary = fields.Dict(metadata={"description": "the same quantities over the whole window"})


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
    window_s = fields.Float(load_default=3600.0, validate=validate.Range(min=10.0, max=MAX_WINDOW_S))
    points = fields.Integer(load_default=60, validate=validate.Range(min=1, max=MAX_BUCKETS))


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


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("stats", __name__, url_prefix=prefix,
                            description="Time series of JCT, queueing and utilisation; NIC and uplink load; teams' usage"))

    @blp.route("/stats")
    @blp.arguments(StatsArgs(), location="query")
    @blp.response(200, StatsSchema)
    def stats(args: dict[str, Any]) -> Any:
        """Get recent job statistics

        Job completion time, queueing delay, queue length and allocated GPU share over the last `window_s` seconds, in
        buckets of `bucket_s`, with a summary of the whole window.
        """
        return compute_stats(store(), args["window_s"], args["bucket_s"])

    @blp.route("/stats/network")
    @blp.response(200, NetworkSchema)
    def network() -> Any:
        """Get network load now

        Each NIC's and rack uplink's load from the running placements, as the contention model sees it.
        """
        return network_load(store())

    @blp.route("/stats/teams")
    @blp.arguments(TeamStatsArgs(), location="query")
    @blp.response(200, TeamStatsSchema)
    def teams(args: dict[str, Any]) -> Any:
        """Get each team's quota, usage and fair share

        Per team: its quota and borrowing limit; the GPUs its running jobs hold now, how many of those it borrows
        beyond its quota and how much of its idle quota borrowers hold; its pending and running jobs; its fair-share
        usage (GPU-seconds decayed with the half-life) and that over its quota. Over the last `window_s` seconds, in
        `points` instants ending now: the mean GPUs it held over each step and its usage over quota at each instant.
        """
        half_life = float(current_app.config.get("FAIR_SHARE_HALF_LIFE_S", DEFAULT_HALF_LIFE_S))
        return compute_team_stats(store(), args["window_s"], args["points"], half_life)

    return blp

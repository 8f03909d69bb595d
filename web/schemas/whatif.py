"""What-if (`POST /whatif`): the scenario asked for and the simulated outcome. The bounds are
scheduler.live.whatif's (web.limits repeats them; the core validates again): these give 422s naming every bad field
at once."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

import web.limits as lim
from scheduler.core.generic import known_profiles
from web.schemas.base import GpuCount, RequestSchema, bounded, positive
from web.schemas.constraints import submitted_field as submitted_constraints


class WhatIfJobArgs(RequestSchema):
    """A hypothetical job: it does not exist, the simulation adds it."""

    name = fields.String(load_default=None, validate=validate.Length(min=1, max=200))
    model = fields.String(required=True, validate=validate.OneOf(list(known_profiles())))
    num_gpus = GpuCount(required=True)
    duration_s = bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, required=True,
                          metadata={"description": "isolated run time (an estimate)"})
    submit_in_s = fields.Float(load_default=0.0, validate=validate.Range(min=0, max=lim.MAX_SECONDS), allow_nan=False,
                               metadata={"description": "arrival, seconds from now"})
    min_gpus = fields.Integer(strict=True, load_default=None, allow_none=True,
                              validate=validate.Range(min=1, max=lim.MAX_JOB_GPUS),
                              metadata={"description": "elastic: the fewest whole GPUs it runs on (with max_gpus)"})
    max_gpus = fields.Integer(strict=True, load_default=None, allow_none=True,
                              validate=validate.Range(min=1, max=lim.MAX_JOB_GPUS),
                              metadata={"description": "elastic: the most whole GPUs it runs on (with min_gpus)"})
    sizes = fields.List(fields.Integer(strict=True, validate=validate.Range(min=1, max=lim.MAX_JOB_GPUS)),
                        load_default=list, validate=validate.Length(max=lim.MAX_ELASTIC_SIZES),
                        metadata={"description": "elastic: the only sizes it runs at"})
    resize_pause_s = bounded(0.0, lim.MAX_RESIZE_PAUSE_S, load_default=None, allow_none=True,
                             metadata={"description": "elastic: seconds a resize stops it for"})
    constraints = submitted_constraints()  # where it may run, as a submission's (web.schemas.constraints)


class WhatIfArgs(RequestSchema):
    """Every field is optional: `{}` asks how the present queue plays out under the active policy."""

    policy = fields.String(load_default=None, validate=validate.Length(min=1, max=300),
                           metadata={"description": "a policy name (GET /policies); default: the active policy"})
    extra_nodes = fields.Integer(strict=True, load_default=0,
                                 validate=validate.Range(min=0, max=lim.WHATIF_MAX_EXTRA_NODES),
                                 metadata={"description": "nodes like the last live node, added at t=0"})
    jobs = fields.List(fields.Nested(WhatIfJobArgs), load_default=list,
                       validate=validate.Length(max=lim.WHATIF_MAX_HYPOTHETICAL))
    trace = fields.String(load_default=None, validate=validate.Length(min=1, max=4096), metadata={
        "description": "replay this trace (`synthetic:N,...`, or for admins a file by name in $CORRAL_HOME/traces) "
                       "instead of the live jobs, on the live cluster"})
    limit = fields.Integer(strict=True, load_default=None, validate=validate.Range(min=1, max=lim.WHATIF_MAX_JOBS),
                           metadata={"description": "the trace's first N jobs"})
    seeds = fields.Integer(strict=True, load_default=5, validate=validate.Range(min=1, max=lim.WHATIF_MAX_SEEDS),
                           metadata={"description": "simulations, each with its own draw of the true durations"})
    horizon_s = positive(load_default=None, metadata={"description": "stop simulating this many seconds from now"})

    @validates_schema
    def _limit_needs_trace(self, data: dict[str, Any], **kwargs: Any) -> None:
        if data.get("limit") is not None and data.get("trace") is None:
            raise ValidationError({"limit": ["Applies to a trace: give trace too."]})


class DistributionSchema(Schema):
    mean = fields.Float()
    min = fields.Float()
    max = fields.Float()
    per_seed = fields.List(fields.Float(), metadata={"description": "one value per seed, in the order of `seeds`"})


class WhatIfMetricsSchema(Schema):
    avg_jct_s = fields.Nested(DistributionSchema, metadata={"description": "from now, not from submission"})
    p50_jct_s = fields.Nested(DistributionSchema)
    p95_jct_s = fields.Nested(DistributionSchema)
    p99_jct_s = fields.Nested(DistributionSchema)
    avg_queue_s = fields.Nested(DistributionSchema, metadata={"description": "queueing delay from now"})
    gpu_util = fields.Nested(DistributionSchema, metadata={"description": "busy GPU share over the makespan"})
    makespan_s = fields.Nested(DistributionSchema, metadata={"description": "until the last job ends (or horizon)"})
    jobs_completed = fields.Nested(DistributionSchema)
    jobs_rejected = fields.Nested(DistributionSchema)
    jobs_unfinished = fields.Nested(DistributionSchema, metadata={"description": "non-zero only with horizon_s"})


class WhatIfJobResultSchema(Schema):
    name = fields.String()
    model = fields.String()
    num_gpus = GpuCount()
    duration_s = fields.Float()
    submit_in_s = fields.Float()
    jct_s = fields.Float(allow_none=True, metadata={"description": "mean over the seeds it completed in, from its "
                                                                   "arrival"})
    queue_s = fields.Float(allow_none=True, metadata={"description": "mean wait before it ran"})
    jct_s_per_seed = fields.List(fields.Float(allow_none=True))
    completed_in = fields.Integer(metadata={"description": "seeds in which it completed (all, without horizon_s)"})


class WhatIfBaselineSchema(Schema):
    policy = fields.String()
    extra_nodes = fields.Integer()
    hypothetical_jobs = fields.Integer()
    metrics = fields.Nested(WhatIfMetricsSchema)


class WhatIfClusterSchema(Schema):
    name = fields.String()
    nodes = fields.Integer(metadata={"description": "every node the controller models, those down included"})
    gpus = fields.Integer()
    down_nodes = fields.Integer(metadata={"description": "nodes that are down now: their GPUs take no job in the run"})
    extra_nodes = fields.Integer()


class WhatIfJobCountsSchema(Schema):
    running = fields.Integer(metadata={"description": "keep their GPUs at t=0"})
    pending = fields.Integer(metadata={"description": "arrive at t=0 in submission order (those simulated: see "
                                                      "bounds)"})
    trace = fields.Integer()
    hypothetical = fields.Integer()


class WhatIfBoundsSchema(Schema):
    budget = fields.Integer(allow_none=True, metadata={
        "description": "the request's own jobs (hypothetical, or a trace's) x seeds a non-admin may ask for; null: "
                       "no bound (admins)"})
    request_job_seeds = fields.Integer(metadata={"description": "this request's own jobs x seeds"})
    queue_cap = fields.Integer(allow_none=True, metadata={
        "description": "the most pending jobs a non-admin's what-if simulates, the first in queue order; null: all "
                       "(admins, traces)"})
    pending_total = fields.Integer(metadata={"description": "jobs queued now (pending, and running on lost nodes)"})
    pending_simulated = fields.Integer(metadata={"description": "of those, the first in queue order, simulated"})
    pending_left_out = fields.Integer(metadata={
        "description": "the later ones, left out: queueing and JCTs are then optimistic (see notes)"})


class WhatIfSchema(Schema):
    policy = fields.String(metadata={"description": "the policy simulated"})
    active_policy = fields.String()
    seeds = fields.List(fields.Integer())
    sigma = fields.Float(metadata={"description": "log-normal spread of the true remaining work around the estimate"})
    time_origin = fields.String(metadata={"description": "`now`: t=0 is the request"})
    snapshot_at = fields.Float(metadata={"description": "Unix time of the store snapshot"})
    cluster = fields.Nested(WhatIfClusterSchema)
    jobs = fields.Nested(WhatIfJobCountsSchema)
    metrics = fields.Nested(WhatIfMetricsSchema)
    hypothetical = fields.List(fields.Nested(WhatIfJobResultSchema))
    baseline = fields.Nested(WhatIfBaselineSchema, allow_none=True, metadata={
        "description": "the same seeds under the active policy, no hypothetical jobs, no extra nodes; null when the "
                       "request changes none of them"})
    delta = fields.Dict(keys=fields.String(), values=fields.Nested(DistributionSchema), allow_none=True,
                        metadata={"description": "per metric, scenario minus baseline, paired by seed"})
    bounds = fields.Nested(WhatIfBoundsSchema, metadata={
        "description": "what bounded the simulation: the request's budget, and the pending jobs left out"})
    notes = fields.List(fields.String())
    wall_s = fields.Float()

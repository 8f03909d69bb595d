"""A job's explanation (`GET /jobs/ID/explain`): where it is or why it waits, and what the policy weighed."""

from __future__ import annotations

from marshmallow import Schema, fields

from web.schemas.estimates import start_estimate_fields
from web.schemas.job_details import LastPlacementSchema

_ESTIMATE = start_estimate_fields()  # (`web.schemas.estimates`: defined once)


class CandidateSchema(Schema):
    gpus = fields.List(fields.Integer())
    share = fields.Float()
    slowdown = fields.Float(metadata={"description": "the job's own predicted slowdown there"})
    others_added = fields.Float(metadata={"description": "slowdown it would add to the jobs already there"})
    neighbour_job_ids = fields.List(fields.Integer(), metadata={
        "description": "the jobs the prediction was made against (sharing its GPUs or network links then)"})
    computed_at = fields.Float(allow_none=True, metadata={
        "description": "when the policy scored it (the start of the controller pass that placed the job)"})
    chosen = fields.Boolean()
    where = fields.String(metadata={"description": "its GPUs by node: \"node2: GPU 0-1 (cluster GPUs 16-17)\""})


class ExplainDecisionSchema(Schema):
    policy = fields.String()
    at = fields.Float()
    action = fields.String()
    reason = fields.String()
    gpus = fields.List(fields.Integer())
    where = fields.String(metadata={"description": "its GPUs by node, with the cluster-wide numbers"})
    share = fields.Float(allow_none=True)
    predicted_slowdown = fields.Float(allow_none=True)
    latency_ms = fields.Float()
    candidates = fields.List(fields.Nested(CandidateSchema))


class ExplainPlacementSchema(Schema):
    gpus = fields.List(fields.Integer())
    nodes = fields.List(fields.String())
    where = fields.String(metadata={"description": "its GPUs by node, with the cluster-wide numbers"})
    share = fields.Float()
    predicted_slowdown = fields.Float(allow_none=True, metadata={
        "description": "now: the controller recomputes it whenever a job joins or leaves its GPUs or links"})
    neighbour_job_ids = fields.List(fields.Integer(), metadata={
        "description": "the running jobs on its GPUs or nodes now, which that prediction is made against"})


class NeighbourSchema(Schema):
    job_id = fields.Integer()
    name = fields.String()
    gpus = fields.List(fields.Integer(), metadata={"description": "the GPUs it shares with the job"})
    where = fields.String(metadata={"description": "those GPUs by node, with the cluster-wide numbers"})
    predicted_slowdown = fields.Float(allow_none=True)


class ProfileSchema(Schema):
    name = fields.String(metadata={"description": "generic, or generic~FIGURES for one refined from measured runs"})
    refined = fields.Boolean()
    source = fields.String(metadata={"description": "what each figure was made from"})
    words = fields.String()


class ExplainSchema(Schema):
    job_id = fields.Integer()
    name = fields.String()
    state = fields.String()
    queue_position = fields.Integer(allow_none=True)
    pending_reason = fields.String(allow_none=True)
    pending_until = fields.Float(allow_none=True, metadata={
        "description": "the latest time the policy holds the job for its pending reason (seconds since the epoch; "
                       "topology, for compact room), null if not bounded so"})
    start_estimate_s = _ESTIMATE["start_estimate_s"]
    start_estimate_outlook = _ESTIMATE["start_estimate_outlook"]
    start_estimate_code = _ESTIMATE["start_estimate_code"]
    start_estimate_params = _ESTIMATE["start_estimate_params"]
    start_estimate_text = _ESTIMATE["start_estimate_text"]
    start_estimate_basis = _ESTIMATE["start_estimate_basis"]
    progress = fields.Float(allow_none=True, metadata={"description": "fraction done, where it is known"})
    placement = fields.Nested(ExplainPlacementSchema, allow_none=True)
    last_placement = fields.Nested(LastPlacementSchema, allow_none=True, metadata={
        "description": "a job that holds no GPU now: where its latest run was and what ended it"})
    observed_slowdown = fields.Float(allow_none=True)
    predicted_slowdown_avg = fields.Float(allow_none=True)
    decision = fields.Nested(ExplainDecisionSchema, allow_none=True, metadata={
        "description": "the latest placement decision, with the candidates the policy weighed"})
    neighbours = fields.List(fields.Nested(NeighbourSchema))
    profile = fields.Nested(ProfileSchema, allow_none=True, metadata={
        "description": "a job that named no model: the generic profile its contention figures use (null: the "
                       "catalog's profile of its model)"})
    summary = fields.String()

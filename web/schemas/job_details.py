"""What `GET /jobs/ID` adds to a job: its dependencies' states, its events, its last placement and the policy's
decisions about it."""

from __future__ import annotations

from marshmallow import Schema, fields

from web.schemas.jobs import JobSchema


class DependencyStateSchema(Schema):
    job = fields.Integer()
    condition = fields.String()
    name = fields.String(allow_none=True, metadata={"description": "null: a job the caller may not see"})
    state = fields.String(allow_none=True)
    met = fields.Boolean(allow_none=True, metadata={"description": "true: holds; false: never will; null: not yet"})


class EventSchema(Schema):
    at = fields.Float()
    kind = fields.String()
    message = fields.String()
    data = fields.Dict()


class EndedBySchema(Schema):
    kind = fields.String(metadata={"description": "preempted or lost"})
    at = fields.Float()
    reason = fields.String(metadata={"description": "the event's message: why it was preempted or lost"})


class LastPlacementSchema(Schema):
    attempt = fields.Integer()
    nodes = fields.List(fields.String())
    gpus = fields.List(fields.Integer(), metadata={"description": "cluster-wide GPU numbers"})
    local_gpus = fields.List(fields.Integer(), metadata={"description": "the same GPUs, numbered on their nodes"})
    share = fields.Float()
    placed_at = fields.Float()
    released_at = fields.Float()
    where = fields.String(metadata={"description": "\"node2: GPU 0-7 (cluster GPUs 16-23)\""})
    ended_by = fields.Nested(EndedBySchema, allow_none=True, metadata={
        "description": "the last preemption or loss that ended that run (null: it ended otherwise)"})


class DecisionSchema(Schema):
    at = fields.Float()
    policy = fields.String()
    action = fields.String()
    reason = fields.String()
    gpus = fields.List(fields.Raw())
    share = fields.Float(allow_none=True)
    predicted_slowdown = fields.Float(allow_none=True)
    candidates = fields.List(fields.Raw())


class JobDetailSchema(JobSchema):
    dependencies = fields.List(fields.Nested(DependencyStateSchema), metadata={
        "description": "the jobs it depends on, each with its state and whether the condition holds"})

    last_placement = fields.Nested(LastPlacementSchema, allow_none=True, metadata={
        "description": "a job that holds no GPU now but held some (preempted, requeued after a lost run, finished): "
                       "where its latest run was and what ended it"})
    events = fields.List(fields.Nested(EventSchema))
    decisions = fields.List(fields.Nested(DecisionSchema), metadata={"description": "the latest decisions, oldest first"})

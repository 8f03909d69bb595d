"""Jobs: what a submission, a resubmission, a change or a requeue may give, and a job as the API answers it (whole,
or in a list)."""

from __future__ import annotations

from typing import Any

from marshmallow import INCLUDE, Schema, ValidationError, fields, pre_load, validate, validates_schema

import web.limits as lim
from scheduler.core.dependencies import Condition
from scheduler.core.workloads import catalog
from scheduler.live.job_states import DEFAULT_JOB_KIND
from scheduler.live.store.job_fields import UNLISTED_FIELDS
from scheduler.live.store.models import JobState, JobType, RestartPolicy
from web.schemas.arrays import ArraySchema
from web.schemas.base import GpuCount, RequestSchema, RetryOn, bounded, db_int


class DependencyArgs(RequestSchema):
    job = db_int(1, required=True, metadata={"description": "the id of a job of yours (any job, for admins)"})
    condition = fields.String(load_default=Condition.AFTEROK.value,
                              validate=validate.OneOf([c.value for c in Condition]), metadata={
        "description": "afterok: it succeeded; afternotok: it ended without succeeding; afterany: it ended"})


class ArrayArgs(RequestSchema):
    count = fields.Integer(strict=True, required=True, validate=validate.Range(min=1, max=lim.MAX_ARRAY), metadata={
        "description": f"tasks: indices 0 to count - 1 (CORRAL_ARRAY_INDEX), at most {lim.MAX_ARRAY}"})
    max_running = fields.Integer(strict=True, load_default=None, allow_none=True,
                                 validate=validate.Range(min=1, max=lim.MAX_ARRAY),
                                 metadata={"description": "tasks running at once, at most (null: no bound)"})


class JobSubmitSchema(RequestSchema):
    """A submission. Unknown fields are refused (marshmallow's default), so a misspelt field is an error, not
    silently ignored."""

    name = fields.String(required=True, validate=validate.Length(min=1, max=lim.MAX_NAME))
    kind = fields.String(load_default=DEFAULT_JOB_KIND.value, validate=validate.OneOf([k.value for k in JobType]),
                         metadata={"description": "emulated: runs for the time the contention model predicts (no "
                                                  "GPU work); command: runs `entrypoint`"})
    # The error lists the choices, so a typo is fixed without a second request to /models.
    model = fields.String(required=True, validate=validate.OneOf(list(catalog())))
    num_gpus = GpuCount(required=True)
    duration_s = bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, load_default=None, metadata={
        "description": "emulated: required run time in isolation; command: optional estimate (default 3600)"})
    entrypoint = fields.String(load_default=None, validate=validate.Length(max=lim.MAX_ENTRYPOINT),
                               metadata={"description": "command jobs only: the shell command"})
    workdir = fields.String(load_default=None, validate=validate.Length(max=lim.MAX_WORKDIR))
    env = fields.Dict(keys=fields.String(), values=fields.String(), load_default=dict, validate=lim.check_env,
                      metadata={"maxProperties": lim.MAX_ENV_VARS, "description": (
                          f"variables for command jobs: at most {lim.MAX_ENV_VARS}; names of letters, digits and _ "
                          f"(at most {lim.MAX_ENV_NAME}), values of at most {lim.MAX_ENV_VALUE} characters, "
                          f"{lim.MAX_ENV_TOTAL} in all")})
    priority = db_int(-lim.MAX_PRIORITY, lim.MAX_PRIORITY, strict=True, load_default=None, metadata={
        "description": f"higher first, from -{lim.MAX_PRIORITY:,} to {lim.MAX_PRIORITY:,} (default 0, or the priority "
                       "class's value); a job preempts only jobs of lower priority"})
    preemptible = fields.Boolean(truthy={True}, falsy={False}, load_default=None, metadata={
        "description": "false: never preempted (default true, or the priority class's); with teams, such a job runs "
                       "only within its team's quota"})
    time_limit_s = bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, load_default=None, metadata={
        "description": "wall seconds a run may last; one that reaches it is stopped (SIGTERM, then SIGKILL) and the job "
                       "ends timed_out (default: the cluster's, GET /time-limits; at most its maximum)"})
    depends_on = fields.List(fields.Nested(DependencyArgs), load_default=None,
                             validate=validate.Length(max=lim.MAX_DEPENDENCIES), metadata={
        "description": "run only once each of these holds; a job whose condition can never hold is cancelled"})
    array = fields.Nested(ArrayArgs, load_default=None, metadata={
        "description": "submit `count` tasks of this job, sharing an array id (GET /arrays/{id})"})
    priority_class = fields.String(load_default=None, validate=validate.Length(min=1, max=64), metadata={
        "description": "a priority class an admin defined (GET /priority-classes): the job takes its value and "
                       "preemptibility (then give neither priority nor preemptible)"})
    client_token = fields.String(load_default=None, validate=validate.Length(min=1, max=lim.MAX_NAME), metadata={
        "description": "idempotency key: a retry with the same token returns the first job (200) and stores nothing"})
    slo_ms = bounded(lim.MIN_SLO_MS, lim.MAX_SLO_MS, load_default=None)
    restart_policy = fields.String(load_default=RestartPolicy.REQUEUE.value,
                                   validate=validate.OneOf([r.value for r in RestartPolicy]))
    max_restarts = fields.Integer(strict=True, load_default=3, validate=validate.Range(min=0, max=100))
    max_retries = fields.Integer(strict=True, load_default=0, validate=validate.Range(min=0, max=lim.MAX_RETRIES),
                                 metadata={"description": "runs again after a non-zero exit, at most this many times"})
    retry_on = RetryOn(load_default=None, metadata={
        "description": 'the exit codes a failed run is retried on: "any" (the default) or a list'})
    retry_backoff_s = bounded(0.0, lim.MAX_RETRY_BACKOFF_S, load_default=30.0, metadata={
        "description": "seconds before the first retry, doubled for each retry after (at most an hour)"})
    webhook = fields.String(load_default=None, validate=validate.Length(min=1, max=2048), metadata={
        "description": "an http(s) URL called (a signed POST) on each of this job's state changes, among the "
                       "destinations the server allows (docs/webhooks.md); its secret is in the answer, only then"})

    @validates_schema
    def _kind_rules(self, data: dict[str, Any], **kwargs: Any) -> None:
        kind = data.get("kind")
        errors: dict[str, list[str]] = {}
        if data.get("priority_class") is not None:
            for name in ("priority", "preemptible"):
                if data.get(name) is not None:
                    errors[name] = [f"Give priority_class or {name}, not both: the class sets it."]
        if kind == JobType.EMULATED:
            if data.get("duration_s") is None:
                errors["duration_s"] = ["Required for emulated jobs (their run time in isolation)."]
            if data.get("entrypoint") is not None:
                errors["entrypoint"] = ["Not allowed for emulated jobs: they run no command."]
        elif kind == JobType.COMMAND and not (data.get("entrypoint") or "").strip():
            errors["entrypoint"] = ["Required (non-empty) for command jobs."]
        if errors:
            raise ValidationError(errors)


class JobListArgs(RequestSchema):
    state = fields.String(validate=validate.OneOf([s.value for s in JobState]))
    user = fields.String(validate=validate.Length(min=1, max=64))
    team = fields.String(validate=validate.Length(min=1, max=64), metadata={
        "description": "jobs submitted under this team (the submitter's team at submission)"})
    limit = fields.Integer(load_default=lim.DEFAULT_JOB_PAGE, validate=validate.Range(min=1, max=lim.MAX_PAGE),
                           metadata={"description": "jobs per page"})
    offset = db_int(load_default=0)


class JobUpdateSchema(RequestSchema):
    """What may change of a pending or running job (`PATCH /jobs/ID`): its time limit, its priority, or both. Its owner
    may only lower either (Slurm's rule); an admin may set any."""

    time_limit_s = bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, allow_none=True, metadata={
        "description": "wall seconds a run may last, from its start (null: none); a run that has lasted longer is "
                       "stopped, timed out"})
    priority = db_int(-lim.MAX_PRIORITY, lim.MAX_PRIORITY, strict=True, metadata={
        "description": f"higher first, from -{lim.MAX_PRIORITY:,} to {lim.MAX_PRIORITY:,}; a job preempts only jobs "
                       "of lower priority"})

    @validates_schema
    def _not_empty(self, data: dict[str, Any], **_: Any) -> None:
        if not data:
            raise ValidationError("give time_limit_s, priority or both", "_schema")


class RequeueArgs(RequestSchema):
    """`POST /jobs/ID/requeue`'s options."""

    hold = fields.Boolean(truthy={True}, falsy={False}, load_default=False, metadata={
        "description": "true: held once requeued, until released (Slurm's `scontrol requeuehold`)"})


class ResubmitSchema(RequestSchema):
    """The fields of a resubmission that differ from the job's: any a submission takes, each checked as there (the
    merged job is loaded by JobSubmitSchema)."""

    class Meta:
        unknown = INCLUDE  # every field a submission takes (checked in _known, then by JobSubmitSchema)

    @pre_load
    def _known(self, data: Any, **_: Any) -> Any:
        if not isinstance(data, dict):
            raise ValidationError("a JSON object of the fields to change", "_schema")
        unknown = sorted(set(data) - set(JobSubmitSchema().fields))
        if unknown:
            raise ValidationError({name: ["Unknown field."] for name in unknown})
        return data


class AllocationSchema(Schema):
    rank = fields.Integer()
    node = fields.String()
    gpu = fields.Integer()
    local_gpu = fields.Integer()
    share = fields.Float()


class JobWebhookSchema(Schema):
    id = fields.Integer()
    url = fields.String()
    secret = fields.String(metadata={"description": "signs every request to it (X-Corral-Signature); shown only now"})


class JobSloSchema(Schema):
    slo_ms = fields.Float()
    alone_ms = fields.Float(allow_none=True, metadata={"description": "the model's isolated latency (null: unknown)"})
    slowdown = fields.Float(allow_none=True, metadata={"description": "the predicted slowdown it is multiplied by"})
    predicted_ms = fields.Float(allow_none=True, metadata={"description": "alone_ms times slowdown"})
    basis = fields.String(metadata={"description": "which slowdown: now, averaged over its run, alone ('' if none)"})
    at_risk = fields.Boolean(allow_none=True, metadata={"description": "predicted_ms over slo_ms (null: unknown)"})


class JobSchema(Schema):
    id = fields.Integer()
    name = fields.String()
    user = fields.String()
    team = fields.String(metadata={"description": "the submitter's team when it was submitted: whose quota it uses"})
    kind = fields.String()
    model = fields.String()
    num_gpus = GpuCount()
    duration_s = fields.Float()
    entrypoint = fields.String(allow_none=True)
    workdir = fields.String(allow_none=True)
    env = fields.Dict(keys=fields.String(), values=fields.String())
    priority = fields.Integer()
    preemptible = fields.Boolean()
    priority_class = fields.String(allow_none=True, metadata={"description": "the class it named, if any"})
    time_limit_s = fields.Float(allow_none=True, metadata={"description": "wall seconds a run may last (null: none)"})
    depends_on = fields.List(fields.Dict(), allow_none=True, metadata={
        "description": "[{job, condition}] it runs after (null: none)"})
    array_id = fields.Integer(allow_none=True, metadata={"description": "its array, if it is a task of one"})
    array_index = fields.Integer(allow_none=True, metadata={"description": "its index in the array"})
    array_max_running = fields.Integer(allow_none=True)
    array = fields.Nested(ArraySchema, allow_none=True, metadata={
        "description": "its array with every task's state: in GET /jobs/{job_id} and the answer to an array's "
                       "submission (which is task 0's)"})
    slo_ms = fields.Float(allow_none=True)
    client_token = fields.String(allow_none=True)
    restart_policy = fields.String()
    max_restarts = fields.Integer()
    max_retries = fields.Integer()
    retry_on = RetryOn()
    retry_backoff_s = fields.Float()
    retries = fields.Integer(metadata={"description": "failed runs run again so far"})
    not_before = fields.Float(allow_none=True, metadata={"description": "a retry waits for its backoff until then"})
    state = fields.String()
    cancel_requested = fields.Boolean()
    submitted_at = fields.Float()
    queued_since = fields.Float()
    started_at = fields.Float(allow_none=True)
    first_started_at = fields.Float(allow_none=True)
    finished_at = fields.Float(allow_none=True)
    attempt = fields.Integer()
    restarts = fields.Integer()
    preemptions = fields.Integer()
    progress = fields.Float(allow_none=True, metadata={
        "description": "fraction done, where it is known: emulated jobs report it; a command job has none (null) "
                       "unless it succeeded"})
    predicted_slowdown = fields.Float(allow_none=True, metadata={
        "description": "what the contention model predicts for it now (running) or at its last placement"})
    predicted_slowdown_avg = fields.Float(allow_none=True, metadata={
        "description": "the predicted slowdown averaged over the time its workers ran"})
    observed_slowdown = fields.Float(allow_none=True, metadata={
        "description": "succeeded jobs: wall time run over isolated duration"})
    run_s = fields.Float(metadata={"description": "wall seconds its workers ran, over finished runs"})
    pending_reason = fields.String(allow_none=True)
    pending_code = fields.String(allow_none=True, metadata={
        "description": "the pending reason as data: its code (`scheduler.core.reasons.Code`: reservation, capacity, "
                       "held, dependency, ...), for programs to read instead of the words; null: none"})
    pending_params = fields.Dict(allow_none=True, metadata={
        "description": "the figures of the pending reason, by its code (a reservation's GPUs, nodes, start, ...)"})
    pending_until = fields.Float(allow_none=True, metadata={
        "description": "pending jobs the policy holds for compact room although they fit now (topology): the latest "
                       "time it holds them (seconds since the epoch), when they start spread if they must; null if "
                       "the wait is not bounded so"})
    held_at = fields.Float(allow_none=True, metadata={
        "description": "a held pending job (`POST /jobs/ID/hold`): since when; it does not start until released. "
                       "null: not held"})
    held_by = fields.String(allow_none=True, metadata={"description": "who holds it (its owner or an admin)"})
    requeue_by = fields.String(allow_none=True, metadata={
        "description": "a running job: who asked that it be checkpointed and requeued (`POST /jobs/ID/requeue`); "
                       "null once the controller has done it"})
    queue_position = fields.Integer(allow_none=True, metadata={
        "description": "pending jobs not held: place in the queue, 1 first, in submission order"})
    start_estimate_s = fields.Float(allow_none=True, metadata={
        "description": "pending jobs: about how many seconds until enough usable GPUs free up (the running jobs' "
                       "predicted ends replayed with the queue in order; a rough estimate, never 0 for a job that "
                       "does not fit now), null if unknown or it can never fit"})
    start_estimate_basis = fields.String(allow_none=True, metadata={
        "description": "pending jobs: how the start estimate was made, in words"})
    exit_code = fields.Integer(allow_none=True)
    error = fields.String(allow_none=True)
    end_code = fields.String(allow_none=True, metadata={
        "description": "why the job ended, as data: its code (exit_code, time_limit, lost, rejected, "
                       "dependency_never); null: it succeeded, or is not over"})
    end_params = fields.Dict(allow_none=True, metadata={"description": "the figures of the end's reason, by its code"})
    allocation = fields.List(fields.Nested(AllocationSchema), metadata={
        "description": "open allocations of the current run; empty unless running"})
    placement_text = fields.String(allow_none=True, metadata={
        "description": "the allocation in words: GPUs by node and index on the node, then the cluster-wide numbers "
                       "(\"node2: GPU 0-7 (cluster GPUs 16-23)\"); null when it holds none"})
    webhook = fields.Nested(JobWebhookSchema, metadata={
        "description": "only in the answer to a submission that gave `webhook`: the job's webhook and its secret"})
    terminal = fields.Boolean(metadata={"description": "whether its state is a final one (succeeded, failed, "
                                                       "cancelled, timed_out)"})
    slo = fields.Nested(JobSloSchema, allow_none=True, metadata={
        "description": "an inference job's SLO against its predicted latency (scheduler.live.slo); null: no SLO"})


class JobSummarySchema(JobSchema):
    """A job as lists show it: without its command, working directory and environment, which are the large fields
    (up to web.limits' sizes each) and which no list view shows; GET /jobs/{job_id} has them."""

    class Meta:
        exclude = UNLISTED_FIELDS  # the job-field table says which


class JobListSchema(Schema):
    jobs = fields.List(fields.Nested(JobSummarySchema), metadata={
        "description": f"at most `limit` (<= {lim.MAX_PAGE}) jobs; each without entrypoint, workdir and env, which "
                       "GET /jobs/{job_id} shows"})
    total = fields.Integer(metadata={"description": "jobs matching the filters, all pages"})

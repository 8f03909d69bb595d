"""Jobs: what a submission, a resubmission, a change or a requeue may give, and a job as the API answers it (whole,
or in a list)."""

from __future__ import annotations

import re
from typing import Any

from marshmallow import INCLUDE, Schema, ValidationError, fields, post_load, pre_load, validate, validates_schema

import web.limits as lim
from scheduler.core.dependencies import Condition
from scheduler.core.generic import GENERIC_MODEL, known_profiles
from scheduler.core.model import JobSpec
from scheduler.live.job_states import DEFAULT_JOB_KIND
from scheduler.live.store.job_fields import UNLISTED_FIELDS
from scheduler.live.store.models import JobState, JobType, RestartPolicy
from web.schemas.arrays import ArraySchema
from web.schemas.base import GpuCount, RequestSchema, RetryOn, bounded, db_int
from web.schemas.constraints import shown_field as shown_constraints
from web.schemas.constraints import submitted_field as submitted_constraints
from web.schemas.environments import EnvironmentSchema, EnvironmentShown, environment_rules
from web.schemas.estimates import start_estimate_fields

_ESTIMATE = start_estimate_fields("pending jobs: ")  # (`web.schemas.estimates`: defined once)


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


def _gpu_bound(description: str) -> fields.Integer:
    return fields.Integer(strict=True, load_default=None, allow_none=True,
                          validate=validate.Range(min=1, max=lim.MAX_JOB_GPUS), metadata={"description": description})


class JobSubmitSchema(RequestSchema):
    """A submission. Unknown fields are refused (marshmallow's default), so a misspelt field is an error, not
    silently ignored."""

    name = fields.String(required=True, validate=validate.Length(min=1, max=lim.MAX_NAME))
    kind = fields.String(load_default=DEFAULT_JOB_KIND.value, validate=validate.OneOf([k.value for k in JobType]),
                         metadata={"description": "emulated: runs for the time the contention model predicts (no "
                                                  "GPU work); command: runs `entrypoint`"})
    # The error lists the choices, so a typo is fixed without a second request to /models.
    model = fields.String(load_default=None, validate=validate.OneOf(list(known_profiles())), metadata={
        "description": f"a model of the catalog (GET /models); command jobs may leave it out: then the "
                       f"{GENERIC_MODEL!r} profile, refined from measured runs of jobs alike"})
    num_gpus = GpuCount(required=True, metadata={
        "description": "GPUs: a whole number, or a share of one (below 1); an elastic job's is the size its "
                       "duration_s is measured at, from min_gpus to max_gpus"})
    min_gpus = _gpu_bound(f"elastic: the fewest whole GPUs it runs on (1 to {lim.MAX_JOB_GPUS}); give max_gpus too, "
                          "or neither for a job of one size")
    max_gpus = _gpu_bound(f"elastic: the most whole GPUs it runs on (up to {lim.MAX_JOB_GPUS}); give min_gpus too")
    sizes = fields.List(fields.Integer(strict=True, validate=validate.Range(min=1, max=lim.MAX_JOB_GPUS)),
                        load_default=None, allow_none=True, validate=validate.Length(max=lim.MAX_ELASTIC_SIZES),
                        metadata={"description": (
                            f"elastic: the only sizes it runs at (at most {lim.MAX_ELASTIC_SIZES}), increasing, "
                            "from min_gpus to max_gpus and including num_gpus; null or []: any size in between")})
    resize_pause_s = bounded(0.0, lim.MAX_RESIZE_PAUSE_S, load_default=None, allow_none=True, metadata={
        "description": "elastic: seconds a resize stops it for (a checkpoint and a restart); null: the model's "
                       "default"})
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
    environment = fields.Nested(EnvironmentSchema, load_default=None, allow_none=True, metadata={
        "description": "command jobs: pip packages, a node's named virtual environment, a container image or a "
                       "working directory uploaded with it (docs/environments.md)"})
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

    constraints = submitted_constraints()  # (web.schemas.constraints: all of it there)

    # Run even when fields failed, so a submission missing several hears of all at once; "missing" is read from what
    # was sent (a field given but refused is not also "required").
    @validates_schema(skip_on_field_errors=False, pass_original=True)
    def _kind_rules(self, data: dict[str, Any], original_data: Any, **kwargs: Any) -> None:
        sent = original_data if isinstance(original_data, dict) else {}
        kind = data.get("kind")
        errors: dict[str, list[str]] = {}
        if data.get("priority_class") is not None:
            for name in ("priority", "preemptible"):
                if data.get(name) is not None:
                    errors[name] = [f"Give priority_class or {name}, not both: the class sets it."]
        if kind == JobType.EMULATED:
            if sent.get("duration_s") is None:
                errors["duration_s"] = ["Required for emulated jobs (their run time in isolation)."]
            if sent.get("entrypoint") is not None:
                errors["entrypoint"] = ["Not allowed for emulated jobs: they run no command."]
            if sent.get("model") is None:
                errors["model"] = ["Required for emulated jobs (they run at the rate their model's profile predicts)."]
        elif kind == JobType.COMMAND and not (isinstance(sent.get("entrypoint"), str) and sent["entrypoint"].strip()):
            errors["entrypoint"] = ["Required (non-empty) for command jobs."]
        errors.update(environment_rules(data))
        if errors:
            raise ValidationError(errors)

    @validates_schema
    def _elastic_rules(self, data: dict[str, Any], **kwargs: Any) -> None:
        """The core's rules for an elastic job (`JobSpec._check_elastic`), each refusal naming its field."""
        given = [name for name in ELASTIC_FIELDS if data.get(name) not in (None, [])]
        if not given:
            return
        try:
            JobSpec(name="-", submit_s=0.0, num_gpus=data["num_gpus"], duration_s=1.0,
                    model=data.get("model") or GENERIC_MODEL,
                    min_gpus=data.get("min_gpus"), max_gpus=data.get("max_gpus"), sizes=tuple(data.get("sizes") or ()),
                    resize_pause_s=data.get("resize_pause_s"))
        except ValueError as exc:
            why = str(exc)
            raise ValidationError({name: [f"{why.removeprefix(f'{name}: ')}."]
                                   for name in elastic_culprits(why, data)}) from None

    @post_load
    def _defaults(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if data.get("sizes") == []:
            data["sizes"] = None  # stored and shown as "any size", as null is
        if data.get("model") is None:
            data["model"] = GENERIC_MODEL  # a command job running the user's own code (emulated ones must name one)
        return data


ELASTIC_FIELDS = ("min_gpus", "max_gpus", "sizes", "resize_pause_s")
_FIRST_WORD = re.compile(r"[a-z_]+")


def elastic_culprits(why: str, data: dict[str, Any]) -> list[str]:
    """The fields a refusal of the core's elastic rules names: the bound missing from a pair, else the field its
    message starts with (each of the core's messages does), else every elastic field given."""
    if why.startswith("min_gpus and max_gpus go together"):
        return [name for name in ("min_gpus", "max_gpus") if data.get(name) is None]
    first = _FIRST_WORD.match(why)
    if first is not None and first.group() in (*ELASTIC_FIELDS, "num_gpus"):
        return [first.group()]
    return [name for name in ELASTIC_FIELDS if data.get(name) is not None]


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
    num_gpus = GpuCount(metadata={"description": "an elastic job's: the size duration_s is measured at"})
    min_gpus = fields.Integer(allow_none=True, metadata={
        "description": "elastic: the fewest GPUs it runs on (null: a job of one size, num_gpus)"})
    max_gpus = fields.Integer(allow_none=True, metadata={"description": "elastic: the most GPUs it runs on"})
    sizes = fields.List(fields.Integer(), allow_none=True, metadata={
        "description": "elastic: the only sizes it runs at (null: any from min_gpus to max_gpus)"})
    resize_pause_s = fields.Float(allow_none=True, metadata={
        "description": "elastic: seconds a resize stops it for (null: the model's default)"})
    requested_gpus = fields.Integer(allow_none=True, metadata={
        "description": "elastic: the size it was submitted at, where the cluster can never hold that size and it was "
                       "stored at the largest it can (num_gpus, its duration_s the work at that size; its `submitted` "
                       "or `sized_down` event says why); null: stored as submitted"})
    duration_s = fields.Float()
    duration_estimate = fields.Dict(allow_none=True, metadata={
        "description": "a command job that gave no duration_s: what it was estimated from, the run times of similar "
                       "jobs that ended (text, n, basis: the traits they share, quantiles_s at p10/p25/p50/p75/p90), "
                       "or the default when none has; null: the user gave it"})
    measured_usage = fields.Dict(allow_none=True, metadata={
        "description": "what NVML measured of its runs on their GPUs (samples, util_samples, sm and membw: mean "
                       "busy fractions, mem_gb: the peak on one GPU, runs); null: nothing measured (no NVML there)"})
    profile_usage = fields.Dict(allow_none=True, metadata={
        "description": "a job that named no model: the measured runs of jobs alike its generic profile is refined "
                       "from (usage, jobs, whose); null: none had been measured"})
    entrypoint = fields.String(allow_none=True)
    workdir = fields.String(allow_none=True)
    env = fields.Dict(keys=fields.String(), values=fields.String())
    environment = EnvironmentShown(allow_none=True, metadata={
        "description": "pip, venv, image and working_dir (its archive's bytes and sha256), as given; null: none"})
    priority = fields.Integer()
    preemptible = fields.Boolean()
    priority_class = fields.String(allow_none=True, metadata={"description": "the class it named, if any"})
    time_limit_s = fields.Float(allow_none=True, metadata={"description": "wall seconds a run may last (null: none)"})
    depends_on = fields.List(fields.Dict(), allow_none=True, metadata={
        "description": "[{job, condition}] it runs after (null: none)"})
    constraints = shown_constraints()
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
    start_estimate_s = _ESTIMATE["start_estimate_s"]
    start_estimate_outlook = _ESTIMATE["start_estimate_outlook"]
    start_estimate_code = _ESTIMATE["start_estimate_code"]
    start_estimate_params = _ESTIMATE["start_estimate_params"]
    start_estimate_text = _ESTIMATE["start_estimate_text"]
    start_estimate_basis = _ESTIMATE["start_estimate_basis"]
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

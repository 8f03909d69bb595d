"""Marshmallow schemas: what the API accepts and returns. They validate every request before anything is stored, and
flask-smorest turns them into the OpenAPI document, so the spec and the checks cannot drift apart."""

from __future__ import annotations

import math
from typing import Any

from marshmallow import INCLUDE, Schema, ValidationError, fields, pre_load, validate, validates_schema

import web.limits as lim
from scheduler.core.dependencies import Condition
from scheduler.core.tenancy import TeamError, make_team
from scheduler.core.workloads import catalog
from scheduler.live.job_states import DEFAULT_JOB_KIND
from scheduler.live.node.report import MAX_XIDS  # the agent sends the latest ones
from scheduler.live.store.models import JobState, JobType, RestartPolicy
from scheduler.live.store.queries import check_user_name

DEFAULT_COMMAND_DURATION_S = 3600.0  # a command job's run-time estimate when the user gives none
# The store's Integer columns (ids included) are 32-bit on PostgreSQL, 64-bit on SQLite: a larger number in a request
# would reach the driver and fail there as a 500, so every integer a request carries is bounded to what both hold.
DB_INT_MAX = 2**31 - 1


class GpuCount(fields.Field):
    """A whole number of GPUs (>= 1), or a share of one GPU strictly between 0 and 1 (MPS). 1.5 GPUs means nothing a
    placement can give, so it is refused rather than rounded. Dumped as an int when whole, so clients see `2`."""

    # marshmallow's Field declares this a plain attribute, so it cannot be a ClassVar here; read per class, not mutated
    default_error_messages = {  # noqa: RUF012
        "invalid": "Not a number.",
        "range": f"Must be a whole number of GPUs from 1 to {lim.MAX_JOB_GPUS}, or a fraction from "
                 f"{lim.MIN_GPU_SHARE} to below 1.",
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs["metadata"] = {"minimum": lim.MIN_GPU_SHARE, "maximum": lim.MAX_JOB_GPUS, **kwargs.get("metadata", {})}
        super().__init__(**kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.make_error("invalid")
        if isinstance(value, int) and value > lim.MAX_JOB_GPUS:  # before float(): a long int would overflow it
            raise self.make_error("range")
        x = float(value)
        if not math.isfinite(x) or not (lim.MIN_GPU_SHARE <= x < 1 or (1 <= x <= lim.MAX_JOB_GPUS and x.is_integer())):
            raise self.make_error("range")
        return x

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> int | float | None:
        if value is None:
            return None
        x = float(value)
        return int(x) if x.is_integer() else x


class RetryOn(fields.Field):
    """The exit codes a failed run is retried on: "any", or a list of codes from 1 to 255. Stored as None for any."""

    default_error_messages = {  # noqa: RUF012  (as GpuCount's)
        "invalid": f'Must be "any" or a list of 1 to {lim.MAX_RETRY_CODES} exit codes from 1 to 255.',
    }

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[int] | None:
        if value == "any":
            return None
        if (not isinstance(value, list) or not 1 <= len(value) <= lim.MAX_RETRY_CODES
                or not all(type(v) is int and 1 <= v <= 255 for v in value)):
            raise self.make_error("invalid")
        return sorted(set(value))

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> str | list[int]:
        return "any" if value is None else list(value)


def _db_int(minimum: int = 0, maximum: int = DB_INT_MAX, **kw: Any) -> fields.Integer:
    """An integer the store can hold (see DB_INT_MAX): out of range is a 422 naming the field, not a driver error."""
    return fields.Integer(validate=validate.Range(min=minimum, max=maximum), **kw)


# Durations, SLOs and horizons are capped far beyond any real job (about 32 years): a number near the float limit
# overflows the simulator's arithmetic into inf/NaN, which the API would then return as null where it documents numbers.
MAX_SECONDS = 1e9


def _positive(**kw: Any) -> fields.Float:
    return fields.Float(validate=validate.Range(min=0, min_inclusive=False, max=MAX_SECONDS), allow_nan=False, **kw)


def _bounded(low: float, high: float, **kw: Any) -> fields.Float:
    """A finite float in [low, high] (web.limits says why each bound), stated in the OpenAPI document."""
    return fields.Float(validate=validate.Range(min=low, max=high), allow_nan=False, **kw)


# ---- requests ------------------------------------------------------------------------------------------------------


def _bad_string(text: str) -> str | None:
    """Why `text` cannot be stored or passed on, or None. A NUL byte: PostgreSQL's text cannot hold one, and no name,
    command or path needs it. A lone surrogate ("\\ud800" in JSON): not Unicode, so it cannot be encoded as UTF-8
    for the database, a log or a process's environment (it made the insert, and a worker's Popen, fail)."""
    if "\x00" in text:
        return "Must not contain a NUL byte."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"Must be valid Unicode: a lone surrogate (U+{ord(text[exc.start]):04X}) at character {exc.start}."
    return None


def bad_strings(data: Any) -> dict[str, str]:
    """{dotted name: why} for every string (key or value) anywhere in `data` that `_bad_string` refuses. Iterative:
    the app refuses deep JSON, but this must not be the thing that overflows the stack either."""
    found: dict[str, str] = {}
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                name = f"{path}.{key}" if path else str(key)
                why = _bad_string(key) if isinstance(key, str) else None
                if why:
                    found[name.encode("utf-8", "backslashreplace").decode()] = why
                stack.append((name, item))
        elif isinstance(value, list):
            stack.extend((f"{path}.{i}" if path else str(i), item) for i, item in enumerate(value))
        elif isinstance(value, str) and (why := _bad_string(value)):
            found[path.encode("utf-8", "backslashreplace").decode() or "_schema"] = why
    return found


class RequestSchema(Schema):
    """What every request schema shares: no string, key or value, at any depth, may hold a NUL byte or a lone
    surrogate (see `_bad_string`); refused as a 422 naming the field before anything reads it."""

    @pre_load
    def _storable_strings(self, data: Any, **kwargs: Any) -> Any:
        # Query strings arrive as a (proxy of a) MultiDict: look at every value, but hand on the data unchanged.
        seen = {k: data.getlist(k) for k in data} if hasattr(data, "getlist") else data
        bad = bad_strings(seen)
        if bad:
            raise ValidationError({name.split(".")[0]: [why] for name, why in bad.items()})
        return data


MAX_DEPENDENCIES = 100  # jobs one job may depend on
MAX_ARRAY = 1000  # tasks in one array


class DependencyArgs(RequestSchema):
    job = _db_int(1, required=True, metadata={"description": "the id of a job of yours (any job, for admins)"})
    condition = fields.String(load_default=Condition.AFTEROK.value,
                              validate=validate.OneOf([c.value for c in Condition]), metadata={
        "description": "afterok: it succeeded; afternotok: it ended without succeeding; afterany: it ended"})


class ArrayArgs(RequestSchema):
    count = fields.Integer(strict=True, required=True, validate=validate.Range(min=1, max=MAX_ARRAY), metadata={
        "description": f"tasks: indices 0 to count - 1 (CORRAL_ARRAY_INDEX), at most {MAX_ARRAY}"})
    max_running = fields.Integer(strict=True, load_default=None, allow_none=True,
                                 validate=validate.Range(min=1, max=MAX_ARRAY),
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
    duration_s = _bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, load_default=None, metadata={
        "description": "emulated: required run time in isolation; command: optional estimate (default 3600)"})
    entrypoint = fields.String(load_default=None, validate=validate.Length(max=lim.MAX_ENTRYPOINT),
                               metadata={"description": "command jobs only: the shell command"})
    workdir = fields.String(load_default=None, validate=validate.Length(max=lim.MAX_WORKDIR))
    env = fields.Dict(keys=fields.String(), values=fields.String(), load_default=dict, validate=lim.check_env,
                      metadata={"maxProperties": lim.MAX_ENV_VARS, "description": (
                          f"variables for command jobs: at most {lim.MAX_ENV_VARS}; names of letters, digits and _ "
                          f"(at most {lim.MAX_ENV_NAME}), values of at most {lim.MAX_ENV_VALUE} characters, "
                          f"{lim.MAX_ENV_TOTAL} in all")})
    priority = _db_int(-lim.MAX_PRIORITY, lim.MAX_PRIORITY, strict=True, load_default=None, metadata={
        "description": f"higher first, from -{lim.MAX_PRIORITY:,} to {lim.MAX_PRIORITY:,} (default 0, or the priority "
                       "class's value); a job preempts only jobs of lower priority"})
    preemptible = fields.Boolean(truthy={True}, falsy={False}, load_default=None, metadata={
        "description": "false: never preempted (default true, or the priority class's); with teams, such a job runs "
                       "only within its team's quota"})
    time_limit_s = _bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, load_default=None, metadata={
        "description": "wall seconds a run may last; one that reaches it is stopped (SIGTERM, then SIGKILL) and the job "
                       "ends timed_out (default: the cluster's, GET /time-limits; at most its maximum)"})
    depends_on = fields.List(fields.Nested(DependencyArgs), load_default=None,
                             validate=validate.Length(max=MAX_DEPENDENCIES), metadata={
        "description": "run only once each of these holds; a job whose condition can never hold is cancelled"})
    array = fields.Nested(ArrayArgs, load_default=None, metadata={
        "description": "submit `count` tasks of this job, sharing an array id (GET /arrays/{id})"})
    priority_class = fields.String(load_default=None, validate=validate.Length(min=1, max=64), metadata={
        "description": "a priority class an admin defined (GET /priority-classes): the job takes its value and "
                       "preemptibility (then give neither priority nor preemptible)"})
    client_token = fields.String(load_default=None, validate=validate.Length(min=1, max=lim.MAX_NAME), metadata={
        "description": "idempotency key: a retry with the same token returns the first job (200) and stores nothing"})
    slo_ms = _bounded(lim.MIN_SLO_MS, lim.MAX_SLO_MS, load_default=None)
    restart_policy = fields.String(load_default=RestartPolicy.REQUEUE.value,
                                   validate=validate.OneOf([r.value for r in RestartPolicy]))
    max_restarts = fields.Integer(strict=True, load_default=3, validate=validate.Range(min=0, max=100))
    max_retries = fields.Integer(strict=True, load_default=0, validate=validate.Range(min=0, max=lim.MAX_RETRIES),
                                 metadata={"description": "runs again after a non-zero exit, at most this many times"})
    retry_on = RetryOn(load_default=None, metadata={
        "description": 'the exit codes a failed run is retried on: "any" (the default) or a list'})
    retry_backoff_s = _bounded(0.0, lim.MAX_RETRY_BACKOFF_S, load_default=30.0, metadata={
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
    offset = _db_int(load_default=0)


class PageArgs(RequestSchema):
    """A page of a short list (tokens, users, teams): by default all of it, up to the maximum page."""

    limit = fields.Integer(load_default=lim.MAX_PAGE, validate=validate.Range(min=1, max=lim.MAX_PAGE))
    offset = _db_int(load_default=0)


class LogsArgs(RequestSchema):
    attempt = _db_int(metadata={"description": "default: the current run"})
    rank = _db_int(metadata={"description": "default: every rank"})
    tail = fields.Integer(load_default=200, validate=validate.Range(min=1, max=100_000),
                          metadata={"description": "last lines per rank"})
    offset = fields.Integer(validate=validate.Range(min=0, max=2**62), metadata={
        "description": "follow a log: what it holds from this byte on (with `rank`; start from the `end` a previous "
                       "answer gave) instead of its last lines"})
    wait_s = fields.Float(load_default=0.0, validate=validate.Range(min=0.0, max=lim.MAX_LOG_WAIT_S), metadata={
        "description": "with `offset`: when there is nothing new yet, wait up to this long for it (long polling)"})

    @validates_schema
    def _follow_rules(self, data: dict[str, Any], **_: Any) -> None:
        if "offset" in data and "rank" not in data:
            raise ValidationError("give the rank whose log to follow", "rank")
        if data.get("wait_s") and "offset" not in data:
            raise ValidationError("waiting is for following a log: give offset (and rank)", "wait_s")


class ActivePolicyArgs(RequestSchema):
    name = fields.String(required=True, validate=validate.Length(min=1, max=300))


# A quota or borrowing limit beyond any cluster: larger numbers would only overflow the usage arithmetic (quotas are
# checked against the cluster's size only once the controller has registered its GPUs).
MAX_TEAM_GPUS = 1_000_000


def _name_rule(value: str) -> None:
    """The user-name rule (queries.check_user_name) for team names too: no name can be taken for a CLI flag."""
    try:
        check_user_name(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


class TeamGpus(fields.Field):
    """GPUs as a team's quota or borrowing limit: a finite number >= 0, fractions allowed (MPS shares). The rule is
    scheduler.core.tenancy's (`make_team`), so the API refuses what a simulator's teams.yaml refuses, in its words."""

    def __init__(self, description: str, *, borrow_limit: bool = False, **kwargs: Any) -> None:
        super().__init__(metadata={"type": "number", "minimum": 0, "maximum": MAX_TEAM_GPUS,
                                   "description": description}, **kwargs)
        self.borrow_limit = borrow_limit

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        try:
            team = make_team("", 0.0, value, "") if self.borrow_limit else make_team("", value, None, "")
        except TeamError as exc:  # "<where>.<field>: <why>": the field is this one, the reason is what to say
            raise ValidationError(str(exc).partition(": ")[2]) from None
        except OverflowError:  # an integer literal too large for a float (math.isfinite cannot even look at it)
            raise ValidationError("a finite number is required, got an integer too large for a float") from None
        gpus = team.borrow_limit_gpus if self.borrow_limit else team.quota_gpus
        assert gpus is not None  # None (no limit) never reaches _deserialize: allow_none handles it
        if gpus > MAX_TEAM_GPUS:
            raise ValidationError(f"must be at most {MAX_TEAM_GPUS} GPUs, got {gpus:g}")
        return gpus


QUOTA_HELP = ("GPUs the team may always use (fractions allowed); all teams' quotas add up to at most the cluster's "
              "GPUs")
BORROW_HELP = "GPUs it may borrow beyond its quota while others leave them idle; null: no limit but the cluster"


class TeamCreateArgs(RequestSchema):
    name = fields.String(required=True, validate=_name_rule, metadata={
        "description": "1 to 64 letters, digits, '.', '_' or '-', not starting with '-'"})
    quota_gpus = TeamGpus(QUOTA_HELP, required=True)
    borrow_limit_gpus = TeamGpus(BORROW_HELP, borrow_limit=True, load_default=None, allow_none=True)


class CeilingArgs:
    """A priority ceiling's settings (scheduler.live.priority_ceilings), for a user or a team; null clears one."""

    max_priority = _db_int(-lim.MAX_PRIORITY, lim.MAX_PRIORITY, strict=True, allow_none=True, metadata={
        "description": "the highest priority a job may give (null: the team's, then the built-in 0)"})
    allow_nonpreemptible = fields.Boolean(truthy={True}, falsy={False}, allow_none=True, metadata={
        "description": "whether a job may give preemptible: false (null: the team's, then the built-in false)"})
    priority_classes = fields.List(fields.String(validate=_name_rule), allow_none=True,
                                   validate=validate.Length(max=lim.MAX_CEILING_CLASSES), metadata={
        "description": "the priority classes a job may name whatever their figures (null: the team's, then none); a "
                       "class within max_priority and allow_nonpreemptible may always be named"})


class CeilingSchema(Schema):
    max_priority = fields.Integer(metadata={"description": "the highest priority a job may give (403 above it)"})
    allow_nonpreemptible = fields.Boolean(metadata={"description": "whether a job may give preemptible: false"})
    priority_classes = fields.List(fields.String(), metadata={
        "description": "classes a job may name whatever their figures"})


class TeamPatchArgs(CeilingArgs, RequestSchema):
    """Only the fields given change. A team is not renamed: its name is in its jobs' history."""

    quota_gpus = TeamGpus(QUOTA_HELP)
    borrow_limit_gpus = TeamGpus(BORROW_HELP, borrow_limit=True, allow_none=True)


class PriorityClassCreateArgs(RequestSchema):
    name = fields.String(required=True, validate=_name_rule, metadata={
        "description": "1 to 64 letters, digits, '.', '_' or '-', not starting with '-'"})
    value = _db_int(-lim.MAX_PRIORITY, lim.MAX_PRIORITY, strict=True, required=True, metadata={
        "description": "the priority its jobs get (higher first)"})
    preemptible = fields.Boolean(truthy={True}, falsy={False}, load_default=True, metadata={
        "description": "false: its jobs are never preempted (and, with teams, run only within their team's quota)"})
    description = fields.String(load_default=None, validate=validate.Length(max=500))


class TimeLimitsArgs(RequestSchema):
    """Only the fields given change; null clears one."""

    default_s = _bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, allow_none=True, metadata={
        "description": "the time limit a job gets when it gives none (null: none)"})
    max_s = _bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, allow_none=True, metadata={
        "description": "the most a job may give (null: no maximum)"})

    @validates_schema
    def _something(self, data: dict[str, Any], **kwargs: Any) -> None:
        if not data:
            raise ValidationError("give default_s, max_s or both", "_schema")


class TimeLimitsSchema(Schema):
    default_s = fields.Float(allow_none=True, metadata={"description": "a job's time limit when it gives none"})
    max_s = fields.Float(allow_none=True, metadata={"description": "the most a job may give"})


class PriorityClassSchema(Schema):
    name = fields.String()
    value = fields.Integer()
    preemptible = fields.Boolean()
    description = fields.String(allow_none=True)
    created_at = fields.Float()
    created_by = fields.String(allow_none=True)


class PriorityClassListSchema(Schema):
    priority_classes = fields.List(fields.Nested(PriorityClassSchema), metadata={"description": "highest value first"})


class UserPatchArgs(RequestSchema):
    team = fields.String(required=True, validate=validate.Length(min=1, max=64), metadata={
        "description": "the team to move the user to; refused while they have jobs pending or running"})


# Fair use (web.fair_use): bounds far beyond any sensible limit, so a typo cannot store something absurd; null clears a
# setting (a user's override falls back to the cluster's default, a default to the built-in one).
MAX_PENDING_LIMIT = 1_000_000
MAX_SUBMIT_RATE = 10_000.0
MAX_SUBMIT_BURST = 1_000_000
MAX_WHATIF_PER_MIN = 10_000
MAX_REQUEST_RATE = 100_000.0
MAX_REQUEST_BURST = 1_000_000


class LimitsArgs(RequestSchema):
    """Only the limits given change; null clears one (back to the cluster's default, or the built-in one)."""

    max_pending = fields.Integer(strict=True, allow_none=True, validate=validate.Range(min=1, max=MAX_PENDING_LIMIT),
                                 metadata={"description": "jobs a user may have pending at once"})
    submit_rate = fields.Float(allow_none=True, allow_nan=False,
                               validate=validate.Range(min=0, min_inclusive=False, max=MAX_SUBMIT_RATE),
                               metadata={"description": "submissions a second, on average (a token bucket)"})
    submit_burst = fields.Integer(strict=True, allow_none=True, validate=validate.Range(min=1, max=MAX_SUBMIT_BURST),
                                  metadata={"description": "submissions at once before the rate applies"})
    whatif_per_min = fields.Integer(strict=True, allow_none=True,
                                    validate=validate.Range(min=1, max=MAX_WHATIF_PER_MIN),
                                    metadata={"description": "what-if calls a minute"})
    request_rate = fields.Float(allow_none=True, allow_nan=False,
                                validate=validate.Range(min=0, min_inclusive=False, max=MAX_REQUEST_RATE),
                                metadata={"description": "API requests a second, on average (a token bucket)"})
    request_burst = fields.Integer(strict=True, allow_none=True,
                                   validate=validate.Range(min=1, max=MAX_REQUEST_BURST),
                                   metadata={"description": "API requests at once before the rate applies"})

    BOOLEANS: tuple[str, ...] = ()  # the fields that are booleans; every other one is a number

    @pre_load
    def _no_booleans(self, data: Any, **kwargs: Any) -> Any:
        # JSON true is not 1: a boolean for a number is a mistake, refused by name.
        if isinstance(data, dict):
            bad = {k: ["Not a valid number."] for k, v in data.items()
                   if k in self.fields and k not in self.BOOLEANS and isinstance(v, bool)}
            if bad:
                raise ValidationError(bad)
        return data

    @validates_schema
    def _something(self, data: dict[str, Any], **kwargs: Any) -> None:
        if not data:
            *most, last = self.fields
            raise ValidationError(f"nothing to change: give {', '.join(most)} or {last}")


class UserLimitsArgs(CeilingArgs, LimitsArgs):
    """A user's overrides: the fair-use limits and their priority ceiling. Only those given change; null clears one
    (a limit back to the cluster's default, a ceiling's setting back to the team's)."""

    BOOLEANS = ("allow_nonpreemptible",)


# What a node agent pushes (`PUT /nodes/<name>/health`): its health.json, less what the server derives or does not
# keep. Bounds are far beyond real readings; they keep a broken or hostile client from storing anything huge.
GPU_HEALTH_STATUSES = ("ok", "degraded", "unreachable", "virtual")
MAX_NODE_GPUS = 64  # as `corral node start --gpus`
MAX_REPORT_INTERVAL_S = 3600.0  # as `corral node start --health-interval`
MIN_REPORT_INTERVAL_S = 0.2


class GpuHealthArgs(RequestSchema):
    index = fields.Integer(required=True, strict=True, validate=validate.Range(min=0, max=MAX_NODE_GPUS - 1),
                           metadata={"description": "the GPU's index on its node (CUDA's, NVML's)"})
    status = fields.String(required=True, validate=validate.OneOf(GPU_HEALTH_STATUSES), metadata={
        "description": "ok; degraded (uncorrected ECC errors or a critical XID since the agent started); "
                       "unreachable (NVML cannot query it); virtual (no hardware behind it)"})
    temperature_c = fields.Integer(strict=True, load_default=None, allow_none=True,
                                   validate=validate.Range(min=-100, max=300))
    ecc_uncorrected = fields.Integer(strict=True, load_default=None, allow_none=True,
                                     validate=validate.Range(min=0, max=DB_INT_MAX),
                                     metadata={"description": "volatile count; null: ECC off or not supported"})
    xid_errors = fields.List(fields.Integer(strict=True, validate=validate.Range(min=0, max=DB_INT_MAX)),
                             load_default=list, validate=validate.Length(max=MAX_XIDS),
                             metadata={"description": f"critical XID codes since the agent started (the latest "
                                                      f"{MAX_XIDS})"})
    error = fields.String(load_default="", validate=validate.Length(max=1000))


class MpsHealthArgs(RequestSchema):
    enabled = fields.Boolean(required=True)
    daemon_running = fields.Boolean(load_default=None, allow_none=True)
    clients = fields.Integer(strict=True, load_default=0, validate=validate.Range(min=0, max=DB_INT_MAX))


class NodeHealthArgs(RequestSchema):
    """A node's GPU health report. Unknown fields are refused; the node's overall status is derived from its GPUs'."""

    agent = fields.String(required=True, validate=validate.OneOf(["running", "stopped"]),
                          metadata={"description": "stopped: the agent has left, this is its last report"})
    updated_at = fields.Float(required=True, allow_nan=False, validate=validate.Range(min=0, max=1e11),
                              metadata={"description": "when the agent read the GPUs (Unix seconds, the node's clock)"})
    interval_s = fields.Float(required=True, allow_nan=False,
                              validate=validate.Range(min=MIN_REPORT_INTERVAL_S, max=MAX_REPORT_INTERVAL_S),
                              metadata={"description": "seconds between the agent's reports: a report older than 3 "
                                                       "of them is shown as stale"})
    gpus = fields.List(fields.Nested(GpuHealthArgs), required=True,
                       validate=validate.Length(min=1, max=MAX_NODE_GPUS))
    mps = fields.Nested(MpsHealthArgs, load_default=None, allow_none=True)

    @validates_schema
    def _one_reading_per_gpu(self, data: dict[str, Any], **kwargs: Any) -> None:
        seen: set[int] = set()
        for i, gpu in enumerate(data.get("gpus") or ()):
            if gpu["index"] in seen:
                raise ValidationError({"gpus": {i: {"index": [f"GPU {gpu['index']} is reported twice."]}}})
            seen.add(gpu["index"])


# ---- responses -----------------------------------------------------------------------------------------------------


class AllocationSchema(Schema):
    rank = fields.Integer()
    node = fields.String()
    gpu = fields.Integer()
    local_gpu = fields.Integer()
    share = fields.Float()


class JobUpdateSchema(RequestSchema):
    """What may change of a pending or running job (`PATCH /jobs/ID`): its time limit, its priority, or both. Its owner
    may only lower either (Slurm's rule); an admin may set any."""

    time_limit_s = _bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, allow_none=True, metadata={
        "description": "wall seconds a run may last, from its start (null: none); a run that has lasted longer is "
                       "stopped, timed out"})
    priority = _db_int(-lim.MAX_PRIORITY, lim.MAX_PRIORITY, strict=True, metadata={
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


class JobWebhookSchema(Schema):
    id = fields.Integer()
    url = fields.String()
    secret = fields.String(metadata={"description": "signs every request to it (X-Corral-Signature); shown only now"})


class DependencyStateSchema(Schema):
    job = fields.Integer()
    condition = fields.String()
    name = fields.String(allow_none=True, metadata={"description": "null: a job the caller may not see"})
    state = fields.String(allow_none=True)
    met = fields.Boolean(allow_none=True, metadata={"description": "true: holds; false: never will; null: not yet"})


class ArrayTaskSchema(Schema):
    id = fields.Integer()
    index = fields.Integer()
    state = fields.String()
    held_by = fields.String(allow_none=True, metadata={"description": "who holds it, if it is held"})


class ArraySchema(Schema):
    id = fields.Integer()
    name = fields.String()
    user = fields.String()
    count = fields.Integer()
    max_running = fields.Integer(allow_none=True)
    submitted_at = fields.Float()
    states = fields.Dict(keys=fields.String(), values=fields.Integer(), metadata={"description": "tasks per state"})
    held = fields.Integer(metadata={"description": "pending tasks held (`POST /arrays/ID/hold`)"})
    tasks = fields.List(fields.Nested(ArrayTaskSchema), metadata={"description": "by index"})


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


class JobSummarySchema(JobSchema):
    """A job as lists show it: without its command, working directory and environment, which are the large fields
    (up to web.limits' sizes each) and which no list view shows; GET /jobs/{job_id} has them."""

    class Meta:
        exclude = ("entrypoint", "workdir", "env")


class JobListSchema(Schema):
    jobs = fields.List(fields.Nested(JobSummarySchema), metadata={
        "description": f"at most `limit` (<= {lim.MAX_PAGE}) jobs; each without entrypoint, workdir and env, which "
                       "GET /jobs/{job_id} shows"})
    total = fields.Integer(metadata={"description": "jobs matching the filters, all pages"})


class RankLogSchema(Schema):
    rank = fields.Integer()
    path = fields.String(metadata={"description": "the log's name among the job's logs (`job-7/attempt-2/rank-0.log`), "
                                                  "never a folder of the server's"})
    text = fields.String()
    end = fields.Integer(metadata={"description": "the byte offset just past `text`: the `offset` to follow from"})


class LogsSchema(Schema):
    job_id = fields.Integer()
    attempt = fields.Integer()
    state = fields.String(metadata={"description": "the job's state now"})
    current_attempt = fields.Integer(metadata={"description": "the job's run now (a follower of an older one moves on)"})
    logs = fields.List(fields.Nested(RankLogSchema))


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


class NodeSchema(Schema):
    name = fields.String()
    index = fields.Integer()
    preset = fields.String()
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


class PoliciesSchema(Schema):
    available = fields.List(fields.String())
    active = fields.String(allow_none=True)


class ActivePolicySchema(Schema):
    active = fields.String()


class TokenSchema(Schema):
    """A token as listings show it: never the token itself (only its hash is stored), its first characters instead."""

    id = fields.Integer()
    prefix = fields.String(metadata={"description": "the token's first characters, as `corral token list` prints"})
    user = fields.String()
    admin = fields.Boolean(metadata={"description": "whether the token's user is an admin"})
    created_at = fields.Float()
    expires_at = fields.Float(allow_none=True)
    revoked = fields.Boolean()
    revoked_at = fields.Float(allow_none=True)


class TokenListSchema(Schema):
    tokens = fields.List(fields.Nested(TokenSchema))
    total = fields.Integer(metadata={"description": "how many there are, all pages"})


class TeamSchema(Schema):
    name = fields.String()
    quota_gpus = fields.Float()
    borrow_limit_gpus = fields.Float(allow_none=True, metadata={"description": "null: no limit but the cluster"})
    created_at = fields.Float()
    updated_at = fields.Float()
    in_use_gpus = fields.Float(metadata={"description": "GPUs its running jobs hold (shares as fractions)"})
    borrowed_gpus = fields.Float(metadata={"description": "of those, GPUs beyond its quota"})
    lent_gpus = fields.Float(metadata={
        "description": "its idle quota that borrowers hold (borrowers first take GPUs in no team's quota; the rest is "
                       "lent by the teams under their quota, in proportion to their idle quota)"})
    pending_jobs = fields.Integer()
    running_jobs = fields.Integer()
    priority_ceiling = fields.Nested(CeilingSchema, metadata={
        "description": "what its members' jobs may ask for where they have no setting of their own"})
    ceiling_sources = fields.Dict(keys=fields.String(), values=fields.String(), metadata={
        "description": "where each ceiling setting comes from: team or built-in"})


class TeamListSchema(Schema):
    teams = fields.List(fields.Nested(TeamSchema))
    total = fields.Integer(metadata={"description": "how many there are, all pages"})
    cluster_gpus = fields.Integer(metadata={"description": "GPUs the controller registered (0 before its first start)"})


class TeamDeletedSchema(Schema):
    name = fields.String()
    moved_users = fields.List(fields.String(), metadata={"description": "its members, now in the default team"})
    message = fields.String()


class UserSchema(Schema):
    name = fields.String()
    team = fields.String()
    admin = fields.Boolean()
    created_at = fields.Float()
    active_jobs = fields.Integer(metadata={"description": "jobs pending or running (a user with any cannot move)"})


LIMIT_SOURCES = ("user", "team", "cluster", "built-in")


class LimitsSchema(Schema):
    user = fields.String(allow_none=True, metadata={"description": "null: the cluster-wide defaults"})
    exempt = fields.Boolean(metadata={"description": "an admin: no limit applies"})
    max_pending = fields.Integer(metadata={"description": "jobs pending at once (429 past it)"})
    submit_rate = fields.Float(metadata={"description": "submissions a second after the burst (429, Retry-After)"})
    submit_burst = fields.Integer(metadata={"description": "submissions at once"})
    whatif_per_min = fields.Integer(metadata={"description": "what-if calls a minute (429, Retry-After)"})
    request_rate = fields.Float(metadata={"description": "API requests a second after the burst (429, Retry-After)"})
    request_burst = fields.Integer(metadata={"description": "API requests at once"})
    max_priority = fields.Integer(metadata={"description": "a user's: the highest priority their jobs may give"})
    allow_nonpreemptible = fields.Boolean(metadata={"description": "a user's: may their jobs be non-preemptible"})
    priority_classes = fields.List(fields.String(), metadata={
        "description": "a user's: the classes their jobs may name whatever their figures"})
    sources = fields.Dict(keys=fields.String(), values=fields.String(validate=validate.OneOf(LIMIT_SOURCES)),
                          metadata={"description": "where each value comes from: user (an override), team (the "
                                                   "user's team's ceiling), cluster (an admin's default) or built-in"})


class UserListSchema(Schema):
    users = fields.List(fields.Nested(UserSchema))
    total = fields.Integer(metadata={"description": "how many there are, all pages"})


class HealthSchema(Schema):
    status = fields.String()
    database = fields.String()
    version = fields.String()
    time = fields.Float()
    controller = fields.String(metadata={"description": "this replica's controller: leader or standby"})
    replica = fields.String(metadata={"description": "this replica's id (host:pid:random)"})
    epoch = fields.Integer(allow_none=True, metadata={"description": "the controller lease's epoch (null: SQLite, "
                                                                     "one process, no lease)"})
    leader = fields.String(allow_none=True, metadata={"description": "the replica holding the lease"})
    lease = fields.String(metadata={"description": "the lease's terms and time left, or why there is none"})


# ---- explanations --------------------------------------------------------------------------------------------------


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


class ExplainSchema(Schema):
    job_id = fields.Integer()
    name = fields.String()
    state = fields.String()
    queue_position = fields.Integer(allow_none=True)
    pending_reason = fields.String(allow_none=True)
    pending_until = fields.Float(allow_none=True, metadata={
        "description": "the latest time the policy holds the job for its pending reason (seconds since the epoch; "
                       "topology, for compact room), null if not bounded so"})
    start_estimate_s = fields.Float(allow_none=True, metadata={
        "description": "about how long until enough usable GPUs free up (see start_estimate_basis)"})
    start_estimate_basis = fields.String(allow_none=True, metadata={
        "description": "how the start estimate was made, in words"})
    progress = fields.Float(allow_none=True, metadata={"description": "fraction done, where it is known"})
    placement = fields.Nested(ExplainPlacementSchema, allow_none=True)
    last_placement = fields.Nested(LastPlacementSchema, allow_none=True, metadata={
        "description": "a job that holds no GPU now: where its latest run was and what ended it"})
    observed_slowdown = fields.Float(allow_none=True)
    predicted_slowdown_avg = fields.Float(allow_none=True)
    decision = fields.Nested(ExplainDecisionSchema, allow_none=True, metadata={
        "description": "the latest placement decision, with the candidates the policy weighed"})
    neighbours = fields.List(fields.Nested(NeighbourSchema))
    summary = fields.String()


# ---- what-if (POST /whatif) ----------------------------------------------------------------------------------------
# The limits are scheduler.live.whatif's (the core validates again; these give 422s naming every bad field at once).

WHATIF_MAX_SEEDS = 20
WHATIF_MAX_EXTRA_NODES = 1024
WHATIF_MAX_HYPOTHETICAL = 1000
WHATIF_MAX_JOBS = 20_000


class WhatIfJobArgs(RequestSchema):
    """A hypothetical job: it does not exist, the simulation adds it."""

    name = fields.String(load_default=None, validate=validate.Length(min=1, max=200))
    model = fields.String(required=True, validate=validate.OneOf(list(catalog())))
    num_gpus = GpuCount(required=True)
    duration_s = _bounded(lim.MIN_JOB_SECONDS, lim.MAX_JOB_SECONDS, required=True,
                          metadata={"description": "isolated run time (an estimate)"})
    submit_in_s = fields.Float(load_default=0.0, validate=validate.Range(min=0, max=MAX_SECONDS), allow_nan=False,
                               metadata={"description": "arrival, seconds from now"})


class WhatIfArgs(RequestSchema):
    """Every field is optional: `{}` asks how the present queue plays out under the active policy."""

    policy = fields.String(load_default=None, validate=validate.Length(min=1, max=300),
                           metadata={"description": "a policy name (GET /policies); default: the active policy"})
    extra_nodes = fields.Integer(strict=True, load_default=0,
                                 validate=validate.Range(min=0, max=WHATIF_MAX_EXTRA_NODES),
                                 metadata={"description": "nodes like the last live node, added at t=0"})
    jobs = fields.List(fields.Nested(WhatIfJobArgs), load_default=list,
                       validate=validate.Length(max=WHATIF_MAX_HYPOTHETICAL))
    trace = fields.String(load_default=None, validate=validate.Length(min=1, max=4096), metadata={
        "description": "replay this trace (`synthetic:N,...`, or for admins a file by name in $CORRAL_HOME/traces) "
                       "instead of the live jobs, on the live cluster"})
    limit = fields.Integer(strict=True, load_default=None, validate=validate.Range(min=1, max=WHATIF_MAX_JOBS),
                           metadata={"description": "the trace's first N jobs"})
    seeds = fields.Integer(strict=True, load_default=5, validate=validate.Range(min=1, max=WHATIF_MAX_SEEDS),
                           metadata={"description": "simulations, each with its own draw of the true durations"})
    horizon_s = _positive(load_default=None, metadata={"description": "stop simulating this many seconds from now"})

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
    nodes = fields.Integer()
    gpus = fields.Integer()
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

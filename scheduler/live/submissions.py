"""A submission's rules and its writes to the store, apart from HTTP. `check` applies the rules that need no store
(who may submit a command job, what a job's own webhook may be); `submit`, in the caller's transaction, the rest
(can the job ever fit the cluster, its priority against the submitter's ceiling, its time limit, its dependencies)
and then stores the job, or an array's tasks, and its webhook. A refusal raises a `Refused` saying which field and
why; the caller's transaction then rolls back and nothing is stored. The API turns each kind of refusal into its
HTTP status (web/api/submissions.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from scheduler.core.admission import Fit, Refusal, admitted_spec
from scheduler.core.generic import GENERIC_MODEL
from scheduler.live import durations, job_accounts
from scheduler.live import webhooks as wh
from scheduler.live.generic_profiles import alike_usage
from scheduler.live.job_accounts import JobAccounts
from scheduler.live.nodes import brought_down_here, capacity_admission
from scheduler.live.priority_ceilings import AboveCeiling
from scheduler.live.store import JobType
from scheduler.live.store import queries as q
from scheduler.live.store.job_fields import RESUBMITTED_FIELDS
from scheduler.live.store.models import Job, JobArray, User, Webhook
from scheduler.live.store.submission_reads import submission_reads
from scheduler.live.webhook_dispatch import add_webhook, limit_refusal

DEFAULT_COMMAND_DURATION_S = 3600.0  # a command job's run-time estimate when the user gives none
PRIORITY_FIELDS = ("priority", "preemptible")  # what a priority class sets


class Refused(Exception):
    """A submission refused, with nothing stored: `str()` is the whole message."""


class InvalidField(Refused):
    """A field that cannot be taken as given (the API's 422): `field`, and `why` in the field's own words; the
    message names the field."""

    def __init__(self, field: str, why: str, message: str | None = None) -> None:
        super().__init__(message or f"{field}: {why}")
        self.field, self.why = field, why


class NotAllowed(Refused):
    """What the submitter may not ask for (the API's 403): a command job, a priority above their ceiling."""


class AtLimit(Refused):
    """A limit the submitter has reached (the API's 409): the webhooks one user may have."""


@dataclass(frozen=True)
class Rules:
    """The server's settings a submission is held to (`corral serve`'s flags)."""

    command_jobs: str  # who may submit command jobs (`--command-jobs`)
    accounts: JobAccounts  # the OS accounts command jobs run as
    webhook_allow: wh.AllowList  # where a job's own webhook may point (`--webhook-allow`)


@dataclass(frozen=True)
class Submission:
    """A checked submission: the job's columns, and what is not a job column."""

    job: dict[str, Any]
    array: Mapping[str, Any] | None  # {count, max_running}: that many tasks of the job, in a new array
    webhook: str | None  # the URL of the job's own webhook


@dataclass(frozen=True)
class Submitted:
    job: Job  # the new job (an array's task 0), or the one a known client token stored first
    array: JobArray | None  # the array, if the submission asked for one
    created: bool  # False: a retry of a known client token, which stored nothing
    webhook: Webhook | None  # the job's own webhook, created with it


def check(fields: Mapping[str, Any], who: User, rules: Rules) -> Submission:
    """A validated submission (the API's JobSubmitSchema) checked against what needs no store: a command job's
    submitter and default run-time estimate, and the job's webhook (not with an array; a URL this server may call).
    NotAllowed or InvalidField."""
    job = dict(fields)
    array = job.pop("array", None)
    webhook = job.pop("webhook", None)
    if job["kind"] == JobType.COMMAND:
        if job["duration_s"] is None:  # (`submit` puts what similar jobs ran in its place, where some have ended)
            job["duration_s"], job["duration_estimate"] = durations.estimated(None, DEFAULT_COMMAND_DURATION_S)
        why = job_accounts.refusal(rules.accounts, rules.command_jobs, who.name, who.id, who.admin)
        if why is not None:
            raise NotAllowed(f"kind: {why}")
    if webhook is not None:
        if array is not None:
            raise InvalidField("webhook", "not with array: add a webhook of yours instead",
                               "webhook: an array's tasks take no webhook of their own; a webhook of yours (POST "
                               "/webhooks) is called for every task")
        why = wh.refusal(webhook, rules.webhook_allow)
        if why is not None:
            raise InvalidField("webhook", why)
    return Submission(job, array, webhook)


def submit(s: Session, who: User, submission: Submission, *, max_pending: int | None = None,
           note: str | None = None) -> Submitted:
    """Store a checked submission as `who`'s, in `s`'s transaction: the capacity check, the priority class and
    ceiling, the time limit and the dependencies (InvalidField or NotAllowed, in that order), then the job or the
    array's tasks (`queries.PendingLimit` past `max_pending`) and the job's webhook (AtLimit when `who` has as many
    as they may). A retry with a known client token returns what the first stored, and stores nothing. `who` may be
    a detached stand-in: only its id, name and admin flag are read."""
    fields = dict(submission.job)
    # The capacity, the time limits and the team in one statement (the user's row locked as `q.submit` would lock it)
    reads = submission_reads(s, who.id, for_update=max_pending is not None)
    verdict = capacity_admission(s, admitted_spec(fields), (fields.get("environment") or {}).get("venv"),
                                 (reads.recorded_gpus, reads.largest_gpu_gb))
    if isinstance(verdict, Refusal):
        raise InvalidField(verdict.field, verdict.why)
    if verdict is not None:
        note = _brought_down(s, fields, verdict, note)
    if fields["model"] == GENERIC_MODEL:  # no model named: the measured runs of jobs alike refine its profile
        fields["profile_usage"] = alike_usage(s, who.id, fields["name"])
    if fields.get("duration_estimate") is not None:  # no duration given: the run times of similar jobs, if any
        fields["duration_s"], fields["duration_estimate"] = durations.estimate(
            s, who.name, fields["name"], fields["model"], fields["num_gpus"], DEFAULT_COMMAND_DURATION_S)
    try:
        q.resolve_priority(s, fields, who)  # the class, and the submitter's ceiling (admins are exempt)
    except LookupError as exc:
        raise InvalidField("priority_class", str(exc)) from None
    except AboveCeiling as exc:
        raise NotAllowed(str(exc)) from None
    try:
        q.apply_time_limit(s, fields, reads.time_limits)
    except ValueError as exc:
        raise InvalidField("time_limit_s", str(exc)) from None
    try:
        fields["depends_on"] = q.check_dependencies(s, who, fields.get("depends_on"))
    except LookupError as exc:
        raise InvalidField("depends_on", str(exc)) from None
    array = submission.array
    parent = None
    if array is None:
        job, created = q.submit(s, who, fields, max_pending=max_pending, note=note, team=reads.team)
    else:
        job, parent, created = q.submit_array(s, who, fields, array["count"], array["max_running"],
                                              max_pending=max_pending, note=note)
    hook = None
    if created and submission.webhook is not None:
        full = limit_refusal(s, who.id)  # (counted with this job: pending, its own would count)
        if full is not None:
            raise AtLimit(f"webhook: {full}")
        hook = add_webhook(s, who.id, submission.webhook, job_id=job.id)
    return Submitted(job, parent, created, hook)


def _brought_down(s: Session, fields: dict[str, Any], fit: Fit, note: str | None) -> str | None:
    """An elastic job whose submitted size the cluster can never hold, stored at the size admission brought it down to
    (`core.admission.Fit`): `num_gpus` that size and a given `duration_s` its work in that size's seconds (an
    estimated one is estimated at that size, after this). Returns the note its `submitted` event carries, saying so."""
    spec = brought_down_here(s, admitted_spec(fields), fit.size)
    if spec is None:  # the nodes cannot be modelled here: the controller decides, as for every job then
        return note
    fields["requested_gpus"], fields["num_gpus"] = int(fields["num_gpus"]), spec.num_gpus  # (elastic: whole GPUs)
    if fields.get("duration_estimate") is None:
        fields["duration_s"] = spec.duration_s
    return f"{note}; {fit.reason.text}" if note else fit.reason.text


def resubmitted(job: Job, changes: Mapping[str, Any]) -> dict[str, Any]:
    """What a resubmission of `job` submits before `changes` apply: its fields as submitted (never its client token,
    the original's idempotency key); of its priority, the class it named (whose figures may have changed since) or,
    without one, the figures it gave. A change of either kind replaces the other (a class and explicit figures
    together are refused)."""
    fields = {name: getattr(job, name) for name in RESUBMITTED_FIELDS}
    if job.duration_estimate is not None:
        fields.pop("duration_s")  # it gave none: estimated anew, from the jobs that ended since
    fields["retry_on"] = "any" if fields["retry_on"] is None else fields["retry_on"]
    if fields["priority_class"] is not None or "priority_class" in changes:
        for name in PRIORITY_FIELDS:
            fields.pop(name)
    if any(name in changes for name in PRIORITY_FIELDS):
        fields.pop("priority_class")
    return fields

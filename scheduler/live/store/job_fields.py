"""Every field of a job, once: where it is stored, whether a submission gives it, whether a resubmission copies it,
and whether the API shows it. A field added to a job goes here first; what is derived from the table (the columns a
job's JSON copies from its row, the fields a resubmission copies, the fields a submission takes) then follows, and
tests/test_job_fields.py fails, naming the field, while the ORM model (`models.Job`), the API's schemas
(`web.schemas.jobs`) or the job list's fast dump disagree with it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Flag, auto


class Use(Flag):
    STORED = auto()  # a column of the jobs table (`models.Job`)
    SUBMITTED = auto()  # a submission may give it (`JobSubmitSchema`)
    RESUBMITTED = auto()  # a resubmission copies it from the job it resubmits
    SHOWN = auto()  # in a job as the API answers it (`JobSchema`)
    LISTED = auto()  # in a job as the list shows it too (`JobSummarySchema`: all but the large fields)


SEEN = Use.SHOWN | Use.LISTED
ROW = Use.STORED | SEEN  # a column the API shows as it is stored
GIVEN = ROW | Use.SUBMITTED | Use.RESUBMITTED  # what a user gives and gets back
LARGE = GIVEN & ~Use.LISTED  # given, but too large for a list (up to web.limits' sizes each)


@dataclass(frozen=True)
class JobField:
    name: str
    use: Use


# In the order of a job's JSON.
FIELDS = (
    JobField("id", ROW),
    JobField("user_id", Use.STORED),  # shown as `user`, the name
    JobField("name", GIVEN),
    JobField("user", SEEN),
    JobField("team", ROW),  # the submitter's team at submission
    JobField("kind", GIVEN),
    JobField("model", GIVEN),
    JobField("num_gpus", GIVEN),  # an elastic job's: the size its duration is measured at
    JobField("min_gpus", GIVEN),  # elastic (`scheduler.core.elastic`): the sizes it may run at, and a resize's pause
    JobField("max_gpus", GIVEN),
    JobField("sizes", GIVEN),
    JobField("resize_pause_s", GIVEN),
    JobField("requested_gpus", ROW),  # brought down by admission: the size it asked for (None: stored as asked)
    JobField("duration_s", GIVEN),
    JobField("duration_estimate", ROW),  # not given: what duration_s was estimated from (`scheduler.live.durations`)
    JobField("measured_usage", ROW),  # what NVML measured of its runs' GPU use (`scheduler.live.node.usage`)
    JobField("profile_usage", ROW),  # no model named: the runs of jobs alike its profile is refined from
    JobField("entrypoint", LARGE),
    JobField("workdir", LARGE),
    JobField("env", LARGE),
    JobField("environment", LARGE),  # a command job's packages, venv, image, working dir (`scheduler.live.environments`)
    JobField("priority", GIVEN),
    JobField("preemptible", GIVEN),
    JobField("priority_class", GIVEN),
    JobField("time_limit_s", GIVEN),
    JobField("depends_on", GIVEN),
    JobField("constraints", GIVEN),  # where it may run (`scheduler.core.constraints`)
    JobField("array_id", ROW),
    JobField("array_index", ROW),
    JobField("array_max_running", ROW),
    JobField("array", Use.SUBMITTED | SEEN),  # given as {count, max_running}; shown as the array with its tasks
    JobField("slo_ms", GIVEN),
    JobField("client_token", GIVEN & ~Use.RESUBMITTED),  # the original's idempotency key, never copied
    JobField("restart_policy", GIVEN),
    JobField("max_restarts", GIVEN),
    JobField("max_retries", GIVEN),
    JobField("retry_on", GIVEN),
    JobField("retry_backoff_s", GIVEN),
    JobField("retries", ROW),
    JobField("not_before", ROW),
    JobField("state", ROW),
    JobField("cancel_requested", ROW),
    JobField("submitted_at", ROW),
    JobField("queued_since", ROW),
    JobField("started_at", ROW),
    JobField("first_started_at", ROW),
    JobField("finished_at", ROW),
    JobField("attempt", ROW),
    JobField("restarts", ROW),
    JobField("preemptions", ROW),
    JobField("attained_gpu_s", Use.STORED),  # the policies' service count
    JobField("work_done_s", Use.STORED),  # what `progress` is shown from
    JobField("progress", ROW),
    JobField("predicted_slowdown", ROW),
    JobField("predicted_slowdown_avg", ROW),
    JobField("observed_slowdown", ROW),
    JobField("run_s", ROW),
    JobField("pending_reason", ROW),
    JobField("pending_code", ROW),  # the pending reason as data (`scheduler.core.reasons`)
    JobField("pending_params", ROW),
    JobField("pending_until", ROW),
    JobField("held_at", ROW),
    JobField("held_by", ROW),
    JobField("changed_at", Use.STORED),  # the controller's cue to take a change in
    JobField("requeue_by", ROW),
    JobField("queue_position", SEEN),
    JobField("start_estimate_s", SEEN),  # the live replay's (`scheduler.live.estimates`): a time, or why none
    JobField("start_estimate_outlook", SEEN),
    JobField("start_estimate_code", SEEN),
    JobField("start_estimate_params", SEEN),
    JobField("start_estimate_text", SEEN),
    JobField("start_estimate_basis", SEEN),
    JobField("exit_code", ROW),
    JobField("error", ROW),
    JobField("end_code", ROW),  # why it ended, as data
    JobField("end_params", ROW),
    JobField("allocation", SEEN),
    JobField("placement_text", SEEN),
    JobField("webhook", Use.SUBMITTED | SEEN),  # given as a URL; shown, with its secret, only in the submission's answer
    JobField("terminal", SEEN),  # whether its state is a final one (the dashboard copies no rule)
    JobField("slo", SEEN),  # an inference job's SLO against its predicted latency (`scheduler.live.slo`)
)


def names(use: Use) -> tuple[str, ...]:
    """The fields with every flag of `use`, in the table's order."""
    return tuple(f.name for f in FIELDS if use in f.use)


STORED_FIELDS = names(Use.STORED)
SUBMITTED_FIELDS = names(Use.SUBMITTED)
RESUBMITTED_FIELDS = names(Use.RESUBMITTED)
SHOWN_FIELDS = names(Use.SHOWN)
LISTED_FIELDS = names(Use.LISTED)
# The columns a job's JSON copies from its row (the rest of what it shows is derived: the user's name, the queue's
# position, the allocation).
SHOWN_COLUMNS = names(Use.STORED | Use.SHOWN)
# What the list leaves out of a job: its large fields.
UNLISTED_FIELDS = tuple(n for n in SHOWN_FIELDS if n not in LISTED_FIELDS)
# The columns a job's JSON in a list copies: never the large ones (a deferred column read would be a query per job).
LISTED_COLUMNS = names(Use.STORED | Use.LISTED)


def disagreement(where: str, fields: Iterable[str], use: Use) -> list[str]:
    """How a list of a job's fields kept elsewhere (`where`: the ORM model, a schema, the CLI's options) differs from
    the table's fields with `use`: one line per field, naming it and where it is missing; empty when they agree."""
    theirs, ours = set(fields), set(names(use))
    label = "|".join(flag.name or "" for flag in Use if flag in use).lower()
    return ([f"{name}: in {where} but not in the table as {label}" for name in sorted(theirs - ours)]
            + [f"{name}: in the table as {label} but not in {where}" for name in sorted(ours - theirs)])

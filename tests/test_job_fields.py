"""One table of a job's fields (scheduler/live/store/job_fields.py): the ORM model, the API's job and submission
schemas, the job list's fast dump and the view's job body all agree with it, so a field added to one and not to the
table fails here, naming the field."""

from __future__ import annotations

from sqlalchemy import inspect

from scheduler.live.store.job_fields import (
    FIELDS,
    LISTED_FIELDS,
    RESUBMITTED_FIELDS,
    SHOWN_COLUMNS,
    SHOWN_FIELDS,
    STORED_FIELDS,
    SUBMITTED_FIELDS,
    Use,
    disagreement,
)
from scheduler.live.store.models import Job
from web.api.job_json import job_json
from web.fast_dump import dumper
from web.schemas.jobs import JobSchema, JobSubmitSchema, JobSummarySchema


def test_the_orm_model_has_a_column_for_every_stored_field() -> None:
    columns = [attr.key for attr in inspect(Job).column_attrs]
    assert not disagreement("models.Job's columns", columns, Use.STORED)


def test_a_job_as_the_api_shows_it_has_the_tables_fields_in_its_order() -> None:
    assert not disagreement("JobSchema", JobSchema().fields, Use.SHOWN)
    assert tuple(JobSchema().fields) == SHOWN_FIELDS  # the order a job's JSON has


def test_a_submission_takes_the_tables_submitted_fields() -> None:
    assert not disagreement("JobSubmitSchema", JobSubmitSchema().fields, Use.SUBMITTED)


def test_the_list_and_its_fast_dump_show_the_tables_listed_fields() -> None:
    assert not disagreement("JobSummarySchema", JobSummarySchema().fields, Use.LISTED)
    # The fast dump (web.fast_dump) plans its own fields from the schema: given every field, it keeps the listed ones.
    dumped = dumper(JobSummarySchema())({f.name: None for f in FIELDS})
    assert not disagreement("the job list's fast dump", dumped, Use.LISTED)


def test_a_jobs_body_copies_the_stored_columns_it_shows() -> None:
    body = job_json(Job(id=7, kind="emulated", state="pending", progress=0.0), "alice")
    assert not disagreement("job_json's body", [k for k in body if k in STORED_FIELDS], Use.STORED | Use.SHOWN)
    assert set(body) <= set(SHOWN_FIELDS), set(body) - set(SHOWN_FIELDS)
    # Only two shown fields come from elsewhere: an array's, in GET /jobs/ID and an array's submission, and a job's
    # own webhook, in the answer to the submission that gave it.
    assert set(SHOWN_FIELDS) - set(body) == {"array", "webhook"}


def test_a_resubmission_copies_only_what_was_submitted_and_stored() -> None:
    stored_and_submitted = set(STORED_FIELDS) & set(SUBMITTED_FIELDS)
    assert set(RESUBMITTED_FIELDS) == stored_and_submitted - {"client_token"}  # never the original's idempotency key
    assert set(SHOWN_COLUMNS) == set(STORED_FIELDS) & set(SHOWN_FIELDS)
    assert set(LISTED_FIELDS) == set(SHOWN_FIELDS) - {"entrypoint", "workdir", "env", "environment"}  # the large ones


def test_a_field_missing_from_the_table_is_named() -> None:
    """What the checks above rely on: a field one list has and the table lacks (or the reverse) is named, with
    where it is missing. The CLI's `corral submit` options can be checked the same way against SUBMITTED_FIELDS."""
    assert disagreement("JobSubmitSchema", [*SUBMITTED_FIELDS, "gpu_type"], Use.SUBMITTED) == [
        "gpu_type: in JobSubmitSchema but not in the table as submitted"]
    assert disagreement("models.Job's columns", STORED_FIELDS[1:], Use.STORED) == [
        f"{STORED_FIELDS[0]}: in the table as stored but not in models.Job's columns"]
    assert len({f.name for f in FIELDS}) == len(FIELDS)  # each field once


# `corral submit`'s own options, not a job's fields: where the job comes from, how it is printed, which service.
SUBMIT_COMMAND_OPTIONS = {"spec_file", "as_json", "url", "token"}
# Its options that give other fields than their own name: --gpus N or MIN-MAX, and an elastic job's --ref-gpus.
SUBMIT_OPTION_FIELDS = {"gpus": ("num_gpus", "min_gpus", "max_gpus"), "ref_gpus": ("num_gpus",),
                        **{part: ("environment",) for part in ("pip", "venv", "image", "working_dir")},
                        "constraint": ("constraints",), "nodelist": ("constraints",), "exclude": ("constraints",)}


def test_corral_submit_has_an_option_for_every_submitted_field() -> None:
    from scheduler.cli.submit_commands import submit

    options = {p.name for p in submit.params if p.name is not None} - SUBMIT_COMMAND_OPTIONS
    given = {field for option in options for field in SUBMIT_OPTION_FIELDS.get(option, (option,))}
    assert not disagreement("corral submit's options", given, Use.SUBMITTED)

"""Jobs: submit, resubmit, list and show. The API writes only submissions (scheduler.live.submissions, through
web/api/submissions.py) and the requests of web/api/job_controls.py; placements and state changes belong to the
controller, which `notify()` wakes. An array's routes are web/api/arrays.py's, a job's logs web/api/job_logs.py's."""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint, abort
from marshmallow import ValidationError

from scheduler.live.explain import last_placement
from scheduler.live.store import JobState
from scheduler.live.store import queries as q
from scheduler.live.store.models import JobArray
from scheduler.live.submissions import resubmitted
from web.api.context import store, write_session
from web.api.estimates import live_estimates
from web.api.job_json import array_json, dependencies_json, full_json, job_json, job_or_404
from web.api.submissions import submit_job
from web.auth import caller, protect
from web.fast_dump import dumper, json_response
from web.schemas.job_details import JobDetailSchema
from web.schemas.jobs import JobListArgs, JobListSchema, JobSchema, JobSubmitSchema, JobSummarySchema, ResubmitSchema

RECENT_DECISIONS = 10

blp = protect(Blueprint("jobs", __name__, description="Submit, list and inspect jobs"))
# What JobListSchema's dump gives, at a fraction of its cost (half of a 1,000-job page's time went there)
dump_summary = dumper(JobSummarySchema())
# What JobSchema's dump gives a submission's answer: marshmallow's dump was a tenth of a submission's time
dump_job = dumper(JobSchema())


@blp.route("/jobs", methods=["POST"])
@blp.arguments(JobSubmitSchema())  # an instance: webargs would build one per request from a class
@blp.response(201, JobSchema, description="the new job")
@blp.alt_response(200, schema=JobSchema, description="a retry with a known client_token: the first job")
def submit(fields: dict[str, Any]) -> Any:
    """Submit a job

    An emulated job (a model from the catalog and its isolated duration) or, where the server allows it, a command job
    (an entrypoint run on every worker). A `client_token` makes retries safe: the same token returns the first job
    (200) instead of creating another. A job that cannot fit the cluster as recorded is refused with 422 naming the
    field, and nothing is stored. A priority, `preemptible: false` or a priority class beyond the caller's ceiling
    (an admin's: `PATCH /users/NAME/limits`, `PATCH /teams/NAME`) is refused with 403 naming the limit.
    """
    body, status = submit_job(fields)
    return json_response(dump_job(body)), status


@blp.route("/jobs/<int:job_id>/resubmit", methods=["POST"])
@blp.arguments(ResubmitSchema())
@blp.response(201, JobSchema, description="the new job")
@blp.alt_response(200, schema=JobSchema, description="a retry with a known client_token: the first job")
def resubmit(changes: dict[str, Any], job_id: int) -> Any:
    """Resubmit a job

    A new job with the fields the job was submitted with (never its client token), changed by the body's fields:
    each checked as a submission's is, and the new job is the caller's, as if they had submitted it. The job's own
    owner or an admin may resubmit it, whatever its state.
    """
    with store().session() as s:
        fields = resubmitted(job_or_404(s, job_id), changes)
    try:
        merged = JobSubmitSchema().load({**fields, **changes})
    except ValidationError as exc:
        abort(422, message="; ".join(f"{f}: {' '.join(map(str, m))}" for f, m in exc.messages.items()),  # type: ignore[union-attr]
              errors={"json": exc.messages})
    body, status = submit_job(merged, f"resubmitted from job {job_id}")
    if status == 201:
        with write_session() as s:
            q.add_event(s, job_id, "resubmitted", f"resubmitted as job {body['id']} by {caller().name}")
    return body, status


@blp.route("/jobs", methods=["GET"])
@blp.arguments(JobListArgs(), location="query")
@blp.response(200, JobListSchema)
def list_jobs(args: dict[str, Any]) -> Any:
    """List jobs

    Newest first, filtered by state, team and (admins) by user; non-admins see only their own. Pending jobs carry
    their queue position and a start estimate.
    """
    who = caller()
    wanted = args.get("user")
    with store().session() as s:
        if not who.admin:
            if wanted is not None and wanted != who.name:
                abort(403, message=f"only admins may list another user's jobs ({wanted!r})")
            user_id: int | None = who.id
        elif wanted is not None:
            user = q.user_by_name(s, wanted)
            if user is None:
                return {"jobs": [], "total": 0}
            user_id = user.id
        else:
            user_id = None
        jobs, total = q.list_jobs(s, state=args.get("state"), user_id=user_id, team=args.get("team"),
                                  limit=args["limit"], offset=args["offset"])
        names = q.user_names(s, [j.user_id for j in jobs])
        allocs = q.current_allocations(s, [j for j in jobs if j.state == JobState.RUNNING])
        pending = any(j.state == JobState.PENDING for j in jobs)
        positions = q.queue_positions(s) if pending else None
        estimates = live_estimates() if pending else None
        rows = [job_json(j, names[j.user_id], allocs.get(j.id, []), positions, estimates, listed=True) for j in jobs]
    return json_response({"jobs": [dump_summary(r) for r in rows], "total": total})


@blp.route("/jobs/<int:job_id>", methods=["GET"])
@blp.response(200, JobDetailSchema)
def show(job_id: int) -> Any:
    """Show a job

    The job with its allocations, its events (submitted, placed, started, preempted, lost, requeued, finished) and the
    policy's recent decisions about it, each with the candidates it weighed.
    """
    with store().session() as s:
        job = job_or_404(s, job_id)
        body = full_json(s, job)
        body["last_placement"] = None if body["allocation"] else last_placement(s, job)
        body["events"] = [{"at": e.at, "kind": e.kind, "message": e.message, "data": e.data} for e in job.events]
        body["dependencies"] = dependencies_json(s, job)
        parent = s.get(JobArray, job.array_id) if job.array_id is not None else None
        body["array"] = array_json(s, parent, body["user"]) if parent is not None else None
        body["decisions"] = [
            {"at": d.at, "policy": d.policy, "action": d.action, "reason": d.reason, "gpus": d.gpus,
             "share": d.share, "predicted_slowdown": d.predicted_slowdown, "candidates": d.candidates}
            for d in q.recent_decisions(s, job_id, RECENT_DECISIONS)
        ]
        return body

"""Jobs: submit, list, show, cancel, read logs. The API writes only submissions and cancel requests; placements and
state changes belong to the controller, which `notify()` wakes."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from flask import current_app
from flask_smorest import Blueprint, abort
from marshmallow import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.core.dependencies import Condition, holds
from scheduler.core.reasons import Code
from scheduler.live import job_accounts
from scheduler.live.explain import Estimates, allocation_text, known_progress, last_placement, queue_start_estimates
from scheduler.live.job_files import log_name, log_path
from scheduler.live.job_states import outcome as job_outcome
from scheduler.live.nodes import capacity_refusal
from scheduler.live.priority_ceilings import AboveCeiling
from scheduler.live.slo import slo_status
from scheduler.live.store import JobState, JobType
from scheduler.live.store import queries as q
from scheduler.live.store.models import Allocation, Job, JobArray, User
from scheduler.live.webhook_dispatch import limit_refusal as webhook_limit_refusal
from web.api.context import notify, store, write_session
from web.api.logread import file_size, read_from, tail_lines
from web.api.webhooks import check_url as check_webhook_url
from web.api.webhooks import create as create_webhook
from web.auth import caller, protect, require_owner
from web.fair_use import submission as fair_use
from web.fast_dump import dumper, json_response
from web.limits import MAX_LOG_RESPONSE_BYTES, MAX_LOG_WAITERS, MIN_RANK_LOG_BYTES
from web.schemas import (
    DEFAULT_COMMAND_DURATION_S,
    ArraySchema,
    JobDetailSchema,
    JobListArgs,
    JobListSchema,
    JobSchema,
    JobSubmitSchema,
    JobSummarySchema,
    JobUpdateSchema,
    LogsArgs,
    LogsSchema,
    RequeueArgs,
    ResubmitSchema,
)

JOB_COLUMNS = (
    "id", "name", "team", "kind", "model", "num_gpus", "duration_s", "entrypoint", "workdir", "env", "priority",
    "preemptible", "priority_class", "time_limit_s", "depends_on", "array_id", "array_index", "array_max_running",
    "slo_ms",
    "client_token", "restart_policy", "max_restarts", "max_retries", "retry_on", "retry_backoff_s", "retries",
    "not_before", "state", "cancel_requested", "submitted_at", "queued_since",
    "started_at", "first_started_at", "finished_at", "attempt", "restarts", "preemptions", "progress",
    "predicted_slowdown", "predicted_slowdown_avg", "observed_slowdown", "run_s", "pending_reason", "pending_until",
    "held_at", "held_by", "requeue_by", "exit_code", "error", "pending_code", "pending_params", "end_code",
    "end_params",
)
RECENT_DECISIONS = 10
RANK_LOG = re.compile(r"rank-(\d+)\.log")


def job_json(job: Job, user: str, allocations: Sequence[Allocation] = (), positions: dict[int, int] | None = None,
             estimates: Estimates | None = None) -> dict[str, Any]:
    body = {c: getattr(job, c) for c in JOB_COLUMNS}
    body["progress"] = known_progress(job.kind, job.state, job.progress)
    body["user"] = user
    body["queue_position"] = (positions or {}).get(job.id)
    pending = job.state == JobState.PENDING and estimates is not None
    body["start_estimate_s"] = estimates.starts.get(job.id) if pending else None  # type: ignore[union-attr]
    body["start_estimate_basis"] = estimates.basis if pending else None  # type: ignore[union-attr]
    if pending and job.pending_code == Code.RESERVATION:
        body["start_estimate_basis"] += f"; the job {job.pending_reason}"
    body["allocation"] = [
        {"rank": a.rank, "node": a.node, "gpu": a.gpu, "local_gpu": a.local_gpu, "share": a.share} for a in allocations
    ]
    body["placement_text"] = allocation_text(allocations) if allocations else None
    body["terminal"] = JobState(job.state).terminal
    body["slo"] = slo_status(job.slo_ms, job.model, job.state, job.predicted_slowdown, job.predicted_slowdown_avg)
    return body


def _job_or_404(s: Session, job_id: int) -> Job:
    job = s.get(Job, job_id)
    if job is None:
        abort(404, message=f"job {job_id} not found")
    require_owner(job_id, job.user_id)
    return job


def _control(job_id: int, act: Callable[[Session, Job], Job]) -> dict[str, Any]:
    """Apply a job control (`act`, one of `queries`' hold, release, requeue or change) to a job the caller may see
    (404 or 403 otherwise) and answer with the job: 409 when the job's state refuses it, 403 for what only an admin
    may do. The controller is woken to act on it."""
    with write_session() as s:
        job = _job_or_404(s, job_id)
        try:
            job = act(s, job)
        except q.NotChangeable as exc:
            abort(409, message=str(exc))
        except PermissionError as exc:
            abort(403, message=str(exc))
        body = _full_json(s, job)
    notify()
    return body


def _array_control(array_id: int, act: Callable[[Session, Job], Job],
                   refused: type[Exception] | tuple[type[Exception], ...]) -> dict[str, Any]:
    """Apply a job control to each task of an array the caller may see (404 or 403 otherwise), leaving as they are
    the tasks it is `refused` for (a hold of a running task, a release of an admin's hold or of a task not held), and
    answer with the array."""
    with write_session() as s:
        array = _array_or_404(s, array_id)
        for task in q.array_tasks(s, array.id):
            try:  # noqa: SIM105 (suppress() is typed for one class or several, not a class-or-tuple variable)
                act(s, task)
            except refused:
                pass
        body = array_json(s, array, q.user_names(s, [array.user_id])[array.user_id])
    notify()
    return body


def array_json(s: Session, array: JobArray, user: str) -> dict[str, Any]:
    """An array with its tasks' states, by index."""
    tasks = q.array_tasks(s, array.id)
    states: dict[str, int] = {}
    for t in tasks:
        states[t.state] = states.get(t.state, 0) + 1
    return {"id": array.id, "name": array.name, "user": user, "count": array.count, "max_running": array.max_running,
            "submitted_at": array.submitted_at, "states": states, "held": sum(t.held_at is not None for t in tasks),
            "tasks": [{"id": t.id, "index": t.array_index, "state": t.state, "held_by": t.held_by} for t in tasks]}


def dependencies_json(s: Session, job: Job) -> list[dict[str, Any]]:
    """The jobs `job` depends on, each with its state and whether the condition holds (true), never will (false)
    or may yet (null); a job the caller may not see has no name or state."""
    deps = job.depends_on or []
    if not deps:
        return []
    who = caller()
    rows = {r.id: r for r in s.scalars(select(Job).where(Job.id.in_([int(d["job"]) for d in deps])))}
    out = []
    for d in deps:
        row = rows.get(int(d["job"]))
        visible = row is not None and (who.admin or row.user_id == who.id)
        state = row.state if visible and row is not None else None
        ended = job_outcome(state) if state is not None else None
        out.append({"job": int(d["job"]), "condition": d["condition"], "name": row.name if visible and row else None,
                    "state": state, "met": holds(Condition(d["condition"]), ended)})
    return out


def _array_or_404(s: Session, array_id: int) -> JobArray:
    array = s.get(JobArray, array_id)
    if array is None:
        abort(404, message=f"array {array_id} not found")
    who = caller()
    if array.user_id != who.id and not who.admin:
        abort(403, message=f"array {array_id} belongs to another user")
    return array


def _full_json(s: Session, job: Job) -> dict[str, Any]:
    allocs = q.current_allocations(s, [job]).get(job.id, [])
    pending = job.state == JobState.PENDING
    return job_json(job, q.user_names(s, [job.user_id])[job.user_id], allocs,
                    q.queue_positions(s) if pending else None, queue_start_estimates(s) if pending else None)


# What a resubmission copies from the job: what was submitted, less its client token (the original's idempotency key).
RESUBMITTED = ("name", "kind", "model", "num_gpus", "duration_s", "entrypoint", "workdir", "env", "priority",
               "preemptible", "priority_class", "time_limit_s", "depends_on", "slo_ms", "restart_policy",
               "max_restarts", "max_retries", "retry_on", "retry_backoff_s")
PRIORITY_FIELDS = ("priority", "preemptible")


def _resubmitted(job: Job, changes: dict[str, Any]) -> dict[str, Any]:
    """What a resubmission of `job` submits before `changes` apply: its fields as submitted; of its priority, the
    class it named (whose figures may have changed since) or, without one, the figures it gave. A change of either
    kind replaces the other (a class and explicit figures together are refused)."""
    fields = {name: getattr(job, name) for name in RESUBMITTED}
    fields["retry_on"] = "any" if fields["retry_on"] is None else fields["retry_on"]
    if fields["priority_class"] is not None or "priority_class" in changes:
        for name in PRIORITY_FIELDS:
            fields.pop(name)
    if any(name in changes for name in PRIORITY_FIELDS):
        fields.pop("priority_class")
    return fields


def _submit(fields: dict[str, Any], note: str | None = None) -> tuple[dict[str, Any], int]:
    """Store a validated submission as the caller's: the command-job rule, fair use, the capacity check, the priority
    ceiling and the insert, in one transaction (an abort rolls back and stores nothing). (body, 201), or (the first job, 200) for a
    known client token."""
    if fields["kind"] == JobType.COMMAND and fields["duration_s"] is None:
        fields["duration_s"] = DEFAULT_COMMAND_DURATION_S
    who = caller()
    if fields["kind"] == JobType.COMMAND:
        why = job_accounts.refusal(current_app.config["CORRAL_JOB_ACCOUNTS"], current_app.config[
            "CORRAL_COMMAND_JOBS"], who.name, who.id, who.admin)
        if why is not None:
            abort(403, message=f"kind: {why}")
    webhook = fields.pop("webhook", None)  # not a job column: a row of its own (web/api/webhooks.py)
    array = fields.pop("array", None)  # not a job column either: the tasks' parent (job_arrays)
    if webhook is not None:
        if array is not None:
            abort(422, message="webhook: an array's tasks take no webhook of their own; a webhook of yours (POST "
                               "/webhooks) is called for every task", errors={"json": {"webhook": [
                                   "not with array: add a webhook of yours instead"]}})
        check_webhook_url("webhook", webhook)  # a 422 naming the field, before anything is stored
    # A detached stand-in for the caller's row (submit reads only its id and name): loading the row would cost a
    # query per submission, which the token cache exists to avoid.
    user = User(id=who.id, name=who.name, admin=who.admin)
    with fair_use(who, fields.get("client_token")) as gate, write_session() as s:  # 429 past fair use
        problem = capacity_refusal(s, fields["model"], fields["num_gpus"])
        if problem is not None:
            field, message = problem
            abort(422, message=f"{field}: {message}", errors={"json": {field: [message]}})
        try:
            q.resolve_priority(s, fields, user)  # the class, and the caller's ceiling (admins are exempt)
        except LookupError as exc:
            abort(422, message=f"priority_class: {exc}", errors={"json": {"priority_class": [str(exc)]}})
        except AboveCeiling as exc:
            abort(403, message=str(exc))
        try:
            q.apply_time_limit(s, fields)
        except ValueError as exc:
            abort(422, message=f"time_limit_s: {exc}", errors={"json": {"time_limit_s": [str(exc)]}})
        try:
            fields["depends_on"] = q.check_dependencies(s, user, fields.get("depends_on"))
        except LookupError as exc:
            abort(422, message=f"depends_on: {exc}", errors={"json": {"depends_on": [str(exc)]}})
        if array is None:
            job, created = q.submit(s, user, fields, max_pending=gate.max_pending, note=note)
            body = job_json(job, user.name) if created else _full_json(s, job)
        else:
            job, parent, created = q.submit_array(s, user, fields, array["count"], array["max_running"],
                                                  max_pending=gate.max_pending, note=note)
            body = job_json(job, user.name) if created else _full_json(s, job)
            body["array"] = array_json(s, parent, user.name)
        if created and webhook is not None:
            full = webhook_limit_refusal(s, who.id)  # (counted with this job: pending, its own would count)
            if full is not None:
                abort(409, message=f"webhook: {full}")
            hook = create_webhook(s, who.id, webhook, job_id=job.id)
            body["webhook"] = {"id": hook.id, "url": hook.url, "secret": hook.secret}
        gate.created = created
    if created:
        notify()
    return body, 201 if created else 200


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("jobs", __name__, url_prefix=prefix, description="Submit, list, inspect and cancel jobs"))

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
        return _submit(fields)

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
            fields = _resubmitted(_job_or_404(s, job_id), changes)
        try:
            merged = JobSubmitSchema().load({**fields, **changes})
        except ValidationError as exc:
            abort(422, message="; ".join(f"{f}: {' '.join(map(str, m))}" for f, m in exc.messages.items()),  # type: ignore[union-attr]
                  errors={"json": exc.messages})
        body, status = _submit(merged, f"resubmitted from job {job_id}")
        if status == 201:
            with write_session() as s:
                q.add_event(s, job_id, "resubmitted", f"resubmitted as job {body['id']} by {caller().name}")
        return body, status

    dump_summary = dumper(JobSummarySchema())

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
            estimates = queue_start_estimates(s) if pending else None
            rows = [job_json(j, names[j.user_id], allocs.get(j.id, []), positions, estimates) for j in jobs]
        # What JobListSchema's dump gives, at a fraction of its cost (half of a 1,000-job page's time went there)
        return json_response({"jobs": [dump_summary(r) for r in rows], "total": total})

    @blp.route("/jobs/<int:job_id>", methods=["GET"])
    @blp.response(200, JobDetailSchema)
    def show(job_id: int) -> Any:
        """Show a job

        The job with its allocations, its events (submitted, placed, started, preempted, lost, requeued, finished) and the
        policy's recent decisions about it, each with the candidates it weighed.
        """
        with store().session() as s:
            job = _job_or_404(s, job_id)
            body = _full_json(s, job)
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

    @blp.route("/arrays/<int:array_id>", methods=["GET"])
    @blp.response(200, ArraySchema)
    def show_array(array_id: int) -> Any:
        """Show a job array

        Its size, how many tasks may run at once, and each task's state. Its owner's and admins' to see.
        """
        with store().session() as s:
            array = _array_or_404(s, array_id)
            return array_json(s, array, q.user_names(s, [array.user_id])[array.user_id])

    @blp.route("/arrays/<int:array_id>/cancel", methods=["POST"])
    @blp.response(200, ArraySchema, description="the array after the cancel")
    def cancel_array(array_id: int) -> Any:
        """Cancel a job array

        Every task not finished: pending ones at once, running ones flagged (the controller stops their workers).
        """
        with write_session() as s:
            array = _array_or_404(s, array_id)
            live = [t for t in q.array_tasks(s, array.id) if not JobState(t.state).terminal]
            for task in live:
                q.cancel(s, task)
            body = array_json(s, array, q.user_names(s, [array.user_id])[array.user_id])
        if live:
            notify()
        return body

    @blp.route("/arrays/<int:array_id>/hold", methods=["POST"])
    @blp.response(200, ArraySchema, description="the array after the hold")
    def hold_array(array_id: int) -> Any:
        """Hold a job array's pending tasks

        Each pending task not held yet is held (as `POST /jobs/ID/hold`); running and finished tasks are left as they
        are.
        """
        by = caller().name
        return _array_control(array_id, lambda s, task: q.hold(s, task, by), q.NotChangeable)

    @blp.route("/arrays/<int:array_id>/release", methods=["POST"])
    @blp.response(200, ArraySchema, description="the array after the release")
    def release_array(array_id: int) -> Any:
        """Release a job array's held tasks

        Each held task the caller may release (as `POST /jobs/ID/release`: a user their own holds, an admin any) is
        released; tasks an admin holds stay held for a user, as `held` and each task's `held_by` show.
        """
        who = caller()
        return _array_control(array_id, lambda s, task: q.release(s, task, who.name, admin=who.admin),
                              (PermissionError, q.NotChangeable))

    @blp.route("/jobs/<int:job_id>/cancel", methods=["POST"])
    @blp.response(200, JobSchema, description="the job after the cancel: cancelled if it was pending, else flagged")
    def cancel(job_id: int) -> Any:
        """Cancel a job

        A pending job is cancelled at once; a running one is flagged, and the controller stops its workers on its next
        pass. Cancelling a finished job changes nothing.
        """
        with write_session() as s:
            job = _job_or_404(s, job_id)
            was_live = not JobState(job.state).terminal
            job = q.cancel(s, job)
            body = _full_json(s, job)
        if was_live:
            notify()
        return body

    @blp.route("/jobs/<int:job_id>", methods=["PATCH"])
    @blp.arguments(JobUpdateSchema())
    @blp.response(200, JobSchema, description="the job, changed")
    def update_job(args: dict[str, Any], job_id: int) -> Any:
        """Change a pending or running job's time limit or priority

        Slurm's `scontrol update TimeLimit= Priority=`. Its owner may only lower either (403 to raise one), and a new
        priority must be within the owner's ceiling (403 naming it); an admin may set any, a time limit beyond the cluster's maximum too. The controller takes the change in at its next
        pass: a run that has lasted longer than its new limit is stopped and ends timed_out; a new priority orders the
        queue and decides preemptions from then on. A job that ended: 409.
        """
        who = caller()
        return _control(job_id, lambda s, job: q.change_job(s, job, args, by=who.name, admin=who.admin))

    @blp.route("/jobs/<int:job_id>/requeue", methods=["POST"])
    @blp.arguments(RequeueArgs())
    @blp.response(200, JobSchema, description="the job, its requeue asked for")
    def requeue(args: dict[str, Any], job_id: int) -> Any:
        """Checkpoint a running job and put it back in the queue

        Slurm's `scontrol requeue` (with `hold`, `requeuehold`). At the controller's next pass its workers get SIGTERM
        and the stop's grace period to save a checkpoint, and it goes back to the queue in its old place, spending no
        restart (event `checkpointed`), held if asked. Its owner or an admin may ask; a job not running: 409.
        """
        return _control(job_id, lambda s, job: q.request_requeue(s, job, caller().name, hold=args["hold"]))

    @blp.route("/jobs/<int:job_id>/hold", methods=["POST"])
    @blp.response(200, JobSchema, description="the job, held")
    def hold(job_id: int) -> Any:
        """Hold a pending job

        The job stays pending, in its place in the queue, but does not start until released (Slurm's `scontrol
        hold`). Its owner or an admin may hold it; holding a held job changes nothing. A job that is not pending
        (running, or ended) cannot be held: 409.
        """
        return _control(job_id, lambda s, job: q.hold(s, job, caller().name))

    @blp.route("/jobs/<int:job_id>/release", methods=["POST"])
    @blp.response(200, JobSchema, description="the job, released: it may start")
    def release(job_id: int) -> Any:
        """Release a held job

        It may start again, in its place in the queue. A user releases the holds they placed; an admin's hold only an
        admin releases (Slurm's user and admin holds): 403. A job that is not held is a 409 naming its state.
        """
        who = caller()
        return _control(job_id, lambda s, job: q.release(s, job, who.name, admin=who.admin))

    @blp.route("/jobs/<int:job_id>/logs", methods=["GET"])
    @blp.arguments(LogsArgs(), location="query")
    @blp.response(200, LogsSchema)
    def logs(args: dict[str, Any], job_id: int) -> Any:
        """Read or follow a job's worker logs

        The last `tail` lines of each rank's log for an attempt (default: the current one). One answer reads at most
        1 MiB of logs, shared by the ranks (each at least 4 KiB): a log whose tail is longer is cut at the start,
        behind a marker line. Each log's `end` is where it ended when read.

        To follow one rank's log, pass `rank` and `offset` (the `end` of the previous answer): the answer holds what
        the log gained since (up to 1 MiB, whole lines), and with `wait_s` it waits up to that long for something new
        while the attempt runs (a few followers at a time; beyond them it answers at once). `state` and
        `current_attempt` say when to stop, or to move on to the job's next run.
        """
        with store().session() as s:
            job = _job_or_404(s, job_id)
            attempt = args.get("attempt", job.attempt)
            ranks = set(q.attempt_ranks(s, job_id, attempt))
        if "offset" in args:
            return _follow(job_id, attempt, args["rank"], args["offset"], args["wait_s"])
        # Ranks with a file but no allocation row (a run whose rows were cleaned up) still have logs worth showing.
        folder = log_path(store().id, job_id, attempt, 0).parent
        if folder.is_dir():
            ranks |= {int(m.group(1)) for p in folder.iterdir() if (m := RANK_LOG.fullmatch(p.name))}
        if "rank" in args:
            ranks = {args["rank"]}
        budget = max(MIN_RANK_LOG_BYTES, MAX_LOG_RESPONSE_BYTES // max(1, len(ranks)))  # bytes read per rank
        out = []
        for r in sorted(ranks):
            path = log_path(store().id, job_id, attempt, r)
            end = file_size(path)  # before the tail is read: a follower from here misses nothing
            out.append({"rank": r, "path": log_name(job_id, attempt, r), "text": tail_lines(path, args["tail"], budget),
                        "end": end})
        return {"job_id": job_id, "attempt": attempt, "state": job.state, "current_attempt": job.attempt, "logs": out}

    return blp


# Followers waiting for news: each holds a request thread, so only a few may (`MAX_LOG_WAITERS`).
_WAITERS = threading.BoundedSemaphore(MAX_LOG_WAITERS)
FOLLOW_POLL_S = 0.2


def _follow(job_id: int, attempt: int, rank: int, offset: int, wait_s: float) -> dict[str, Any]:
    """One rank's log from `offset`, waiting up to `wait_s` for news while the attempt is the job's live run."""
    path = log_path(store().id, job_id, attempt, rank)
    # The state is read before the text, always: a state that says the run is over then comes with every line the
    # run wrote (its workers write before it ends), so a follower that moves on loses none of its last words.
    state, current = _job_now(job_id)
    text, end = read_from(path, offset, MAX_LOG_RESPONSE_BYTES)
    if not text and wait_s > 0 and current == attempt and not JobState(state).terminal and _WAITERS.acquire(False):
        try:
            deadline = time.monotonic() + wait_s
            checked = time.monotonic()
            while not text and time.monotonic() < deadline:
                time.sleep(FOLLOW_POLL_S)
                if time.monotonic() - checked >= 1.0:  # the run may have ended: no news will come
                    checked = time.monotonic()
                    state, current = _job_now(job_id)
                text, end = read_from(path, offset, MAX_LOG_RESPONSE_BYTES)
                if not text and (current != attempt or JobState(state).terminal):
                    break
        finally:
            _WAITERS.release()
    return {"job_id": job_id, "attempt": attempt, "state": state, "current_attempt": current,
            "logs": [{"rank": rank, "path": log_name(job_id, attempt, rank), "text": text, "end": end}]}


def _job_now(job_id: int) -> tuple[str, int]:
    with store().session() as s:
        job = s.get(Job, job_id)
        assert job is not None  # checked by the caller; jobs are never deleted
        return job.state, job.attempt

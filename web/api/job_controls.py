"""Job controls: cancel, change, requeue, hold and release one job (Slurm's `scancel`, `scontrol update`, `requeue`,
`hold`, `release`). Each writes a request or a state `queries` checks; the controller, woken, acts on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask_smorest import Blueprint, abort
from sqlalchemy.orm import Session

from scheduler.live.store import JobState
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job
from web.api.context import notify, write_session
from web.api.job_json import full_json, job_or_404
from web.auth import caller, protect
from web.schemas.jobs import JobSchema, JobUpdateSchema, RequeueArgs

blp = protect(Blueprint("job_controls", __name__, description="Cancel, change, requeue, hold and release a job"))


def _control(job_id: int, act: Callable[[Session, Job], Job]) -> dict[str, Any]:
    """Apply a job control (`act`, one of `queries`' hold, release, requeue or change) to a job the caller may see
    (404 or 403 otherwise) and answer with the job: 409 when the job's state refuses it, 403 for what only an admin
    may do. The controller is woken to act on it."""
    with write_session() as s:
        job = job_or_404(s, job_id)
        try:
            job = act(s, job)
        except q.NotChangeable as exc:
            abort(409, message=str(exc))
        except PermissionError as exc:
            abort(403, message=str(exc))
        body = full_json(s, job)
    notify()
    return body


@blp.route("/jobs/<int:job_id>/cancel", methods=["POST"])
@blp.response(200, JobSchema, description="the job after the cancel: cancelled if it was pending, else flagged")
def cancel(job_id: int) -> Any:
    """Cancel a job

    A pending job is cancelled at once; a running one is flagged, and the controller stops its workers on its next
    pass. Cancelling a finished job changes nothing.
    """
    with write_session() as s:
        job = job_or_404(s, job_id)
        was_live = not JobState(job.state).terminal
        job = q.cancel(s, job)
        body = full_json(s, job)
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

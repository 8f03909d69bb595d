"""A job and an array as the API answers them, and finding one the caller may see (404 or 403 otherwise): shared by
the job, job-control and array routes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flask_smorest import abort
from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.core.dependencies import Condition, holds
from scheduler.core.reasons import Code
from scheduler.live.estimates import NO_FIELDS, LiveEstimates
from scheduler.live.explain import allocation_text, known_progress
from scheduler.live.job_states import outcome as job_outcome
from scheduler.live.slo import slo_status
from scheduler.live.store import JobState
from scheduler.live.store import queries as q
from scheduler.live.store.job_fields import LISTED_COLUMNS, SHOWN_COLUMNS
from scheduler.live.store.models import Allocation, Job, JobArray
from web.api.estimates import live_estimates
from web.auth import caller, require_owner


def job_json(job: Job, user: str, allocations: Sequence[Allocation] = (), positions: dict[int, int] | None = None,
             estimates: LiveEstimates | None = None, *, listed: bool = False) -> dict[str, Any]:
    """A job as the API shows it; `listed`: as a list shows it, without its large fields."""
    body = {c: getattr(job, c) for c in (LISTED_COLUMNS if listed else SHOWN_COLUMNS)}
    body["progress"] = known_progress(job.kind, job.state, job.progress)
    body["user"] = user
    body["queue_position"] = (positions or {}).get(job.id)
    pending = job.state == JobState.PENDING and estimates is not None and job.held_at is None  # held: none
    body.update(estimates.fields(job.id) if estimates is not None and pending else NO_FIELDS)
    if pending and job.pending_code == Code.RESERVATION:
        body["start_estimate_basis"] += f"; the job {job.pending_reason}"
    body["allocation"] = [
        {"rank": a.rank, "node": a.node, "gpu": a.gpu, "local_gpu": a.local_gpu, "share": a.share} for a in allocations
    ]
    body["placement_text"] = allocation_text(allocations) if allocations else None
    body["terminal"] = JobState(job.state).terminal
    body["slo"] = slo_status(job.slo_ms, job.model, job.state, job.predicted_slowdown, job.predicted_slowdown_avg)
    return body


def full_json(s: Session, job: Job) -> dict[str, Any]:
    """A job with its allocations and, pending, its queue position and start estimate."""
    allocs = q.current_allocations(s, [job]).get(job.id, [])
    pending = job.state == JobState.PENDING
    return job_json(job, q.user_names(s, [job.user_id])[job.user_id], allocs,
                    q.queue_positions(s) if pending else None, live_estimates() if pending else None)


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


def job_or_404(s: Session, job_id: int) -> Job:
    job = s.get(Job, job_id)
    if job is None:
        abort(404, message=f"job {job_id} not found")
    require_owner(job_id, job.user_id)
    return job


def array_or_404(s: Session, array_id: int) -> JobArray:
    array = s.get(JobArray, array_id)
    if array is None:
        abort(404, message=f"array {array_id} not found")
    who = caller()
    if array.user_id != who.id and not who.admin:
        abort(403, message=f"array {array_id} belongs to another user")
    return array

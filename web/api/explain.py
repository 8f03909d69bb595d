"""`GET /jobs/{id}/explain`: why a job is pending or why it was put where it is. HTTP only: the explanation is
`scheduler.live.job_explanation.explain_job`'s, from what the store recorded."""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint, abort

from scheduler.live.job_explanation import explain_job
from scheduler.live.job_states import JobState
from scheduler.live.store.models import Job
from web.api.context import store
from web.api.estimates import live_estimates
from web.auth import protect, require_owner
from web.schemas.explain import ExplainSchema


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("explain", __name__, url_prefix=prefix, description="Why a job waits or sits where"))

    @blp.route("/jobs/<int:job_id>/explain")
    @blp.response(200, ExplainSchema)
    def explain(job_id: int) -> Any:
        """Explain a job's placement or wait

        For a pending job, its queue position, the reason it waits and a start estimate; for a placed one, its GPUs, its
        neighbours and what the policy's choice traded against the other candidates.
        """
        with store().session() as s:
            job = s.get(Job, job_id)
            if job is None:
                abort(404, message=f"job {job_id} not found")
            require_owner(job_id, job.user_id)
            return explain_job(s, job, live_estimates() if job.state == JobState.PENDING else None)

    return blp

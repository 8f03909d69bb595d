"""`GET /jobs/{id}/explain`: why a job is pending or why it was put where it is, from what the store recorded.

Every placement is stored with the candidates the policy weighed and the contention model's predictions, so the
answer quotes the decision itself rather than guessing after the fact. The start estimate for a pending job is the
rough one of `scheduler.live.explain.start_estimate` (aggregate capacity, submission order): shown as "about".
"""

from __future__ import annotations

import time
from typing import Any

from flask_smorest import Blueprint, abort
from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.live.explain import Demand, start_estimates
from scheduler.live.store import JobState
from scheduler.live.store import queries as q
from scheduler.live.store.models import Decision, Gpu, Job
from web.api.context import store
from web.auth import protect, require_owner
from web.schemas import ExplainSchema


def _remaining_s(job: Job) -> float:
    """Wall seconds a running job has left: isolated work left, stretched by its predicted slowdown."""
    return max(0.0, job.duration_s * (1.0 - job.progress)) * (job.predicted_slowdown or 1.0)


def queue_start_estimates(s: Session) -> dict[int, float | None]:
    """Every pending job's start estimate (seconds from now, None if it can never start), in one pass over the queue
    in submission order."""
    total = float(len(s.scalars(select(Gpu.id)).all()))
    running = s.scalars(select(Job).where(Job.state == JobState.RUNNING)).all()
    queue = s.scalars(select(Job).where(Job.state == JobState.PENDING).order_by(Job.submitted_at, Job.id)).all()
    starts = start_estimates(total, [Demand(j.num_gpus, _remaining_s(j)) for j in running],
                             [Demand(j.num_gpus, j.duration_s) for j in queue])
    return {j.id: start for j, start in zip(queue, starts, strict=True)}


def _decision_json(d: Decision) -> dict[str, Any]:
    candidates = [dict(c, chosen=(c["gpus"] == d.gpus and abs(c["share"] - (d.share or 0.0)) < 1e-9))
                  for c in d.candidates]
    for c in candidates:  # decisions stored before these were recorded
        c.setdefault("neighbour_job_ids", None)
        c.setdefault("computed_at", d.at)
    return {"policy": d.policy, "at": d.at, "action": d.action, "reason": d.reason, "gpus": d.gpus,
            "share": d.share, "predicted_slowdown": d.predicted_slowdown, "latency_ms": d.latency_ms,
            "candidates": candidates}


def _beside(ids: list[int] | None) -> str:
    if ids is None:
        return ""
    return f" beside job{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}" if ids else " alone"


def trade_words(chosen: dict[str, Any], cands: list[dict[str, Any]]) -> str:
    """What the choice traded, in the same words for every policy, heuristic or learned: which figure it was best
    at, or what it gave up against the candidate that was (e.g. "it chose slowdown 1.81x, adding 0.54 to its
    neighbours, over 1.00x, adding 0.00, on GPUs [5]")."""
    own = min(cands, key=lambda c: (c["slowdown"], c["others_added"]))
    harm = min(cands, key=lambda c: (c["others_added"], c["slowdown"]))
    best_own = chosen["slowdown"] <= own["slowdown"] + 1e-9
    least_harm = chosen["others_added"] <= harm["others_added"] + 1e-9
    if best_own and least_harm:
        return "the lowest slowdown for the job itself and the least added to its neighbours"

    def fig(c: dict[str, Any]) -> str:
        return f"{c['slowdown']:.2f}x, adding {c['others_added']:.2f} to its neighbours"

    if best_own:
        return (f"the lowest slowdown for the job itself ({fig(chosen)}) rather than the least harm to its "
                f"neighbours ({fig(harm)} on GPUs {harm['gpus']})")
    if least_harm:
        return (f"the least slowdown added to its neighbours ({fig(chosen)}) rather than the lowest for the job "
                f"itself ({fig(own)} on GPUs {own['gpus']})")
    return f"it chose slowdown {fig(chosen)}, over {fig(own)} on GPUs {own['gpus']}"


def _summary(job: Job, decision: dict[str, Any] | None, position: int | None, estimate: float | None,
             placement: dict[str, Any] | None) -> str:
    if job.state == JobState.PENDING:
        where = f"#{position} in the queue" if position else "queued"
        when = f"; about {estimate / 60:.0f} min until enough GPUs free up" if estimate else ""
        return f"{where}: {job.pending_reason or 'waiting for the controller'}{when}"
    if decision is None:
        return f"{job.state}; no placement was recorded"
    cands = decision["candidates"]
    chosen = next((c for c in cands if c["chosen"]), None)
    at = time.strftime("%H:%M:%S", time.localtime(decision["at"]))
    then = chosen["slowdown"] if chosen is not None else decision["predicted_slowdown"]
    text = (f"placed by {decision['policy']} at {at} on GPUs {decision['gpus']} x {decision['share']:g}, predicted "
            f"slowdown {then:.2f}" + (_beside(chosen.get("neighbour_job_ids")) if chosen is not None else ""))
    if chosen is not None and len(cands) > 1:
        text += f"; of {len(cands)} candidates it had " + trade_words(chosen, cands)
    if decision["reason"]:
        text += f" ({decision['reason']})"
    now = placement["predicted_slowdown"] if placement is not None else None
    if now is not None and abs(now - then) > 5e-3:  # the neighbours changed since: say so, with both figures
        text += f"; now {now:.2f}{_beside(placement['neighbour_job_ids'])}"
    return text


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
            placed = s.scalars(select(Decision).where(Decision.job_id == job_id, Decision.action == "place")
                               .order_by(Decision.id.desc()).limit(1)).first()
            decision = _decision_json(placed) if placed is not None else None
            position = q.queue_positions(s).get(job_id) if job.state == JobState.PENDING else None
            estimate = queue_start_estimates(s).get(job.id) if job.state == JobState.PENDING else None
            placement = None
            neighbours: list[dict[str, Any]] = []
            allocs = q.current_allocations(s, [job]).get(job_id, [])
            if allocs:
                placement = {"gpus": [a.gpu for a in allocs], "nodes": sorted({a.node for a in allocs}),
                             "share": allocs[0].share, "predicted_slowdown": job.predicted_slowdown}
                mine = {a.gpu for a in allocs}
                my_nodes = set(placement["nodes"])
                shared: dict[int, dict[str, Any]] = {}
                near: set[int] = set()
                for alloc, other, _ in q.open_allocations_with_jobs(s):
                    if other.id == job_id:
                        continue
                    if alloc.node in my_nodes:
                        near.add(other.id)
                    if alloc.gpu in mine:
                        entry = shared.setdefault(other.id, {"job_id": other.id, "name": other.name, "gpus": [],
                                                             "predicted_slowdown": other.predicted_slowdown})
                        entry["gpus"].append(alloc.gpu)
                neighbours = list(shared.values())
                placement["neighbour_job_ids"] = sorted(near)
            return {
                "job_id": job.id, "name": job.name, "state": job.state, "queue_position": position,
                "pending_reason": job.pending_reason if job.state == JobState.PENDING else None,
                "start_estimate_s": estimate, "placement": placement, "observed_slowdown": job.observed_slowdown,
                "predicted_slowdown_avg": job.predicted_slowdown_avg, "decision": decision,
                "neighbours": neighbours, "summary": _summary(job, decision, position, estimate, placement),
            }

    return blp

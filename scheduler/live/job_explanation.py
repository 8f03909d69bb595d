"""A job's explanation, as `GET /jobs/{id}/explain` returns it: why it is pending (its place in the queue, its reason, a
start estimate and how that was made) or why it sits where it does (its GPUs, its neighbours and what the policy's
choice traded against the other candidates), assembled from what the store recorded, with the words that summarise it.

Every placement is stored with the candidates the policy weighed and the contention model's predictions, so the
answer quotes the decision itself rather than guessing after the fact. The start estimate is
`scheduler.live.explain.queue_start_estimates`, computed from the store as it is; GPUs are named as every view names
them (`scheduler.live.words`).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.live.explain import gpu_names as read_gpu_names
from scheduler.live.explain import known_progress, last_placement, queue_start_estimates, where_text
from scheduler.live.store import JobState
from scheduler.live.store import queries as q
from scheduler.live.store.models import Decision, Job
from scheduler.live.words import duration_text

GpuNames = dict[int, tuple[str, int]]


def _decision_json(d: Decision, names: GpuNames) -> dict[str, Any]:
    candidates = [dict(c, chosen=(c["gpus"] == d.gpus and abs(c["share"] - (d.share or 0.0)) < 1e-9),
                       where=where_text(c["gpus"], names, c["share"]))
                  for c in d.candidates]
    for c in candidates:  # decisions stored before these were recorded
        c.setdefault("neighbour_job_ids", None)
        c.setdefault("computed_at", d.at)
    return {"policy": d.policy, "at": d.at, "action": d.action, "reason": d.reason, "gpus": d.gpus,
            "where": where_text(d.gpus, names, d.share), "share": d.share, "predicted_slowdown": d.predicted_slowdown,
            "latency_ms": d.latency_ms, "candidates": candidates}


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
                f"neighbours ({fig(harm)} on {harm.get('where') or harm['gpus']})")
    if least_harm:
        return (f"the least slowdown added to its neighbours ({fig(chosen)}) rather than the lowest for the job "
                f"itself ({fig(own)} on {own.get('where') or own['gpus']})")
    return f"it chose slowdown {fig(chosen)}, over {fig(own)} on {own.get('where') or own['gpus']}"


def start_words(estimate: float | None, hold_s: float | None = None) -> str:
    """A pending job's start estimate as the summary says it; `hold_s`: the seconds left of the policy's hold on it
    (its `pending_until`), where the policy holds it for compact room (the estimate counts it as starting then)."""
    if estimate is None:
        return "no start estimate: nothing running is predicted to free enough usable GPUs"
    if estimate <= 0:
        return "it fits the free usable GPUs now"
    if hold_s is not None and hold_s > 0:
        if estimate <= hold_s + 1.0:  # (the two read the clock a moment apart)
            return f"about {duration_text(estimate)} until its hold ends, when it starts at the latest"
        return f"about {duration_text(estimate)} until enough GPUs free up after its hold ends"
    return f"about {duration_text(estimate)} until enough GPUs free up"


def _last_words(last: dict[str, Any] | None) -> str:
    if last is None:
        return ""
    ended = last["ended_by"]
    why = f", until it was {ended['kind']} ({ended['reason']})" if ended else ""
    return f"; it last ran on {last['where']} (attempt {last['attempt']}){why}"


def _summary(job: Job, decision: dict[str, Any] | None, position: int | None, estimate: float | None,
             placement: dict[str, Any] | None, last: dict[str, Any] | None = None) -> str:
    if job.state == JobState.PENDING:
        where = f"#{position} in the queue" if position else "queued"
        hold_s = job.pending_until - time.time() if job.pending_until is not None else None
        return (f"{where}: {job.pending_reason or 'waiting for the controller'}; {start_words(estimate, hold_s)}"
                + _last_words(last))
    if decision is None:
        return f"{job.state}; no placement was recorded" + _last_words(last)
    cands = decision["candidates"]
    chosen = next((c for c in cands if c["chosen"]), None)
    at = time.strftime("%H:%M:%S", time.localtime(decision["at"]))
    then = chosen["slowdown"] if chosen is not None else decision["predicted_slowdown"]
    text = (f"placed by {decision['policy']} at {at} on {decision['where']}, predicted "
            f"slowdown {then:.2f}" + (_beside(chosen.get("neighbour_job_ids")) if chosen is not None else ""))
    if chosen is not None and len(cands) > 1:
        text += f"; of {len(cands)} candidates it had " + trade_words(chosen, cands)
    if decision["reason"]:
        text += f" ({decision['reason']})"
    now = placement["predicted_slowdown"] if placement is not None else None
    if now is not None and abs(now - then) > 5e-3:  # the neighbours changed since: say so, with both figures
        assert placement is not None  # `now` is read from it
        text += f"; now {now:.2f}{_beside(placement['neighbour_job_ids'])}"
    if placement is None:
        text += _last_words(last)
    return text


def explain_job(s: Session, job: Job) -> dict[str, Any]:
    """The explanation of `job` (already checked to be the caller's to see), read in session `s`."""
    job_id = job.id
    names = read_gpu_names(s)
    placed = s.scalars(select(Decision).where(Decision.job_id == job_id, Decision.action == "place")
                       .order_by(Decision.id.desc()).limit(1)).first()
    decision = _decision_json(placed, names) if placed is not None else None
    pending = job.state == JobState.PENDING
    position = q.queue_positions(s).get(job_id) if pending else None
    estimates = queue_start_estimates(s) if pending else None
    estimate = estimates.starts.get(job.id) if estimates is not None else None
    placement: dict[str, Any] | None = None
    last = None
    neighbours: list[dict[str, Any]] = []
    allocs = q.current_allocations(s, [job]).get(job_id, [])
    if allocs:
        placement = {"gpus": [a.gpu for a in allocs], "nodes": sorted({a.node for a in allocs}),
                     "share": allocs[0].share, "predicted_slowdown": job.predicted_slowdown,
                     "where": where_text([a.gpu for a in allocs], names, allocs[0].share)}
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
        for n in neighbours:
            n["where"] = where_text(n["gpus"], names)
        placement["neighbour_job_ids"] = sorted(near)
    else:
        last = last_placement(s, job)
    return {
        "job_id": job.id, "name": job.name, "state": job.state, "queue_position": position,
        "pending_reason": job.pending_reason if pending else None,
        "pending_until": job.pending_until if pending else None,
        "start_estimate_s": estimate,
        "start_estimate_basis": estimates.basis if estimates is not None else None,
        "placement": placement, "last_placement": last, "observed_slowdown": job.observed_slowdown,
        "predicted_slowdown_avg": job.predicted_slowdown_avg, "decision": decision,
        "progress": known_progress(job.kind, job.state, job.progress),
        "neighbours": neighbours, "summary": _summary(job, decision, position, estimate, placement, last),
    }

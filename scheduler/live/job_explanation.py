"""A job's explanation, as `GET /jobs/{id}/explain` returns it: why it is pending (its place in the queue, its reason, a
start estimate and how that was made) or why it sits where it does (its GPUs, its neighbours and what the policy's
choice traded against the other candidates), assembled from what the store recorded, with the words that summarise it.

Every placement is stored with the candidates the policy weighed and the contention model's predictions, so the
answer quotes the decision itself rather than guessing after the fact. The start estimate is the live replay's
(`scheduler.live.estimates`: the store's present replayed under the active policy), given by the caller; GPUs are
named as every view names them (`scheduler.live.words`).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.core.estimates import Estimate, Outlook
from scheduler.core.generic import GENERIC_MODEL
from scheduler.live.estimates import NO_FIELDS, LiveEstimates
from scheduler.live.explain import gpu_names as read_gpu_names
from scheduler.live.explain import known_progress, last_placement, where_text
from scheduler.live.generic_profiles import job_profile
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


def start_words(est: Estimate | None, hold_s: float | None = None, newer: bool = False) -> str:
    """A pending job's start estimate as the summary says it; `hold_s`: the seconds left of the policy's hold on it
    (its `pending_until`), where the policy holds it for compact room. A job the rules never start, or one past the
    replay's bounds, says so in the estimate's own words (`Estimate.text`)."""
    if est is None and newer:  # queued since the replay the estimates come from
        return "no start estimate yet (the queue is replayed again within seconds)"
    if est is None:
        return "no start estimate (a held job, or one waiting on a held job, has none)"
    if est.outlook is not Outlook.STARTS or est.start_s is None:
        return est.text
    estimate = est.start_s
    if estimate <= 0:
        return "it starts now, as the active policy decides"
    if hold_s is not None and hold_s > 0 and estimate <= hold_s + 1.0:  # (the two read the clock a moment apart)
        return f"about {duration_text(estimate)} until its hold ends, when it starts at the latest"
    return f"it starts in about {duration_text(estimate)}, as the active policy decides"


def _last_words(last: dict[str, Any] | None) -> str:
    if last is None:
        return ""
    ended = last["ended_by"]
    why = f", until it was {ended['kind']} ({ended['reason']})" if ended else ""
    return f"; it last ran on {last['where']} (attempt {last['attempt']}){why}"


def _summary(job: Job, decision: dict[str, Any] | None, position: int | None, estimate: Estimate | None,
             placement: dict[str, Any] | None, last: dict[str, Any] | None = None, newer: bool = False) -> str:
    if job.state == JobState.PENDING:
        where = f"#{position} in the queue" if position else "queued"
        hold_s = job.pending_until - time.time() if job.pending_until is not None else None
        return (f"{where}: {job.pending_reason or 'waiting for the controller'}; "
                f"{start_words(estimate, hold_s, newer)}" + _last_words(last))
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


def profile_json(job: Job) -> dict[str, Any] | None:
    """A job that named no model: the profile the contention figures use, and what it was made from (None for a
    job that named one: its profile is the catalog's, GET /models)."""
    if job.model != GENERIC_MODEL:
        return None
    prof = job_profile(job.model, job.measured_usage, job.profile_usage)
    measured = prof.name != GENERIC_MODEL
    words = ("no model named: a generic profile, refined from measured runs" if measured else
             "no model named: a generic profile (a typical job of the catalog; no run of it or of jobs alike measured)")
    return {"name": prof.name, "refined": measured, "source": prof.source, "words": words}


def explain_job(s: Session, job: Job, estimates: LiveEstimates | None = None) -> dict[str, Any]:
    """The explanation of `job` (already checked to be the caller's to see), read in session `s`; `estimates`: the
    store's start estimates (`scheduler.live.estimates`), for a pending job."""
    job_id = job.id
    names = read_gpu_names(s)
    placed = s.scalars(select(Decision).where(Decision.job_id == job_id, Decision.action == "place")
                       .order_by(Decision.id.desc()).limit(1)).first()
    decision = _decision_json(placed, names) if placed is not None else None
    pending = job.state == JobState.PENDING
    position = q.queue_positions(s).get(job_id) if pending else None
    estimate = estimates.get(job.id) if estimates is not None and pending else None
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
    profile = profile_json(job)
    newer = estimates is not None and pending and job.queued_since > estimates.at
    summary = _summary(job, decision, position, estimate, placement, last, newer)
    if profile is not None:
        summary += f" ({profile['words']})"
    return {
        "job_id": job.id, "name": job.name, "state": job.state, "queue_position": position,
        "pending_reason": job.pending_reason if pending else None,
        "pending_until": job.pending_until if pending else None,
        **(estimates.fields(job.id) if estimates is not None and pending else NO_FIELDS),
        "placement": placement, "last_placement": last, "observed_slowdown": job.observed_slowdown,
        "predicted_slowdown_avg": job.predicted_slowdown_avg, "decision": decision,
        "progress": known_progress(job.kind, job.state, job.progress),
        "neighbours": neighbours, "profile": profile, "summary": summary,
    }

"""A job's logs: the last lines of each rank's log for an attempt, or one rank's log followed from an offset, waiting
a little for news while the run lasts (reading files: web/api/logread.py)."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from flask_smorest import Blueprint, abort

from scheduler.live.job_files import log_name, log_path
from scheduler.live.store import JobState
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job
from web.api.context import store
from web.api.job_json import job_or_404
from web.api.logread import file_size, read_from, tail_lines
from web.auth import protect
from web.limits import MAX_LOG_RESPONSE_BYTES, MAX_LOG_WAITERS, MIN_RANK_LOG_BYTES
from web.schemas.logs import LogsArgs, LogsSchema

RANK_LOG = re.compile(r"rank-(\d+)\.log")

blp = protect(Blueprint("job_logs", __name__, description="Read and follow a job's worker logs"))


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
        job = job_or_404(s, job_id)
        attempt = args.get("attempt", job.attempt)
        ranks = set(q.attempt_ranks(s, job_id, attempt))
        workers = max(1, int(job.num_gpus))
    if "rank" in args and args["rank"] not in ranks and args["rank"] >= workers:
        # A rank the job never has: an empty answer would read as a log not written yet, and a follower would wait
        # on it for good.
        why = f"job {job_id} has {workers} worker{'s' if workers > 1 else ''} (ranks 0-{workers - 1})" \
            if workers > 1 else f"job {job_id} has one worker (rank 0)"
        abort(422, message=f"rank: {why}", errors={"query": {"rank": [why]}})
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

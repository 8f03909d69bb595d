"""`POST /whatif`: how would the present queue play out under another policy, with more nodes or extra jobs? It
snapshots the store and runs the simulator for several seeds (`scheduler.live.whatif`); it writes nothing.

A what-if can take seconds of CPU, so it never runs on an unbounded number of request threads: each app has a small
worker pool (`CORRAL_WHATIF_WORKERS`, default 2) and a request that finds every worker busy is answered 429 with
Retry-After at once, rather than queued behind the others. The request thread waits for its own answer (the API
stays synchronous for the client). Non-admins are also bounded in size, by what their request brings: at most
`CORRAL_WHATIF_BUDGET` of its own jobs (hypothetical, or a trace's) x seeds (422 naming the field to lower). The live
queue never makes a request fail: a non-admin's what-if simulates at most `CORRAL_WHATIF_QUEUE` (default 100) pending
jobs, the first in queue order, and its answer's `bounds` says how many were left out. Admins are bounded by neither.
Each user has a number of what-ifs a minute (`whatif_per_min`, web.fair_use)."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from flask import Flask, current_app
from flask_smorest import Blueprint, abort

from policies import make_policy
from policies.trained import AgentLoadError, check_api_name
from scheduler.core.paths import traces_dir
from scheduler.live.whatif import (
    DEFAULT_BUDGET,
    DEFAULT_POLICY,
    DEFAULT_QUEUE_CAP,
    WhatIfError,
    WhatIfRequest,
    what_if,
)
from web.api.context import store
from web.auth import caller, protect
from web.fair_use import check_whatif
from web.schemas.whatif import WhatIfArgs, WhatIfSchema

POOL_KEY = "corral.whatif_pool"
DEFAULT_WORKERS = 2
RETRY_AFTER_S = 5  # a typical what-if takes a few seconds; the client may try again then
_pool_lock = threading.Lock()


class WhatIfPool:
    """At most `workers` what-ifs at a time; `try_submit` returns None at once when all of them are busy. The
    semaphore counts running *and* handed-over work, so the executor's own queue never holds anything."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"CORRAL_WHATIF_WORKERS: must be >= 1, got {workers}")
        self._slots = threading.BoundedSemaphore(workers)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="corral-whatif")

    def try_submit(self, fn: Callable[[], dict[str, Any]]) -> Future[dict[str, Any]] | None:
        if not self._slots.acquire(blocking=False):
            return None
        future = self._executor.submit(fn)
        future.add_done_callback(lambda _: self._slots.release())
        return future


def setting(app: Flask, name: str, default: int) -> int:
    """An integer from the app's config, else the environment (`corral serve` passes no config), else `default`."""
    raw = app.config.get(name, os.environ.get(name, default))
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be an integer, got {raw!r}") from None


def pool(app: Flask) -> WhatIfPool:
    """The app's pool, made on first use (so tests can set CORRAL_WHATIF_WORKERS in the app's config)."""
    with _pool_lock:
        if POOL_KEY not in app.extensions:
            app.extensions[POOL_KEY] = WhatIfPool(setting(app, "CORRAL_WHATIF_WORKERS", DEFAULT_WORKERS))
        p: WhatIfPool = app.extensions[POOL_KEY]
        return p


TRACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*")


def trace_file(name: str) -> Path:
    """The trace `name` in CORRAL_HOME/traces, or 422: the API takes traces by name, never a path to open."""
    folder = traces_dir()
    if not TRACE_NAME.fullmatch(name) or len(name) > 200:
        message = (f"{name!r}: give a trace file's name in {folder} (an admin puts traces there), or synthetic:N,...; "
                   "the API never opens a path")
        abort(422, message=f"trace: {message}", errors={"json": {"trace": [message]}})
    return folder / name


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("whatif", __name__, url_prefix=prefix,
                            description="Simulate the present queue under another policy, more nodes or extra jobs"))

    @blp.route("/whatif", methods=["POST"])
    @blp.arguments(WhatIfArgs())
    @blp.response(200, WhatIfSchema, description="distributions over the seeds of JCT, queueing and utilisation")
    @blp.alt_response(429, description="every what-if worker is busy, or the caller ran their what-ifs a minute "
                                       "(`whatif_per_min`): try again after Retry-After seconds")
    def whatif(args: dict[str, Any]) -> Any:
        """Simulate a what-if

        Replays the present queue and running jobs in the simulator under another policy, with extra nodes or extra jobs,
        over several seeds, and returns the distributions next to the same runs under the active policy. Non-admins have
        a budget of the request's own jobs x seeds, simulate at most a bounded number of the pending jobs (`bounds`
        says how many were left out) and a number of what-ifs a minute; when every worker is busy, or past that
        number, 429 with Retry-After.
        """
        check_whatif(caller())  # 429 past the user's what-ifs a minute (admins are exempt)
        trace = args.get("trace")
        admin = caller().admin
        if trace is not None and not trace.startswith("synthetic:"):
            if not admin:
                abort(403, message="trace: only admins may replay a trace file; others may use synthetic:N,...")
            args = dict(args, trace=str(trace_file(trace)))
        if args.get("policy") is not None:
            try:
                check_api_name(args["policy"].strip(), "policy")
            except AgentLoadError as exc:
                abort(422, message=str(exc), errors={"json": {"policy": [str(exc)]}})
        try:
            req = WhatIfRequest.parse(args)
        except WhatIfError as exc:
            _refuse(exc)
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        budget = None if admin else setting(app, "CORRAL_WHATIF_BUDGET", DEFAULT_BUDGET)
        queue_cap = None if admin else setting(app, "CORRAL_WHATIF_QUEUE", DEFAULT_QUEUE_CAP)
        st = store()  # the worker has no app context: hand it the store itself
        reservations = app.config.get("CORRAL_RESERVATIONS")  # the controller's rule (`corral serve`), if any
        mps_one_user = app.config["CORRAL_JOB_ACCOUNTS"].per_user  # the controller's MPS rule (its job accounts)

        def run() -> dict[str, Any]:
            return what_if(st, req, make_policy, default_policy=DEFAULT_POLICY, budget=budget,
                           queue_cap=queue_cap, reservations=reservations, mps_one_user=mps_one_user)

        future = pool(app).try_submit(run)
        if future is None:
            abort(429, message=f"every what-if worker is busy; try again in {RETRY_AFTER_S} s",
                  headers={"Retry-After": str(RETRY_AFTER_S)})
        try:
            return future.result()
        except WhatIfError as exc:
            _refuse(exc)

    return blp


def _refuse(exc: WhatIfError) -> None:
    """409 when the live state is at fault (no nodes), else 422 naming the request's field."""
    if exc.field is None:
        abort(409, message=str(exc))
    abort(422, message=str(exc), errors={"json": {exc.field: [exc.reason]}})

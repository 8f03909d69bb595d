"""The cluster's time limits: the one a job gets when it gives none, and the most a job may give (admins write,
everyone reads). The controller stops a run that reaches its job's limit (`timed_out`)."""

from __future__ import annotations

from typing import Any

from flask import request
from flask_smorest import Blueprint, abort

from scheduler.live.store import queries as q
from web.api.context import store, write_session
from web.auth import caller, protect, require_admin
from web.schemas.time_limits import TimeLimitsArgs, TimeLimitsSchema


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("time_limits", __name__, url_prefix=prefix,
                            description="Time limits: the cluster's default and maximum (admins change them)"))

    @blp.before_request
    def admins_write() -> None:
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            require_admin()

    @blp.route("/time-limits", methods=["GET"])
    @blp.response(200, TimeLimitsSchema)
    def show() -> Any:
        """Show the cluster's time limits

        `default_s`: what a job that gives no `time_limit_s` gets; `max_s`: the most a job may give (null: none).
        """
        with store().session() as s:
            default, most = q.time_limit_settings(s)
        return {"default_s": default, "max_s": most}

    @blp.route("/time-limits", methods=["PATCH"])
    @blp.arguments(TimeLimitsArgs())
    @blp.response(200, TimeLimitsSchema, description="the time limits after the change")
    def change(args: dict[str, Any]) -> Any:
        """Change the cluster's time limits (admins)

        Only the fields given change; null clears one. The default may not exceed the maximum. Jobs already
        submitted keep the limit they got.
        """
        with write_session() as s:
            try:
                default, most = q.set_time_limits(s, args, by=caller().name)
            except ValueError as exc:
                field, _, why = str(exc).partition(": ")
                abort(422, message=str(exc), errors={"json": {field: [why]}})
        return {"default_s": default, "max_s": most}

    return blp

"""Priority classes: named priorities admins define and jobs name (everyone reads them). The rules they feed are
scheduler.core.priorities'; a job copies its class's figures when it is submitted, so changing the classes changes
only later jobs."""

from __future__ import annotations

from typing import Any

from flask import request
from flask_smorest import Blueprint, abort

from scheduler.live.store import queries as q
from web.api.context import store, write_session
from web.auth import caller, protect, require_admin
from web.schemas.priority_classes import PriorityClassCreateArgs, PriorityClassListSchema, PriorityClassSchema


def class_json(row: Any) -> dict[str, Any]:
    return {"name": row.name, "value": row.value, "preemptible": row.preemptible, "description": row.description,
            "created_at": row.created_at, "created_by": row.created_by}


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("priority_classes", __name__, url_prefix=prefix,
                            description="Priority classes: named priorities and preemptibility (admins define them)"))

    @blp.before_request
    def admins_write() -> None:
        # Before the body is parsed: a non-admin learns nothing from validation errors about a change they cannot make.
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            require_admin()

    @blp.route("/priority-classes", methods=["GET"])
    @blp.response(200, PriorityClassListSchema)
    def list_classes() -> Any:
        """List the priority classes

        Highest value first. A job that names one (`priority_class`) gets its value and preemptibility.
        """
        with store().session() as s:
            return {"priority_classes": [class_json(c) for c in q.priority_classes(s)]}

    @blp.route("/priority-classes", methods=["POST"])
    @blp.arguments(PriorityClassCreateArgs())
    @blp.response(201, PriorityClassSchema, description="the new class")
    def create_class(args: dict[str, Any]) -> Any:
        """Create a priority class (admins)

        A taken name is a 409. `preemptible: false` makes its jobs never preempted; with teams, they then run only
        within their team's quota (GPUs they borrowed could not be reclaimed).
        """
        with write_session() as s:
            try:
                row = q.create_priority_class(s, args["name"], args["value"], args["preemptible"],
                                              args["description"], caller().name)
            except q.TeamConflict as exc:
                abort(409, message=str(exc))
            return class_json(row), 201

    @blp.route("/priority-classes/<name>", methods=["DELETE"])
    @blp.response(200, PriorityClassSchema, description="the class deleted")
    def delete_class(name: str) -> Any:
        """Delete a priority class (admins)

        Jobs that named it keep the figures they copied; new jobs can no longer name it.
        """
        with write_session() as s:
            row = q.priority_class(s, name) if q.USER_NAME.fullmatch(name) else None
            if row is None:
                abort(404, message=f"priority class {name!r} not found")
            body = class_json(row)
            s.delete(row)
        return body

    return blp

"""Fair-use limits, for admins: the cluster-wide defaults (`/limits`) and each user's overrides
(`/users/<name>/limits`). What they limit and how is web.fair_use; the values live in the store."""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint, abort
from sqlalchemy.orm import Session

from scheduler.live.priority_ceilings import CEILING_NAMES, Ceiling
from scheduler.live.store import queries as q
from scheduler.live.store.models import User
from web.api.context import store, write_session
from web.auth import caller, protect, require_admin
from web.fair_use import state as fair_use
from web.schemas.fair_use import LimitsArgs, LimitsSchema, UserLimitsArgs


def limits_json(defaults: dict[str, Any], overrides: dict[str, Any], user: User | None,
                ceiling: Ceiling | None = None) -> dict[str, Any]:
    """The limits that apply, with where each comes from; for a user, their priority ceiling too."""
    effective = q.effective_limits(defaults, overrides)
    body = {"user": user.name if user else None, "exempt": bool(user and user.admin),
            **{n: getattr(effective, n) for n in q.LIMIT_NAMES},
            "sources": {n: "user" if n in overrides else "cluster" if n in defaults else "built-in"
                        for n in q.LIMIT_NAMES}}
    if ceiling is not None:
        body |= {n: getattr(ceiling, n) for n in CEILING_NAMES}
        body["priority_classes"] = list(ceiling.priority_classes)
        body["sources"] |= dict(ceiling.sources)
    return body


def user_limits_json(s: Session, user: User) -> dict[str, Any]:
    return limits_json(*q.limit_settings(s, user.id), user, q.priority_ceiling(s, user.id))


def check_ceiling(s: Session, args: dict[str, Any]) -> None:
    """A 422 naming `priority_classes` for a class that does not exist (a typo would grant nothing); duplicates
    dropped, in place."""
    names = args.get("priority_classes")
    if names is None:
        return
    args["priority_classes"] = list(dict.fromkeys(names))
    unknown = q.unknown_priority_classes(s, names)
    if unknown:
        known = ", ".join(c.name for c in q.priority_classes(s)) or "none are defined"
        why = f"no priority class {', '.join(map(repr, unknown))} (known: {known})"
        abort(422, message=f"priority_classes: {why}", errors={"json": {"priority_classes": [why]}})


def _user_or_404(s: Any, name: str) -> User:
    user = q.user_by_name(s, name) if q.USER_NAME.fullmatch(name) else None
    if user is None:
        abort(404, message=f"user {name!r} not found")
    return user


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("limits", __name__, url_prefix=prefix,
                            description="Fair use: per-user limits on pending jobs, submissions and what-ifs (admins)"))

    @blp.before_request
    def admins_only() -> None:
        require_admin()  # before the body is parsed, as for users and teams: 403 whatever a non-admin sends

    @blp.route("/limits", methods=["GET"])
    @blp.response(200, LimitsSchema)
    def show_defaults() -> Any:
        """Show the cluster-wide limits (admins)

        What applies to every user without an override of their own, and where each value comes from.
        """
        with store().session() as s:
            defaults, _ = q.limit_settings(s)
            return limits_json(defaults, {}, None)

    @blp.route("/limits", methods=["PATCH"])
    @blp.arguments(LimitsArgs())
    @blp.response(200, LimitsSchema, description="the cluster-wide limits after the change")
    def set_defaults(args: dict[str, Any]) -> Any:
        """Change the cluster-wide limits (admins)

        Only the limits given change; null puts one back to its built-in value. Users with an override keep it.
        """
        with write_session() as s:
            q.set_limits(s, args, by=caller().name)
            defaults, _ = q.limit_settings(s)
            body = limits_json(defaults, {}, None)
        fair_use().forget_limits()
        return body

    @blp.route("/users/<name>/limits", methods=["GET"])
    @blp.response(200, LimitsSchema)
    def show_user(name: str) -> Any:
        """Show a user's limits (admins)

        The limits that apply to the user, and for each whether it is their own override, the cluster's default or
        the built-in value; and their priority ceiling (the highest priority their jobs may give, whether they may be
        non-preemptible, the classes they may name), each setting theirs, their team's or built in. Admins are
        exempt (`exempt`).
        """
        with store().session() as s:
            return user_limits_json(s, _user_or_404(s, name))

    @blp.route("/users/<name>/limits", methods=["PATCH"])
    @blp.arguments(UserLimitsArgs())
    @blp.response(200, LimitsSchema, description="the user's limits after the change")
    def set_user(args: dict[str, Any], name: str) -> Any:
        """Override a user's limits or priority ceiling (admins)

        Only the settings given change; null removes the override, so the cluster's default (for a ceiling's
        setting: the user's team's, then the built-in one) applies again. A class that does not exist: 422.
        """
        with write_session() as s:
            user = _user_or_404(s, name)
            check_ceiling(s, args)
            q.set_limits(s, args, user_id=user.id, by=caller().name)
            body = user_limits_json(s, user)
        fair_use().forget_limits()
        return body

    return blp

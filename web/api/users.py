"""Users, for admins: who exists, in which team, and moving a user to another team. Users are created with their
first token (`corral token create --user NAME [--team TEAM]`), which opens the store directly."""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint, abort

from scheduler.live.store import queries as q
from scheduler.live.store.models import User
from web.api.context import notify, page, store, write_session
from web.auth import protect, require_admin
from web.schemas.base import PageArgs
from web.schemas.users import UserListSchema, UserPatchArgs, UserSchema


def user_json(user: User, active_jobs: int) -> dict[str, Any]:
    return {"name": user.name, "team": user.team, "admin": user.admin, "created_at": user.created_at,
            "active_jobs": active_jobs}


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("users", __name__, url_prefix=prefix, description="Users and their teams (admins only)"))

    @blp.before_request
    def admins_only() -> None:
        # Before the body is parsed, as for teams: a non-admin gets 403 whatever they send. (A before_request hook
        # that returned require_admin()'s principal would become the response.)
        require_admin()

    @blp.route("/users", methods=["GET"])
    @blp.arguments(PageArgs(), location="query")
    @blp.response(200, UserListSchema)
    def list_users(args: dict[str, Any]) -> Any:
        """List users (admins)

        Each user's team, admin flag, creation time and jobs pending or running.
        """
        with store().session() as s:
            users, total = page(q.list_users(s), args)
            return {"users": [user_json(u, n) for u, n in users], "total": total}

    @blp.route("/users/<name>", methods=["PATCH"])
    @blp.arguments(UserPatchArgs())
    @blp.response(200, UserSchema, description="the user in their new team")
    def update_user(args: dict[str, Any], name: str) -> Any:
        """Move a user to another team (admins)

        Their next jobs run under the new team's quota. Refused (409) while they have jobs pending or running: those
        run under the team they were submitted to. An unknown team is a 422 naming `team`.
        """
        team = args["team"]
        with write_session() as s:
            user = q.user_by_name(s, name) if q.USER_NAME.fullmatch(name) else None  # as teams.team_or_404
            if user is None:
                abort(404, message=f"user {name!r} not found")
            if user.team == team:  # nothing moves, so nothing to refuse
                return user_json(user, q.active_jobs_of_user(s, user.id))
            try:
                q.move_user(s, user, team)
            except q.UnknownTeam as exc:
                why = f"{exc}; the teams are {', '.join(t.name for t in q.list_teams(s))}"
                abort(422, message=f"team: {why}", errors={"json": {"team": [why]}})
            except q.TeamConflict as exc:
                abort(409, message=str(exc))
            s.flush()
            body = user_json(user, 0)  # move_user succeeds only for a user with no active jobs
        notify()
        return body

    return blp

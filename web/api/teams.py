"""Teams: their quotas and borrowing limits (admins write, everyone reads), and what each uses now. The rules they
feed are scheduler.core.tenancy's (docs/teams.md); every write wakes the controller, which re-reads the teams."""

from __future__ import annotations

import time
from typing import Any, NoReturn

from flask import request
from flask_smorest import Blueprint, abort
from sqlalchemy.orm import Session

from scheduler.core.model import DEFAULT_TEAM
from scheduler.core.tenancy import EPS
from scheduler.live.store import queries as q
from scheduler.live.store.models import Team
from web.api.context import notify, page, store, write_session
from web.api.fair_use import check_ceiling
from web.auth import protect, require_admin
from web.schemas.base import PageArgs
from web.schemas.teams import TeamCreateArgs, TeamDeletedSchema, TeamListSchema, TeamPatchArgs, TeamSchema

USAGE_KEYS = ("in_use_gpus", "borrowed_gpus", "lent_gpus")
COUNT_KEYS = ("pending_jobs", "running_jobs")


def team_json(team: Team, usage: dict[str, float] | None) -> dict[str, Any]:
    u = usage or {}
    return {"name": team.name, "quota_gpus": team.quota_gpus, "borrow_limit_gpus": team.borrow_limit_gpus,
            "created_at": team.created_at, "updated_at": team.updated_at,
            **{k: u.get(k, 0.0) for k in USAGE_KEYS}, **{k: int(u.get(k, 0)) for k in COUNT_KEYS},
            **ceiling_json(team)}


def ceiling_json(team: Team) -> dict[str, Any]:
    """The ceiling `team`'s members get where they have no setting of their own, and where each setting comes from."""
    c = q.team_ceiling(team)
    return {"priority_ceiling": {"max_priority": c.max_priority, "allow_nonpreemptible": c.allow_nonpreemptible,
                                 "priority_classes": list(c.priority_classes)},
            "ceiling_sources": dict(c.sources)}


def invalid(field: str, why: str) -> NoReturn:
    """422 naming the field, shaped as the schemas' own errors, so clients read both the same way."""
    abort(422, message=f"{field}: {why}", errors={"json": {field: [why]}})


def team_or_404(s: Session, name: str) -> Team:
    # A name outside the naming rule cannot exist, and is not worth a query: PostgreSQL would fail on a NUL byte
    # (`/teams/a%00b`) with a 500.
    team = q.team_by_name(s, name) if q.USER_NAME.fullmatch(name) else None
    if team is None:
        abort(404, message=f"team {name!r} not found")
    return team


def check_quota_fits(s: Session, name: str, quota: float, before: float) -> None:
    """422 when the quotas, with `name`'s at `quota` (it was `before`), would add up to more than the registered
    GPUs. Only once the controller has registered any: before that the cluster's size is unknown. A change that does
    not raise the total passes, so an admin can still lower quotas on a cluster that shrank under them."""
    cluster = q.cluster_gpus(s)
    if cluster <= 0 or quota <= before:
        return
    total = q.quota_total(s, without=name) + quota
    if total > cluster + EPS:
        invalid("quota_gpus", f"the teams' quotas would add up to {total:g} GPUs, more than the cluster's "
                              f"{cluster} GPUs")


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("teams", __name__, url_prefix=prefix,
                            description="Teams: quotas, borrowing limits and usage (admins change them)"))

    @blp.before_request
    def admins_write() -> None:
        # Before the body is parsed: a non-admin learns nothing from validation errors about a change they cannot make.
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            require_admin()

    @blp.route("/teams", methods=["GET"])
    @blp.arguments(PageArgs(), location="query")
    @blp.response(200, TeamListSchema)
    def list_teams(args: dict[str, Any]) -> Any:
        """List the teams

        Each team's quota and borrowing limit, and now: the GPUs its running jobs hold, how many of those it borrows
        beyond its quota, how much of its idle quota others borrow, and its pending and running jobs; with the GPUs
        the controller registered.
        """
        with store().session() as s:
            usage = q.team_usage(s)
            teams, total = page(q.list_teams(s), args)
            return {"teams": [team_json(t, usage.get(t.name)) for t in teams], "total": total,
                    "cluster_gpus": q.cluster_gpus(s)}

    @blp.route("/teams/<name>", methods=["GET"])
    @blp.response(200, TeamSchema)
    def show_team(name: str) -> Any:
        """Show a team

        Its quota, borrowing limit and usage now, as in the listing.
        """
        with store().session() as s:
            team = team_or_404(s, name)
            return team_json(team, q.team_usage(s).get(team.name))

    @blp.route("/teams", methods=["POST"])
    @blp.arguments(TeamCreateArgs())
    @blp.response(201, TeamSchema, description="the new team")
    def create_team(args: dict[str, Any]) -> Any:
        """Create a team (admins)

        Quotas are GPUs (fractions allowed) and, once the controller has registered the cluster, add up to at most
        its GPUs. `borrow_limit_gpus` null or absent: no limit but the cluster. A taken name is a 409.
        """
        with write_session() as s:
            q.lock_teams(s)
            try:
                team = q.create_team(s, args["name"], args["quota_gpus"], args["borrow_limit_gpus"])
            except q.TeamConflict as exc:
                abort(409, message=str(exc))
            check_quota_fits(s, team.name, team.quota_gpus, 0.0)  # a 422 here rolls the new team back
            body = team_json(team, None)
        notify()
        return body, 201

    @blp.route("/teams/<name>", methods=["PATCH"])
    @blp.arguments(TeamPatchArgs())
    @blp.response(200, TeamSchema, description="the team after the change")
    def update_team(args: dict[str, Any], name: str) -> Any:
        """Change a team's quota, borrowing limit or priority ceiling (admins)

        Only the fields given change; `borrow_limit_gpus: null` removes the limit. Running jobs keep their GPUs: a
        team now over a lowered quota is reclaimed from if an owner needs the GPUs. The ceiling (`max_priority`,
        `allow_nonpreemptible`, `priority_classes`; null: the built-in setting) applies to members without a setting
        of their own, from their next submission; a class that does not exist: 422.
        """
        with write_session() as s:
            q.lock_teams(s)
            team = team_or_404(s, name)
            check_ceiling(s, args)
            changed = q.set_team_ceiling(s, team, args)
            if "quota_gpus" in args and args["quota_gpus"] != team.quota_gpus:
                check_quota_fits(s, team.name, args["quota_gpus"], team.quota_gpus)
                team.quota_gpus, changed = args["quota_gpus"], True
            if "borrow_limit_gpus" in args and args["borrow_limit_gpus"] != team.borrow_limit_gpus:
                team.borrow_limit_gpus, changed = args["borrow_limit_gpus"], True
            if changed:
                team.updated_at = time.time()
                s.flush()
            body = team_json(team, q.team_usage(s).get(team.name))
        if changed:
            notify()
        return body

    @blp.route("/teams/<name>", methods=["DELETE"])
    @blp.response(200, TeamDeletedSchema)
    def delete_team(name: str) -> Any:
        """Delete a team (admins)

        Refused (409) while it has jobs pending or running, and for `default`. Its members move to `default`; its
        finished jobs keep its name in their history.
        """
        with write_session() as s:  # an abort inside rolls back: the members stay where they were
            team = team_or_404(s, name)
            try:
                moved = q.delete_team(s, team)
            except q.TeamConflict as exc:
                abort(409, message=str(exc))
        notify()
        members = f"{len(moved)} user(s) moved to {DEFAULT_TEAM!r}" + (f": {', '.join(moved)}" if moved else "")
        return {"name": name, "moved_users": moved, "message": f"team {name!r} deleted; {members}"}

    return blp

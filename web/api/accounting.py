"""`GET /accounting` and `GET /accounting.csv`: over a period, per user, team or UTC day, the GPU-hours jobs held, the
jobs that ended by how, waits, JCTs and preemptions (`scheduler.live.accounting`), as JSON or CSV. An admin sees
every job; anyone else their own and their team's."""

from __future__ import annotations

from typing import Any

from flask import Response
from flask_smorest import Blueprint
from sqlalchemy import select

from scheduler.live.accounting import Viewer, accounting
from scheduler.live.accounting_table import as_csv
from scheduler.live.store.models import User
from web.api.context import store
from web.auth import caller, protect
from web.schemas.accounting import AccountingArgs, AccountingSchema


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("accounting", __name__, url_prefix=prefix,
                            description="GPU-hours, ended jobs, waits and JCTs over a period, as sacct and sreport"))

    def computed(args: dict[str, Any]) -> dict[str, Any]:
        who = caller()
        with store().session() as s:
            team = None if who.admin else s.scalar(select(User.team).where(User.id == who.id))
            return accounting(s, args["since"], args["until"], args["by"], Viewer(who.id, who.admin, team))

    @blp.route("/accounting")
    @blp.arguments(AccountingArgs(), location="query")
    @blp.response(200, AccountingSchema)
    def report(args: dict[str, Any]) -> Any:
        """Get the accounting of a period

        Per user, team or UTC day (`by`), over [`since`, `until`) (default: the last 30 days; at most a year): GPU-hours
        held, of those the hours held before a run's workers started, jobs ended by state, jobs first started with
        their wait percentiles, the JCT percentiles of jobs that succeeded, and preemptions; with the total. An admin
        sees every job, anyone else their own and their team's (not `default`'s).
        """
        return computed(args)

    @blp.route("/accounting.csv")
    @blp.arguments(AccountingArgs(), location="query")
    @blp.response(200, description="the rows, then the total, a header first (the columns of GET /accounting's rows)",
                  content_type="text/csv")
    def report_csv(args: dict[str, Any]) -> Any:
        """Get the accounting of a period as CSV

        What `GET /accounting` answers, as CSV for a spreadsheet: a row per user, team or day, then the total.
        """
        return Response(as_csv(computed(args)), mimetype="text/csv", headers={
            "Content-Disposition": f"attachment; filename=corral-accounting-{args['by']}.csv"})

    return blp

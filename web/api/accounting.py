"""`GET /accounting`: over a period, per user, team or UTC day, the GPU-hours jobs held, the jobs that ended by how,
waits, JCTs and preemptions (`scheduler.live.accounting`), as JSON or CSV. An admin sees every job; anyone else their
own and their team's."""

from __future__ import annotations

from typing import Any

from flask import Response
from flask_smorest import Blueprint
from sqlalchemy import select

from scheduler.live.accounting import Viewer, accounting, as_csv
from scheduler.live.store.models import User
from web.api.context import store
from web.auth import caller, protect
from web.schemas.accounting import AccountingArgs, AccountingSchema


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("accounting", __name__, url_prefix=prefix,
                            description="GPU-hours, ended jobs, waits and JCTs over a period, as sacct and sreport"))

    @blp.route("/accounting")
    @blp.arguments(AccountingArgs(), location="query")
    @blp.response(200, AccountingSchema)
    def report(args: dict[str, Any]) -> Any:
        """Get the accounting of a period

        Per user, team or UTC day (`by`), over [`since`, `until`) (default: the last 30 days): GPU-hours held, of
        those the hours held before a run's workers started, jobs ended by state, jobs first started with their
        wait percentiles, the JCT percentiles of jobs that succeeded, and preemptions; with the total. `format=csv`
        answers text/csv. An admin sees every job, anyone else their own and their team's.
        """
        since, until = args["since"], args["until"]  # (defaults filled by the schema)
        who = caller()
        with store().session() as s:
            team = None if who.admin else s.scalar(select(User.team).where(User.id == who.id))
            result = accounting(s, since, until, args["by"], Viewer(who.id, who.admin, team))
        if args["format"] == "csv":
            return Response(as_csv(result), mimetype="text/csv",
                            headers={"Content-Disposition": f"attachment; filename=corral-accounting-{args['by']}.csv"})
        return result

    return blp

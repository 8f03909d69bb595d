"""`GET /stats`: job completion time, queueing delay, queue length and GPU share allocated over a recent window;
`GET /stats/network`: each node's NIC demand, approximated from the running multi-node jobs; and `GET /stats/teams`:
each team's quota, what it holds, borrows and lends now, and its fair-share usage and GPUs in use over a window.

HTTP only: the figures are `scheduler.live.figures`', computed from the store alone, so they answer while the
controller is down. The dashboard's metrics page and cluster map plot them.
"""

from __future__ import annotations

from typing import Any

from flask import current_app
from flask_smorest import Blueprint

from scheduler.core.tenancy import DEFAULT_HALF_LIFE_S
from scheduler.live.figures import compute_stats, compute_team_stats, network_load
from web.api.context import store
from web.auth import protect
from web.schemas.stats import NetworkSchema, StatsArgs, StatsSchema, TeamStatsArgs, TeamStatsSchema


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("stats", __name__, url_prefix=prefix,
                            description="Time series of JCT, queueing and utilisation; NIC and uplink load; teams' usage"))

    @blp.route("/stats")
    @blp.arguments(StatsArgs(), location="query")
    @blp.response(200, StatsSchema)
    def stats(args: dict[str, Any]) -> Any:
        """Get recent job statistics

        Job completion time, queueing delay, queue length and allocated GPU share over the last `window_s` seconds, in
        buckets of `bucket_s`, with a summary of the whole window.
        """
        return compute_stats(store(), args["window_s"], args["bucket_s"])

    @blp.route("/stats/network")
    @blp.response(200, NetworkSchema)
    def network() -> Any:
        """Get network load now

        Each NIC's and rack uplink's load from the running placements, as the contention model sees it.
        """
        return network_load(store())

    @blp.route("/stats/teams")
    @blp.arguments(TeamStatsArgs(), location="query")
    @blp.response(200, TeamStatsSchema)
    def teams(args: dict[str, Any]) -> Any:
        """Get each team's quota, usage and fair share

        Per team: its quota and borrowing limit; the GPUs its running jobs hold now, how many of those it borrows
        beyond its quota and how much of its idle quota borrowers hold; its pending and running jobs; its fair-share
        usage (GPU-seconds decayed with the half-life) and that over its quota. Over the last `window_s` seconds, in
        `points` instants ending now: the mean GPUs it held over each step and its usage over quota at each instant.
        """
        half_life = float(current_app.config.get("FAIR_SHARE_HALF_LIFE_S", DEFAULT_HALF_LIFE_S))
        return compute_team_stats(store(), args["window_s"], args["points"], half_life)

    return blp

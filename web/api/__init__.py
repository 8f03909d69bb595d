"""The REST API's blueprints, all under `/api/v1`. Each module builds a fresh blueprint per app (the app-factory
pattern), so tests can create many apps without the blueprints remembering the previous one."""

from __future__ import annotations

from flask_smorest import Api

from web.api import (
    catalog,
    cluster,
    explain,
    fair_use,
    health,
    jobs,
    nodes,
    policies,
    priority_classes,
    reports,
    stats,
    teams,
    time_limits,
    tokens,
    users,
    webhooks,
    whatif,
)

PREFIX = "/api/v1"


def register_blueprints(api: Api) -> None:
    for module in (health, jobs, explain, cluster, nodes, catalog, policies, stats, reports, tokens, teams, users,
                   fair_use, whatif, priority_classes, time_limits, webhooks):
        api.register_blueprint(module.blueprint(PREFIX))

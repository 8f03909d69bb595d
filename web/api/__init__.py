"""The REST API's blueprints, all under `/api/v1`. A module whose routes are module-level holds one blueprint, `blp`
(flask-smorest copies a blueprint's docs at each registration, so the many apps tests create may share it); the others
build a fresh one per app with `blueprint(prefix)`."""

from __future__ import annotations

from flask_smorest import Api

from web.api import (
    accounting,
    arrays,
    catalog,
    cluster,
    explain,
    fair_use,
    health,
    job_controls,
    job_logs,
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
    api.register_blueprint(health.blueprint(PREFIX))
    for routed in (jobs, job_controls, arrays, job_logs):
        api.register_blueprint(routed.blp, url_prefix=PREFIX)
    for module in (explain, cluster, nodes, catalog, policies, stats, reports, tokens, teams, users, fair_use, whatif,
                   priority_classes, time_limits, webhooks, accounting):
        api.register_blueprint(module.blueprint(PREFIX))

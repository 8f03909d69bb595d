"""`GET /health`: open to all (load balancers and `docker compose` health checks carry no token)."""

from __future__ import annotations

import time
from importlib import metadata
from typing import Any

from flask_smorest import Blueprint
from sqlalchemy import text

from web.api.context import controller_status, store
from web.schemas.health import HealthSchema


def _version() -> str:
    try:
        return metadata.version("corral")
    except metadata.PackageNotFoundError:  # running from a checkout that was never installed
        return "unknown"


VERSION = _version()


def blueprint(prefix: str) -> Blueprint:
    blp = Blueprint("health", __name__, url_prefix=prefix, description="Liveness and database reachability")

    @blp.route("/health")
    @blp.doc(security=[])
    @blp.response(200, HealthSchema)
    @blp.alt_response(503, schema=HealthSchema, description="the database is unreachable")
    def health() -> Any:
        """Check liveness

        Open to all (no token). 200 with `database: ok` when the database answers a query, else 503 saying why.
        `controller` is `leader` when this replica's controller schedules, `standby` when it waits for the lease
        (replicas on one PostgreSQL database); `epoch` is the lease's (null on SQLite, where the one process always
        leads), `leader` the replica holding it.
        """
        try:
            with store().session() as s:
                s.execute(text("SELECT 1"))
            database, code = "ok", 200
        except Exception as exc:  # noqa: BLE001 - any driver error means the same thing to a health check
            database, code = f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", 503
        body: dict[str, Any] = {"status": "ok" if code == 200 else "degraded", "database": database,
                                "version": VERSION, "time": time.time()}
        try:
            role = controller_status()
        except Exception as exc:  # noqa: BLE001 - the lease is read from the database, which may be down
            role = {"controller": "unknown", "lease": f"error: {type(exc).__name__}"}
        if role is not None:
            body.update(role)
        return body, code

    return blp

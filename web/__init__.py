"""The web layer: a Flask app factory serving the REST API (flask-smorest, OpenAPI 3) over the job store.

    app = create_app(Store.open(url), notify=controller.wake)

The app owns no state besides a token cache: the database is the source of truth, shared with the controller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask
from flask_smorest import Api, abort
from werkzeug.exceptions import HTTPException
from werkzeug.routing import IntegerConverter

from scheduler.live.job_accounts import JobAccounts
from scheduler.live.store import Store
from web import auth, jsonio, metrics, security
from web.api import register_blueprints
from web.api.context import CONTROLLER_KEY, NOTIFY_KEY, STORE_KEY
from web.fair_use import init_app as init_fair_use
from web.limits import DB_INT_MAX, MAX_BODY_BYTES
from web.schemas.base import GpuCount

# Swagger UI's assets come from the swagger-ui-bundle package (Apache-2.0, as Swagger UI), served by Corral itself:
# the docs work on a machine with no internet.
SWAGGER_UI_ASSETS = "/api/docs/assets/"

DEFAULT_CONFIG: dict[str, Any] = {
    "MAX_CONTENT_LENGTH": MAX_BODY_BYTES,
    "CORRAL_TOKEN_TTL_S": auth.TOKEN_TTL_S,
    # Who may submit command jobs, and the OS accounts they run as (scheduler.live.job_accounts; `corral serve` sets
    # both): by default only admins' jobs may run as the server's own user.
    "CORRAL_COMMAND_JOBS": "isolated",
    "CORRAL_JOB_ACCOUNTS": JobAccounts(),
    # Whether GET /cluster names other users' jobs and their users to everyone (`corral serve --show-others-jobs`):
    # by default only to admins.
    "CORRAL_SHOW_OTHERS_JOBS": False,
    "API_TITLE": "Corral",
    "API_VERSION": "v1",
    "OPENAPI_VERSION": "3.0.3",
    # One doc blueprint at /api serves both /api/v1/openapi.json and /api/docs.
    "OPENAPI_URL_PREFIX": "/api",
    "OPENAPI_JSON_PATH": "v1/openapi.json",
    "OPENAPI_SWAGGER_UI_PATH": "docs",
    "OPENAPI_SWAGGER_UI_URL": SWAGGER_UI_ASSETS,
    "API_SPEC_OPTIONS": {
        "info": {"description": "Submit and watch GPU jobs; see where the scheduler placed them and why."},
        "security": [{auth.SECURITY_SCHEME: []}],
        "components": {"securitySchemes": {auth.SECURITY_SCHEME: {
            "type": "http", "scheme": "bearer",
            "description": "a token from `corral token create --user NAME`"}}},
    },
}


def _summarize(errors: Any) -> str:
    """`field: message; field: message` from webargs' {location: {field: [messages]}}, for one-line messages."""
    parts: list[str] = []
    if isinstance(errors, Mapping):
        for location in errors.values():
            if isinstance(location, Mapping):
                parts += [f"{field}: {' '.join(map(str, msgs)) if isinstance(msgs, list) else msgs}"
                          for field, msgs in location.items()]
            elif isinstance(location, list):
                parts += [str(m) for m in location]
    return "; ".join(parts)


class CorralApi(Api):
    """flask-smorest's Api, whose error bodies always carry a readable `message` (the CLI prints it as is)."""

    def handle_http_exception(self, error: HTTPException) -> Any:
        payload, code, headers = super().handle_http_exception(error)
        if "message" not in payload:
            payload["message"] = _summarize(payload.get("errors")) or error.description or error.name
        # Messages can quote what a lower layer said (a trace file not found, an unreadable file): say what is wrong,
        # never where the server keeps its files.
        for key in ("message", "errors"):
            if key in payload:
                payload[key] = security.redact_paths(payload[key])
        return payload, code, headers


class StoreIdConverter(IntegerConverter):
    """`<int:...>` in every route: an id as the store holds it. The spec documents the bound; a larger number still
    matches the route (werkzeug would answer a bare 404) so that `_refuse_huge_ids` can answer 422 naming the field."""

    def __init__(self, map: Any, *args: Any, **kwargs: Any) -> None:  # `map`: werkzeug's name for it
        super().__init__(map, *args, **kwargs)
        self.max = DB_INT_MAX  # read by flask-smorest for the parameter's `maximum`

    def to_python(self, value: str) -> int:
        try:
            return int(value)
        except ValueError:  # more digits than int() converts (4,300): beyond any id, so refused as too large
            return DB_INT_MAX + 1


def _refuse_huge_ids(endpoint: str | None, values: dict[str, Any] | None) -> None:
    """A path integer beyond the store's columns (e.g. /jobs/2**64) is a 422 naming the parameter, not a driver
    OverflowError (500) or a lookup that cannot mean anything."""
    for name, value in (values or {}).items():
        if isinstance(value, int) and value > DB_INT_MAX:
            abort(422, message=f"{name}: must be at most {DB_INT_MAX}.", errors={"path": {name: [
                f"Must be at most {DB_INT_MAX}."]}})


def create_app(store: Store | None = None, *, notify: Callable[[], None] | None = None,
               config: dict[str, Any] | None = None,
               controller_status: Callable[[], dict[str, Any]] | None = None) -> Flask:
    """The API app on `store` (default: `Store.open()`, i.e. DATABASE_URL or SQLite under CORRAL_HOME). `notify` is
    called after every change the controller must react to: a submission, a cancel, a policy switch.
    `controller_status` says whether this replica's controller leads or stands by (`Controller.status`; None: the
    app runs without a controller, and /health says nothing of one)."""
    app = Flask(__name__)
    app.url_map.converters["int"] = StoreIdConverter  # before any route is registered
    app.url_value_preprocessor(_refuse_huge_ids)
    app.config.update(DEFAULT_CONFIG)
    app.config.update(config or {})
    jsonio.init_app(app)  # strict request parsing, never NaN in a response
    security.init_app(app)  # CSP, X-Frame-Options, ... on every response
    store = store if store is not None else Store.open()
    app.extensions[STORE_KEY] = store
    app.extensions[NOTIFY_KEY] = notify or (lambda: None)
    app.extensions[CONTROLLER_KEY] = controller_status
    auth.init_app(app, float(app.config["CORRAL_TOKEN_TTL_S"]))
    init_fair_use(app)  # the per-user request rate and requests in progress, on every authenticated request
    api = CorralApi(app)
    api.register_field(GpuCount, "number", None)
    register_blueprints(api)
    _serve_swagger_assets(app)
    metrics.init_app(app, app.extensions[STORE_KEY])  # GET /metrics for Prometheus (no token)
    from web import dashboard  # the dashboard at / (its page and assets need no token)
    dashboard.init_app(app)
    return app


def _serve_swagger_assets(app: Flask) -> None:
    from flask import send_from_directory
    from swagger_ui_bundle import swagger_ui_path

    @app.get(SWAGGER_UI_ASSETS + "<path:filename>")
    def swagger_ui_asset(filename: str) -> Any:
        return send_from_directory(swagger_ui_path, filename)

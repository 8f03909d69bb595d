"""The dashboard: one HTML page at `/` whose plain JavaScript (web/static/js) talks to the REST API with the bearer
token the user signs in with, so the page itself needs no authentication and holds no data.

Everything it loads is served by Corral (no CDN): the page works on a machine with no internet. Views live in the URL
fragment (`/#/map`, `/#/job/12`, ...), so a link to a job or a page can be shared and reloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Blueprint, Flask, render_template

WEB = Path(__file__).resolve().parents[1]
POLL_MS = 2000  # how often the open view refreshes itself


def blueprint() -> Blueprint:
    # The assets are the app's own static folder (web/static, served at /static/ by Flask since the app is
    # created in the `web` package); the templates are web/templates.
    blp = Blueprint("dashboard", __name__, template_folder=str(WEB / "templates"))

    @blp.get("/")
    def index() -> Any:
        return render_template("dashboard.html", poll_ms=POLL_MS, api="/api/v1")

    return blp


def init_app(app: Flask) -> None:
    """Serve the dashboard at `/` (without a token: the page carries no data)."""
    app.register_blueprint(blueprint())

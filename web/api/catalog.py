"""`GET /models`: the model catalog a submission's `model` must name, with the profile the contention model uses."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flask_smorest import Blueprint

from scheduler.core.generic import known_profiles
from web.auth import protect
from web.schemas.catalog import ModelsSchema


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("models", __name__, url_prefix=prefix, description="The model catalog"))

    @blp.route("/models")
    @blp.response(200, ModelsSchema)
    def models() -> Any:
        """List the model catalog

        Every model a submission's `model` may name, with the profile the contention model uses for it (compute time,
        SM and memory-bandwidth demand, memory, gradient size, communication overlap; inference models' latency and SLO). The last, `generic`, is what a command job that
        names no model is given: its `source` says how it was made.
        """
        return {"models": [asdict(p) | {"kind": p.kind.value} for p in known_profiles().values()]}

    return blp

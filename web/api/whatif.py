"""`POST /whatif`: how would the present queue play out under another policy, with more nodes or extra jobs? It
snapshots the store and runs the simulator synchronously for several seeds (`scheduler.whatif`); it writes nothing."""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint, abort

from policies import make_policy
from policies.agent_files import AgentLoadError, check_api_name
from scheduler.whatif import DEFAULT_POLICY, WhatIfError, WhatIfRequest, what_if
from web.api.context import store
from web.auth import caller, protect
from web.schemas import WhatIfArgs, WhatIfSchema


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("whatif", __name__, url_prefix=prefix,
                            description="Simulate the present queue under another policy, more nodes or extra jobs"))

    @blp.route("/whatif", methods=["POST"])
    @blp.arguments(WhatIfArgs())
    @blp.response(200, WhatIfSchema, description="distributions over the seeds of JCT, queueing and utilisation")
    def whatif(args: dict[str, Any]) -> Any:
        trace = args.get("trace")
        if trace is not None and not trace.startswith("synthetic:") and not caller().admin:
            abort(403, message="trace: only admins may replay a file on the server; others may use synthetic:N,...")
        if args.get("policy") is not None:
            try:
                check_api_name(args["policy"].strip(), "policy")
            except AgentLoadError as exc:
                abort(422, message=str(exc), errors={"json": {"policy": [str(exc)]}})
        try:
            req = WhatIfRequest.parse(args)
            return what_if(store(), req, make_policy, default_policy=DEFAULT_POLICY)
        except WhatIfError as exc:
            if exc.field is None:
                abort(409, message=str(exc))
            abort(422, message=str(exc), errors={"json": {exc.field: [exc.reason]}})

    return blp

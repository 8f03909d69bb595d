"""Placement policies: which exist, which is active, and switching (admins only). A name is validated by building the
policy, so a missing or incompatible agent is refused here rather than crashing the controller later."""

from __future__ import annotations

import json
from typing import Any

from flask_smorest import Blueprint, abort

from policies import available, make_policy
from policies.trained import PREFIX_OF, agent_dirs, check_api_name, metadata_path
from scheduler.core.model import SpecError
from scheduler.live.store import queries as q
from web.api.context import notify, store, write_session
from web.auth import protect, require_admin
from web.schemas.policies import ActivePolicyArgs, ActivePolicySchema, PoliciesSchema


def zoo_agents() -> list[str]:
    """`PREFIX:NAME` for every agent in the agent directories (agents/zoo, then $CORRAL_HOME/agents), the prefix read
    from its sidecar's formulation."""
    names = []
    paths = [p for folder in agent_dirs() for p in sorted(folder.glob("*.zip"))]
    for path in paths:
        try:
            formulation = json.loads(metadata_path(path).read_text()).get("formulation", "corral")
        except (OSError, ValueError):
            formulation = "corral"  # make_policy will explain what is wrong with it if someone picks it
        name = f"{PREFIX_OF.get(formulation, 'rl')}:{path.stem}"
        if name not in names:  # the first directory's agent is the one a name loads
            names.append(name)
    return names


def policy_names() -> list[str]:
    # available() lists prefixes as `rl:NAME` placeholders; the concrete agents replace them.
    learned = zoo_agents()
    if "rl:default" not in learned:
        learned.append("rl:default")
    # A learned policy under the guard (docs/learned-policies.md) is the way to run one live.
    return [n for n in available() if not n.endswith(":NAME")] + learned + [f"guarded:{n}" for n in learned]


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("policies", __name__, url_prefix=prefix, description="Placement policies"))

    @blp.route("/policies", methods=["GET"])
    @blp.response(200, PoliciesSchema)
    def list_policies() -> Any:
        """List the policies

        Every name `PUT /policies/active` accepts (heuristics, the trained agents found and each under the guard), the
        active one, and what its guard decided if it has one.
        """
        with store().session() as s:
            active = q.active_policy(s)
            guard = q.active_policy_info(s).get("guard")
        return {"available": policy_names(), "active": active, "guard": guard}

    @blp.route("/policies/active", methods=["PUT"])
    @blp.arguments(ActivePolicyArgs())
    @blp.response(200, ActivePolicySchema)
    def set_active(args: dict[str, Any]) -> Any:
        """Switch the active policy (admins)

        The name is checked by building the policy, so a missing or incompatible agent is refused with 422 here rather
        than failing in the controller. Running jobs stay where they are; the next pass uses the new policy.
        """
        who = require_admin()
        name = args["name"].strip()
        try:
            check_api_name(name)
            make_policy(name)
        except (SpecError, ValueError) as exc:
            text = str(exc).removeprefix("name: ")  # check_api_name already names the field
            abort(422, message=f"name: {text}", errors={"json": {"name": [text]}})
        with write_session() as s:
            q.activate_policy(s, name, by=who.name)
        notify()
        return {"active": name}

    return blp

"""`PUT /nodes/<name>/health`: a node agent reports its GPUs' health (`corral node start --api URL`), stored on the
node's row for the cluster map (`GET /cluster`). Agents authenticate with an admin token: what they write is shown to
everyone, and a user must not be able to mark someone else's node healthy."""

from __future__ import annotations

import time
from typing import Any

from flask_smorest import Blueprint, abort
from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.live.nodes import health_view, node_status
from scheduler.live.store.models import Node
from web.api.context import write_session
from web.auth import protect, require_admin
from web.schemas import NodeHealthArgs, NodeHealthSchema

NODE_NAME_MAX = 64  # the column's length


def node_or_404(s: Session, name: str) -> Node:
    # A name no node can have is not worth a query (PostgreSQL would fail on a NUL byte with a 500).
    node = (s.scalars(select(Node).where(Node.name == name)).first()
            if len(name) <= NODE_NAME_MAX and "\x00" not in name else None)
    if node is None:
        abort(404, message=f"node {name!r} not found: the controller registers a node once it has joined Ray")
    return node


def check_gpus(node: Node, report: dict[str, Any]) -> None:
    """422 naming the field when a reading names a GPU the node does not have (the controller's count is the
    truth: the cluster map has a cell per GPU it registered)."""
    count = len(node.gpus)
    for i, gpu in enumerate(report["gpus"]):
        if gpu["index"] >= count:
            why = f"node {node.name!r} has {count} GPU(s), numbered 0 to {count - 1}; got {gpu['index']}"
            # Shaped as the schema's own nested errors, so clients read both the same way.
            abort(422, message=f"gpus.{i}.index: {why}", errors={"json": {"gpus": {str(i): {"index": [why]}}}})


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("nodes", __name__, url_prefix=prefix, description="Node agents' GPU health reports"))

    @blp.before_request
    def admins_only() -> None:
        # Before the body is parsed: a non-admin learns nothing from validation errors about a write they cannot make.
        require_admin()

    @blp.route("/nodes/<name>/health", methods=["PUT"])
    @blp.arguments(NodeHealthArgs())
    @blp.response(200, NodeHealthSchema, description="the report as `GET /cluster` now shows it")
    def put_health(args: dict[str, Any], name: str) -> Any:
        """Report a node's GPU health (admins: node agents)

        Replaces the node's last report. The node's `status` is derived from its GPUs' (degraded when any is not ok);
        the time it was received is the API's. The node must be registered (404 otherwise), and every reading must
        name one of its GPUs (422).
        """
        now = time.time()
        report = {**args, "status": node_status(args["gpus"])}
        with write_session() as s:
            node = node_or_404(s, name)
            check_gpus(node, report)
            node.health, node.health_at = report, now
        return health_view(report, now, now)

    return blp

"""Admins' node endpoints. `PUT /nodes/<name>/health`: a node agent reports its GPUs' health (`corral node start --api
URL`), stored on the node's row for the cluster map (`GET /cluster`) and acted on by the controller (a faulty GPU
takes no new job). `POST /nodes/<name>/drain` and `/resume`: an admin takes a node out of service for maintenance and
back (`corral node drain`). Agents authenticate with an admin token: what they write is shown to everyone and moves
jobs, and a user must not be able to mark someone else's node healthy."""

from __future__ import annotations

import time
from typing import Any

from flask_smorest import Blueprint, abort
from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.live.nodes import drain_view, health_view, node_status
from scheduler.live.store.models import Node
from web.api.context import notify, write_session
from web.auth import caller, protect, require_admin
from web.schemas.nodes import NodeDrainArgs, NodeDrainSchema, NodeHealthArgs, NodeHealthSchema

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
        notify()  # a GPU that turned faulty (or healthy) closes (or reopens) at the controller's next pass
        return health_view(report, now, now)

    @blp.route("/nodes/<name>/drain", methods=["POST"])
    @blp.arguments(NodeDrainArgs())
    @blp.response(200, NodeDrainSchema, description="the node's drain as `GET /cluster` now shows it")
    def drain(args: dict[str, Any], name: str) -> Any:
        """Drain a node (admins)

        No new job starts on the node until it is resumed; the jobs running there finish (Slurm's DRAIN), or, with
        `now`, are checkpointed and requeued at the controller's next pass, spending no restart. Draining a drained
        node replaces its reason (and `now` can only be added). The node must be registered (404 otherwise).
        """
        with write_session() as s:
            node = node_or_404(s, name)
            if node.drained_at is None:
                node.drained_at, node.drain_evict = time.time(), False
            node.drained_by = caller().name
            node.drain_reason = args["reason"]
            node.drain_evict = node.drain_evict or args["now"]
            view = drain_view(node)
        notify()
        return {"name": name, "drain": view}

    @blp.route("/nodes/<name>/resume", methods=["POST"])
    @blp.response(200, NodeDrainSchema, description="the node, with `drain` null: it takes jobs again")
    def resume(name: str) -> Any:
        """Resume a drained node (admins)

        The node takes new jobs again from the controller's next pass (its faulty GPUs, if any, still do not).
        Resuming a node that is not drained changes nothing.
        """
        with write_session() as s:
            node = node_or_404(s, name)
            node.drained_at = node.drained_by = node.drain_reason = None
            node.drain_evict = False
        notify()
        return {"name": name, "drain": None}

    return blp

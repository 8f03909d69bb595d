"""`GET /cluster`: nodes, GPUs and who holds them, read from the database only, so the API answers even while the
controller (the only writer of placements) is down."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from flask import current_app
from flask_smorest import Blueprint

from scheduler.live.cluster import fabric_in_store
from scheduler.live.nodes import closed_in_store, constraint_labels, drain_view, health_view
from scheduler.live.store import JobState
from scheduler.live.store import queries as q
from web.api.context import store
from web.auth import caller, protect
from web.schemas.cluster import ClusterSchema


def cluster_json() -> dict[str, Any]:
    """The map as the caller may see it: another user's job shows its id, share and team, not its name nor its
    user, unless the caller is an admin or the operator lets everyone see them (`corral serve --show-others-jobs`)."""
    now = time.time()
    who = caller()
    everyone = who.admin or current_app.config["CORRAL_SHOW_OTHERS_JOBS"]
    with store().session() as s:
        nodes = q.nodes_with_gpus(s)
        tenants: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for alloc, job, user in q.open_allocations_with_jobs(s):
            shown = everyone or job.user_id == who.id
            tenants[alloc.gpu].append({"job_id": job.id, "name": job.name if shown else None, "share": alloc.share,
                                       "user": user if shown else None, "team": job.team})
        counts = q.count_by_state(s)
        active = q.active_policy(s)
        fabric = fabric_in_store(s)[0]
        closed = closed_in_store(nodes, now)
        out_nodes = []
        gpus = allocated = shared = free = 0
        share_total = 0.0
        for node in nodes:
            out_gpus = []
            for gpu in node.gpus:
                held = tenants.get(gpu.index, [])
                used = sum(t["share"] for t in held)
                gpus += 1
                allocated += bool(held)
                shared += len(held) > 1
                share_total += used
                free += not held and gpu.index not in closed
                out_gpus.append({"index": gpu.index, "local_index": gpu.local_index, "gpu_type": gpu.gpu_type,
                                 "mem_gb": gpu.mem_gb, "free_share": round(max(0.0, 1.0 - used), 6),
                                 "tenants": held, "closed": closed.get(gpu.index)})
            out_nodes.append({"name": node.name, "index": node.index, "preset": node.preset, "rack": node.rack,
                              "labels": node.labels or {}, "constraint_labels": constraint_labels(node),
                              "alive": node.alive, "since": node.updated_at, "address": node.address, "gpus": out_gpus,
                              "health": health_view(node.health, node.health_at, now), "health_at": node.health_at,
                              "drain": drain_view(node)})
    return {
        "nodes": out_nodes,
        "totals": {"nodes": len(out_nodes), "gpus": gpus, "gpus_usable": gpus - len(closed), "gpus_free": free,
                   "gpus_allocated": allocated, "gpus_shared": shared, "share_allocated": round(share_total, 6)},
        "queue": {"pending": counts.get(JobState.PENDING, 0), "running": counts.get(JobState.RUNNING, 0)},
        "active_policy": active,
        "fabric": fabric,
    }


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("cluster", __name__, url_prefix=prefix, description="Nodes, GPUs and their tenants"))

    @blp.route("/cluster")
    @blp.response(200, ClusterSchema)
    def cluster() -> Any:
        """Show the cluster map

        Every node (alive or not), with the rack it names (on `fabric`, the fabric preset the controller models the
        network above the servers with; null: one uplink per rack), its GPUs and the jobs holding each, with their
        shares, and the GPUs' health as the node's agent last reported it (stale when older than 3 of its reporting
        intervals: shown, not acted on).
        Another user's job shows only its id, share and team (`name` and `user` null), unless the caller is an admin
        or the server was started with `--show-others-jobs`.
        A GPU on a down or drained node, or one its agent reports faulty, is `closed` (with why): it takes no new job,
        and `totals.gpus_usable` leaves it out. Read from the database only, so it answers while the controller is
        down.
        """
        return cluster_json()

    return blp

"""The store's record of the cluster's nodes and GPUs, which the API's cluster map reads, and the GPU health their
agents report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from scheduler.core.admission import Fit, Refusal, admission, cluster_refusal, elastic_admission, unknown_nodes
from scheduler.core.constraints import Constraints, carried_labels, listed
from scheduler.core.contention import ContentionModel
from scheduler.core.elastic import brought_down
from scheduler.core.errors import SpecError
from scheduler.core.generic import known_profiles
from scheduler.core.model import PRESETS, Cluster, JobSpec
from scheduler.core.outages import Drain, NodeSpan, closed_gpus
from scheduler.live.cluster import ModelNode, fabric_in_store, labels_of, model_cluster, node_labels, racks_of
from scheduler.live.node.environments import VENVS_VAR
from scheduler.live.runs import NodeInfo
from scheduler.live.store import queries
from scheduler.live.store.models import Gpu, Node


def register_nodes(s: Session, reported: Iterable[NodeInfo], cluster: Cluster, node_names: Sequence[str],
                   presets: Sequence[str], now: float) -> set[int]:
    """Write the cluster model's nodes (each with the preset it is modelled with, `presets[i]`, and the rack it is
    modelled in) and GPUs with what the backend reports of each; returns the indices of the nodes that are not alive.
    Nodes in the store that the model no longer has (a smaller cluster than last time) are marked gone. A node's
    `updated_at` is when its `alive` last changed (or it was first seen): the dashboard's "since"."""
    if len(presets) != len(node_names):
        raise ValueError(f"{len(presets)} presets for {len(node_names)} nodes")
    by_name = {n.name: n for n in reported}
    racks, labels = racks_of(cluster), labels_of(cluster)
    down: set[int] = set()
    # Each node's GPUs read with it, not by a query per node (4,096 nodes at a datacentre's restart).
    existing = {n.name: n for n in s.scalars(select(Node).options(selectinload(Node.gpus)))}
    for i, name in enumerate(node_names):
        info = by_name.get(name)
        node = existing.pop(name, None)
        if node is None:
            node = Node(name=name, index=i, preset=presets[i], updated_at=now)
            s.add(node)
        node.index, node.preset, node.rack = i, presets[i], racks[i]
        node.labels = dict(labels[i]) or None
        alive = bool(info and info.alive)
        if node.alive != alive:
            node.updated_at = now
        node.alive = alive
        node.ray_node_id = info.ray_node_id if info else None
        if info is not None:  # (one not reported keeps what it last declared: it is down, and checked as such)
            node.venvs = list(info.venvs) or None
        node.address = info.address if info else None
        if not node.alive:
            down.add(i)
        if node.id is None:  # new: its GPUs' rows need its id
            s.flush()
        have = {gpu.index: gpu for gpu in node.gpus}
        for g in cluster.node_gpus(i):
            gpu_type, mem_gb = cluster.gpu_types[int(cluster.gpu_type[g])].name, float(cluster.gpu_mem[g])
            row = have.get(g)
            if row is None:
                s.add(Gpu(node_id=node.id, index=g, local_index=g - int(cluster.node_first_gpu[i]), gpu_type=gpu_type,
                          mem_gb=mem_gb))
            elif (row.gpu_type, row.mem_gb) != (gpu_type, mem_gb):  # modelled as another preset than last time
                row.gpu_type, row.mem_gb = gpu_type, mem_gb
    for stale in existing.values():
        if stale.alive:
            stale.alive, stale.updated_at = False, now
    return down


# A report older than this many of its agent's reporting intervals is stale: the agent (or its way to the API) is down,
# and what it last said may no longer be true. Three, so one lost or slow push is not an alarm.
STALE_INTERVALS = 3
GOOD_GPU_STATUSES = ("ok", "virtual")  # a GPU in any other status (degraded, unreachable) makes its node degraded


def node_status(gpus: Iterable[Mapping[str, Any]]) -> str:
    """A node's overall health from its GPUs': `degraded` if any GPU is not ok (virtual GPUs are)."""
    return "ok" if all(g.get("status") in GOOD_GPU_STATUSES for g in gpus) else "degraded"


def health_view(report: Mapping[str, Any] | None, reported_at: float | None, now: float) -> dict[str, Any] | None:
    """A node's last health report as the API shows it, with `stale` and `age_s` as of `now` (None: no report)."""
    if report is None or reported_at is None:
        return None
    age = max(0.0, now - reported_at)
    return {**report, "age_s": round(age, 3), "stale": age > STALE_INTERVALS * float(report["interval_s"])}


# A GPU this hot is throttling hard or about to shut itself down (NVML's slowdown threshold is near 90 °C on data-centre
# parts): the controller treats it as faulty, like an XID error.
HOT_GPU_C = 90


def gpu_faults(report: Mapping[str, Any] | None, reported_at: float | None, now: float) -> dict[int, str]:
    """The node's faulty GPUs (local index -> why) by its agent's last report: XID errors, uncorrected ECC errors, an
    unreachable device, or over `HOT_GPU_C`. A stale report (the agent stopped reporting: `health_view`) says nothing
    for sure any more: no GPU is faulty by it, and the cluster map shows it as unknown."""
    view = health_view(report, reported_at, now)
    if view is None or view["stale"]:
        return {}
    faults: dict[int, str] = {}
    for gpu in view.get("gpus") or ():
        why = []
        if gpu.get("status") == "unreachable":
            why.append("unreachable" + (f" ({gpu['error']})" if gpu.get("error") else ""))
        if gpu.get("xid_errors"):
            why.append("XID " + ", ".join(str(x) for x in gpu["xid_errors"]))
        if gpu.get("ecc_uncorrected"):
            why.append(f"{gpu['ecc_uncorrected']} uncorrected ECC error(s)")
        if gpu.get("temperature_c") is not None and gpu["temperature_c"] >= HOT_GPU_C:
            why.append(f"over temperature ({gpu['temperature_c']} °C)")
        if not why and gpu.get("status") not in GOOD_GPU_STATUSES:
            why.append(str(gpu.get("status")))
        if why:
            faults[int(gpu["index"])] = "; ".join(why)
    return faults


# What the store says of a node's drain and health: name, drained_at, drain_reason, drain_evict, health, health_at.
ConditionRow = tuple[str, float | None, str | None, bool, Mapping[str, Any] | None, float | None]
CONDITION_COLUMNS = (Node.name, Node.drained_at, Node.drain_reason, Node.drain_evict, Node.health, Node.health_at)


# The drains alone: what the controller reads at every pass that may place (`Controller._read_drains`), so a drain the
# API acknowledged binds the next placement. Read FOR SHARE: on PostgreSQL a drain committing meanwhile waits for the
# pass, so its acknowledgement comes after the placements that pass made, never before one that ignores it.
DRAIN_COLUMNS = (Node.name, Node.drained_at, Node.drain_reason, Node.drain_evict)


def drains(rows: Iterable[tuple[str, float | None, str | None, bool]],
           nodes: Sequence[NodeSpan] | Mapping[str, int]) -> dict[int, Drain]:
    """The drains (node position in `nodes` -> Drain) the store's rows say. `nodes` may be given as the map of node
    name -> position (the controller's `Membership.node_index`: no list of 4,096 spans made at every pass)."""
    index = nodes if isinstance(nodes, Mapping) else {n.name: i for i, n in enumerate(nodes)}
    return {index[name]: Drain(reason or "", bool(evict)) for name, drained_at, reason, evict in rows
            if drained_at is not None and name in index}


def conditions(rows: Iterable[ConditionRow], nodes: Sequence[NodeSpan], now: float
               ) -> tuple[dict[int, Drain], dict[int, str]]:
    """The drains (node position in `nodes` -> Drain) and GPU faults (cluster-wide GPU -> why) the store's rows
    say, for the rule of `scheduler.core.outages`: what the controller acts on and the cluster map shows."""
    index = {n.name: i for i, n in enumerate(nodes)}
    rows = list(rows)
    drained = drains(((name, at, reason, evict) for name, at, reason, evict, _, _ in rows), nodes)
    faults: dict[int, str] = {}
    for name, _, _, _, health, health_at in rows:
        i = index.get(name)
        if i is None:
            continue
        for local, why in gpu_faults(health, health_at, now).items():
            if local < nodes[i].gpus:
                faults[nodes[i].first_gpu + local] = why
    return drained, faults


def _constraint_refusal(s: Session, model: str, num_gpus: float, constraints: Constraints) -> Refusal | None:
    """The refusal of `constraints` on the store's nodes: a name no node has, or too few GPUs on the nodes they allow
    (down ones included, as the controller models them), by the controller's model of those nodes
    (`scheduler.core.admission.cluster_refusal`). Read only for a constrained submission: the others cost nothing
    more."""
    nodes = [n for n in queries.nodes_with_gpus(s) if n.gpus]
    refusal = unknown_nodes(constraints, (n.name for n in nodes))
    if refusal is not None or not nodes:
        return refusal
    cluster = _modelled(nodes)
    return cluster_refusal(cluster, model, num_gpus, constraints, known_profiles(), unknown=False) if cluster else None


def _modelled(nodes: Sequence[Node]) -> Cluster | None:
    """The controller's model of the store's `nodes` (with their GPU rows); None if one is recorded as a preset this
    version cannot model (the controller then decides)."""
    try:
        return model_cluster([ModelNode(n.name, len(n.gpus), n.preset, None, node_labels(n.labels)) for n in nodes])
    except (SpecError, ValueError):
        return None


def venv_refusal(s: Session, model: str, num_gpus: float, constraints: Constraints | None,
                 venv: str) -> Refusal | None:
    """The refusal of a job whose environment names the virtual environment `venv` (`environment.venv`): no alive
    node declares it (`CORRAL_VENVS`, advertised by each node's agent), or those that do cannot run the job (too few
    GPUs, or none its constraints allow: `cluster_refusal` on them alone, since each of its workers runs in it); the
    words list the names the alive nodes declare. None when they can, or when no alive node is recorded yet (the
    controller decides). The placement does not seek out these nodes: a job whose workers could land elsewhere should
    be constrained to them (docs/environments.md). Unlike the capacity check, a node that is down does not count
    here: the controller does not hold such a job for it, and would place it on an alive node without the venv."""
    alive = [n for n in queries.nodes_with_gpus(s) if n.gpus and n.alive]
    if not alive:
        return None
    having = [n for n in alive if venv in (n.venvs or ())]
    declared = sorted({v for n in alive for v in n.venvs or ()})
    names = f"those declared: {', '.join(declared)}" if declared else "no alive node declares any"
    if not having:
        return Refusal("environment.venv", f"no alive node declares a virtual environment {venv!r} "
                                           f"({VENVS_VAR}); {names}", "venv")
    cluster = _modelled(having)
    refusal = cluster_refusal(cluster, model, num_gpus, constraints, known_profiles(), unknown=False) if cluster \
        else None
    if refusal is None:
        return None
    return Refusal("environment.venv", f"only {listed([n.name for n in having], 'and')} of the alive nodes "
                                       f"declare{'s' if len(having) == 1 else ''} a virtual environment {venv!r}, and "
                                       f"there the job {refusal.why}", "venv")


def constraint_labels(node: Node) -> dict[str, str]:
    """Every label a constraint's `labels` match on a store's node, as the controller's model labels it
    (`scheduler.core.constraints.carried_labels`): its hardware's, by the preset it is modelled with, and its
    operator's. Only the operator's for a preset this version does not know (the controller models no such node)."""
    spec = PRESETS.get(node.preset)
    own = dict(node.labels or {})
    return carried_labels(spec.gpu, spec.interconnect, own) if spec is not None else own


def closed_in_store(nodes: Sequence[Node], now: float) -> dict[int, str]:
    """Every GPU of the store's nodes (with their GPU rows) that takes no new job, with why: down, drained or
    faulty, by the controller's rule. For the cluster map, its totals and the start estimates."""
    spans = [NodeSpan(n.name, min((g.index for g in n.gpus), default=0), len(n.gpus)) for n in nodes]
    drained, faults = conditions(((n.name, n.drained_at, n.drain_reason, n.drain_evict, n.health, n.health_at)
                                  for n in nodes), spans, now)
    return closed_gpus(spans, down=[i for i, n in enumerate(nodes) if not n.alive], drained=drained, faults=faults)


def drain_view(node: Node) -> dict[str, Any] | None:
    """A node's drain as the API shows it (None: not drained)."""
    if node.drained_at is None:
        return None
    return {"at": node.drained_at, "by": node.drained_by, "reason": node.drain_reason or "", "now": node.drain_evict}


def gpu_usability(nodes: Sequence[Node], now: float) -> dict[int, str | None]:
    """Every GPU of `nodes` by its cluster-wide index: None if a job may be placed on it, else why not (its node is
    down or drained, or its agent reports it faulty: `closed_in_store`, the controller's rule)."""
    closed = closed_in_store(nodes, now)
    return {gpu.index: closed.get(gpu.index) for node in nodes for gpu in node.gpus}


def usable_gpus(nodes: Sequence[Node], now: float) -> set[int]:
    """The cluster-wide indices of the GPUs a job may be placed on now (see `gpu_usability`)."""
    return {g for g, why in gpu_usability(nodes, now).items() if why is None}


# Built once: this runs on every submission (a hot path), and building the statement cost more than running it.
_RECORDED_GPUS = select(Gpu.id, Gpu.mem_gb).join(Node, Gpu.node_id == Node.id).subquery()
RECORDED_CAPACITY = select(func.count(_RECORDED_GPUS.c.id), func.max(_RECORDED_GPUS.c.mem_gb))


def capacity_admission(s: Session, spec: JobSpec, venv: str | None = None,
                       recorded: tuple[int, float] | None = None) -> Refusal | Fit | None:
    """The admission of a job (`spec`: its model, size, elastic sizes and constraints) on the cluster the controller
    recorded (`core.admission`, on every recorded node's GPUs, with its constraints): a Refusal in the API's words
    when it can never run; for an elastic job whose submitted size cannot but a smaller size it accepts can, a Fit at
    the largest such size (`core.admission.elastic_admission`: the caller stores it at that size,
    `brought_down_here`); None when it could run as submitted, or when no node is recorded yet (the controller then
    decides). Nodes that are down count: the controller's model keeps them with their GPUs closed
    (`control.intake`), so a job only they can hold waits for them there, and a restarting node must not make the
    API refuse what the controller would run once it is back. A node its constraints name must be one the store
    records. A virtual environment it names (`venv`) must be declared on alive nodes that can run it
    (`venv_refusal`).
    `recorded`: (the recorded GPUs, the largest's GB) where the caller read them already
    (`store.submission_reads`)."""
    total, largest = recorded if recorded is not None else s.execute(RECORDED_CAPACITY).one()
    if not total:
        return None
    model, constraints, profiles = spec.model, spec.constraints, known_profiles()

    def refusal_at(num_gpus: float) -> Refusal | None:
        refusal = admission(model, num_gpus, gpus=int(total), largest_gpu_gb=float(largest), profiles=profiles)
        if refusal is None and constraints is not None:
            refusal = _constraint_refusal(s, model, num_gpus, constraints)
        if refusal is None and venv:
            refusal = venv_refusal(s, model, num_gpus, constraints, venv)
        return refusal

    verdict = elastic_admission(spec, refusal_at)
    if not isinstance(verdict, Refusal):
        return verdict
    if verdict.code == "gang":
        nodes = s.scalar(select(func.count(Node.id))) or 0
        down = s.scalar(select(func.count(Node.id)).where(Node.alive.is_(False))) or 0
        where = f"{nodes} nodes" + (f", {down} of them down" if down else "")
        return Refusal(verdict.field, f"{verdict.why} ({where})", verdict.code)
    return Refusal(verdict.field, f"{model} {verdict.why}" if verdict.field == "model" else verdict.why, verdict.code)


def brought_down_here(s: Session, spec: JobSpec, size: int) -> JobSpec | None:
    """`spec` submitted at `size` GPUs (a `Fit`'s), its work priced by `core.elastic.brought_down` on the controller's
    model of the recorded nodes (each as its recorded preset, in the rack it names, on the recorded fabric: what-if's
    model); None when one is of a preset this version cannot model (the controller then decides)."""
    nodes = [n for n in queries.nodes_with_gpus(s) if n.gpus]
    try:
        cluster = model_cluster([ModelNode(n.name, len(n.gpus), n.preset, n.rack, node_labels(n.labels))
                                 for n in nodes], fabric_in_store(s)[0])
    except (SpecError, ValueError):
        return None
    return brought_down(ContentionModel(cluster, known_profiles()), spec, size)

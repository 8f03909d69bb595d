"""The cluster model of a live service: its Ray nodes, each described by its own preset and in the rack it names,
on the fabric `corral serve --fabric` names (the store records it: `queries.fabric`), shared by `corral serve`,
what-if, the figures and the store's history."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, overload

from scheduler.core.constraints import ConstraintError, check_labels
from scheduler.core.model import (
    PRESETS,
    Cluster,
    ClusterSpec,
    NodeGroupSpec,
    NodeTypeSpec,
    SpecError,
    build_cluster,
    fabric_preset,
    nics_for,
    on_fabric,
)
from scheduler.live.runs import check_rack

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


class ModelNode(NamedTuple):
    """A node as the cluster model has it, in the model's order: its name, its GPUs, the preset it is modelled
    with (its own, or `corral serve --preset` for a node that advertises none), the rack it names (None: none, so
    it fills racks in order) and the labels its operator gave it (`corral node start --label`; sorted pairs)."""

    name: str
    gpus: int
    preset: str
    rack: str | None = None
    labels: tuple[tuple[str, str], ...] = ()


def node_type(preset: str, gpus_per_node: int) -> NodeTypeSpec:
    """The preset's server with `gpus_per_node` GPUs (SpecError naming the flag if the preset cannot have that)."""
    if preset not in PRESETS:
        raise SpecError(f"--preset: unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    try:
        base = PRESETS[preset]
        return NodeTypeSpec.model_validate({**base.model_dump(), "gpus_per_node": gpus_per_node,
                                            "nics": nics_for(base.nics, gpus_per_node) if gpus_per_node > 0 else 1})
    except ValueError as exc:
        raise SpecError(f"--gpus-per-node {gpus_per_node} does not fit preset {preset}: {exc}") from None


def node_preset(own: str | None, fallback: str, gpus: int) -> tuple[str, str | None]:
    """The preset a node with `gpus` GPUs is modelled with, and why not its own when it had one: its own (`own`,
    what it advertises or what the store recorded) if Corral knows it and it allows that many GPUs, else `fallback`
    (`corral serve --preset`). A node that joins with a preset this version does not know (a newer agent's) still
    joins, modelled as the fallback, rather than failing every controller pass."""
    if own is None or own == fallback:
        return fallback, None
    try:
        node_type(own, gpus)
    except SpecError as exc:
        return fallback, f"its preset {own!r} cannot be modelled ({exc}); modelled as {fallback}"
    return own, None


def node_rack(own: str | None) -> tuple[str | None, str | None]:
    """The rack a node is modelled in, and why not the one it names when it named one: its own (`own`, what it
    advertises or what the store recorded) if it is a rack name, else none. A node started by hand with a marker that
    is no rack name (`ray start --resources`) still joins, in no named rack, rather than failing every controller
    pass."""
    if own is None:
        return None, None
    try:
        return check_rack(own, "its rack"), None
    except SpecError as exc:
        return None, f"{exc}; modelled in no named rack"


def node_labels(own: Iterable[tuple[str, str]] | Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """The labels a node is modelled with (sorted pairs): those it advertises or the store recorded that are labels
    (`scheduler.core.constraints`); one that is not (a marker set by hand) is dropped rather than failing every
    controller pass."""
    pairs = own.items() if isinstance(own, Mapping) else (own or ())
    out: list[tuple[str, str]] = []
    for key, value in pairs:
        try:
            out.extend(check_labels({key: value}).items())
        except ConstraintError:
            continue
    return tuple(sorted(out))


@overload
def build_live_cluster(nodes: Sequence[tuple[str, int]], *, racks: Sequence[str | None] | None = None,
                       fabric: str | None = None, names: Sequence[str] | None = None,
                       labels: Sequence[tuple[tuple[str, str], ...]] | None = None) -> Cluster: ...
@overload
def build_live_cluster(nodes: str, gpus_by_node: Sequence[int], *, fabric: str | None = None) -> Cluster: ...


def build_live_cluster(nodes: Sequence[tuple[str, int]] | str, gpus_by_node: Sequence[int] | None = None, *,
                       racks: Sequence[str | None] | None = None, fabric: str | None = None,
                       names: Sequence[str] | None = None,
                       labels: Sequence[tuple[tuple[str, str], ...]] | None = None) -> Cluster:
    """The cluster model of the Ray nodes, in order, each given as (preset, GPUs), in the racks `racks` names (one
    per node, None: in no named rack; no `racks`: none named), on the fabric preset `fabric` (None: one uplink per
    rack, as without a fabric; nodes naming no rack fill its leaf groups in order): consecutive nodes of one preset,
    GPU count and rack form one group. The cluster is named `live-<preset>`, or `live-<a>+<b>` (sorted) when the
    presets differ.
    `build_live_cluster(preset, gpus_by_node)` is the same for nodes that all have `preset` (kept for the callers that
    model one preset, e.g. `corral train --from-history`). `names` and `labels`: each node's name and operator's
    labels (None: node<index>, none), which constraints select nodes by."""
    if isinstance(nodes, str):
        shape = [(nodes, gpus) for gpus in gpus_by_node or ()]
        presets = [nodes]
    else:
        shape = [(preset, gpus) for preset, gpus in nodes]
        presets = sorted({preset for preset, _ in shape})
    if racks is not None and len(racks) != len(shape):
        raise ValueError(f"{len(racks)} racks for {len(shape)} nodes")
    groups: list[NodeGroupSpec] = []
    last: tuple[str, int, str | None, tuple[tuple[str, str], ...]] | None = None
    named = list(names) if names is not None else [f"node{i}" for i in range(len(shape))]
    own = list(labels) if labels is not None else [()] * len(shape)
    for (preset, gpus), rack, name, labelled in zip(shape, racks or [None] * len(shape), named, own, strict=True):
        if last == (preset, gpus, rack, labelled):
            groups[-1].count += 1
            groups[-1].names.append(name)  # type: ignore[union-attr]  # (every group here names its nodes)
        else:
            groups.append(NodeGroupSpec(count=1, node=node_type(preset, gpus), rack=rack, labels=dict(labelled),
                                        names=[name]))
        last = (preset, gpus, rack, labelled)
    spec = ClusterSpec(name="live-" + "+".join(presets), groups=groups)
    if fabric is not None:
        spec = on_fabric(spec, fabric_preset(fabric, "--fabric"), spec.name)
    return build_cluster(spec)


def model_cluster(nodes: Sequence[ModelNode], fabric: str | None = None) -> Cluster:
    """The cluster model of `nodes`, in their order, on the fabric preset `fabric` (None: none)."""
    return build_live_cluster([(n.preset, n.gpus) for n in nodes], racks=[n.rack for n in nodes], fabric=fabric,
                              names=[n.name for n in nodes], labels=[n.labels for n in nodes])


def modelled_fabric(recorded: str | None) -> tuple[str | None, str | None]:
    """The fabric preset a store's record (`queries.fabric`) is modelled on, and why not the one it records: a
    preset this version does not know (a newer server's) is modelled as none rather than failing the start."""
    try:
        return check_fabric(recorded), None
    except SpecError as exc:
        return None, f"the store records {exc}; the cluster is modelled on no fabric"


def fabric_in_store(s: Session) -> tuple[str | None, str | None]:
    """The fabric preset the store records (`corral serve --fabric`) as the model uses it, and why not the recorded
    one (`modelled_fabric`): what the controller, what-if, the figures, the history and the API all read."""
    from scheduler.live.store import queries

    return modelled_fabric(queries.fabric(s))


def check_fabric(name: str | None) -> str | None:
    """`corral serve --fabric`'s value: a fabric preset's name, or None for "none" (no fabric model); SpecError
    naming the flag and the choices otherwise."""
    if name is None or name == "none":
        return None
    fabric_preset(name, "--fabric")
    return name


def labels_of(cluster: Cluster) -> list[tuple[tuple[str, str], ...]]:
    """The labels each node of a live cluster model was given by its operator, in the model's order (its groups')."""
    return [tuple(sorted(group.labels.items())) for group in cluster.spec.groups for _ in range(group.count)]


def racks_of(cluster: Cluster) -> list[str | None]:
    """The rack each node of a live cluster model names, in the model's order (None: none): its groups' racks."""
    return [group.rack for group in cluster.spec.groups for _ in range(group.count)]


def presets_text(presets: Sequence[str]) -> str:
    """'dgx-a100', or 'dgx-a100 x 2 + pcie-t4 x 1' for nodes of several presets (in the order they first come)."""
    counts = {p: presets.count(p) for p in dict.fromkeys(presets)}
    if len(counts) <= 1:
        return next(iter(counts), "")
    return " + ".join(f"{p} x {n}" for p, n in counts.items())

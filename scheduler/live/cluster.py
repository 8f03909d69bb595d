"""The cluster model of a live service: its Ray nodes described by a preset, shared by `corral serve`, what-if and
the store's history."""

from __future__ import annotations

from scheduler.core.model import PRESETS, Cluster, ClusterSpec, NodeGroupSpec, NodeTypeSpec, SpecError, build_cluster


def node_type(preset: str, gpus_per_node: int) -> NodeTypeSpec:
    """The preset's server with `gpus_per_node` GPUs (SpecError naming the flag if the preset cannot have that)."""
    if preset not in PRESETS:
        raise SpecError(f"--preset: unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    try:
        return NodeTypeSpec.model_validate({**PRESETS[preset].model_dump(), "gpus_per_node": gpus_per_node})
    except ValueError as exc:
        raise SpecError(f"--gpus-per-node {gpus_per_node} does not fit preset {preset}: {exc}") from None


def build_live_cluster(preset: str, gpus_by_node: list[int]) -> Cluster:
    """The cluster model of the Ray nodes, in order: consecutive nodes with as many GPUs form one group."""
    groups: list[NodeGroupSpec] = []
    for gpus in gpus_by_node:
        if groups and groups[-1].node is not None and groups[-1].node.gpus_per_node == gpus:
            groups[-1].count += 1
        else:
            groups.append(NodeGroupSpec(count=1, node=node_type(preset, gpus)))
    return build_cluster(ClusterSpec(name=f"live-{preset}", groups=groups))

"""Cluster topology (and, from `scheduler.core.jobs`, jobs and placements): the one model shared by the simulator,
the RL env and the controller.

A cluster is racks of nodes; a node holds GPUs of one type. Links are what collective traffic crosses:

* inside a node, either one NVLink port per GPU (NVSwitch systems: non-blocking between GPUs), or PCIe switches shared
  by groups of GPUs plus the CPU-socket link between switches (TCCL, ASPLOS'24: crossing sockets congests);
* between nodes, one NIC per node and one uplink per rack, whose capacity is the rack's NIC total divided by an
  oversubscription ratio.

Everything the hot path touches is a flat numpy array indexed by GPU, node or link id; GPUs of a node are contiguous.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from scheduler.core.constraints import ConstraintError, Constraints, carried_labels, check_labels
from scheduler.core.errors import SpecError
from scheduler.core.fabric import FABRICS, Fabric, FabricPreset, FabricSpec, build_fabric

# Jobs and placements live in `scheduler.core.jobs`; the one model names them too (re-exported: where its importers
# have always found them).
from scheduler.core.jobs import DEFAULT_TEAM as DEFAULT_TEAM
from scheduler.core.jobs import Job as Job
from scheduler.core.jobs import JobKind as JobKind
from scheduler.core.jobs import JobPhase as JobPhase
from scheduler.core.jobs import JobSpec as JobSpec
from scheduler.core.jobs import Placement as Placement

# --------------------------------------------------------------------------------------------------------------------
# Hardware catalog
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuType:
    name: str
    memory_gb: float
    speed: float  # compute throughput relative to a V100 (workload profiles are stated on a V100)


GPU_TYPES: dict[str, GpuType] = {
    g.name: g
    for g in (
        GpuType("K80", 12.0, 0.25),
        GpuType("P100", 16.0, 0.55),
        GpuType("T4", 16.0, 0.45),
        GpuType("V100-16GB", 16.0, 1.0),
        GpuType("V100-32GB", 32.0, 1.0),
        GpuType("A10", 24.0, 0.9),
        GpuType("A100-40GB", 40.0, 2.0),
        GpuType("A100-80GB", 80.0, 2.1),
        GpuType("H100-80GB", 80.0, 3.5),
        # The H200 is the H100's chip (132 SMs, same clocks) with 141 GB of HBM3e at 4.8 TB/s instead of 3.35. Its
        # speed is the H100's times what was measured: the same LLM training steps ran 1.066x as fast on it (the
        # optimizer step, memory-bound, 1.3x; scheduler.core.workloads.llm_speedup; docs/contention-model.md).
        GpuType("H200-141GB", 141.0, 3.73),
    )
}


class LinkKind(StrEnum):
    NVLINK = "nvlink"
    PCIE = "pcie"  # a PCIe switch's uplink, shared by the GPUs below it
    SOCKET = "socket"  # the CPU-socket interconnect between PCIe switches (QPI/UPI)
    NIC = "nic"
    UPLINK = "uplink"  # a rack's uplink to the spine; with a fabric, one switch port up from a leaf or pod group
    DOWNLINK = "downlink"  # with a fabric: one switch port down into a leaf or pod group


# Links between servers: where a ring over many servers runs below line rate (`ContentionParams.ring_straggler`).
INTER_SERVER = frozenset({LinkKind.NIC, LinkKind.UPLINK, LinkKind.DOWNLINK})


class NodeTypeSpec(BaseModel):
    """One kind of server. Bandwidths are one direction, GB/s unless named in Gb/s."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field(description="GPU type name, one of GPU_TYPES")
    gpus_per_node: int = Field(ge=1, le=64)
    interconnect: Literal["nvlink", "pcie"]
    nvlink_gbs: float = Field(300.0, gt=0, description="per-GPU NVLink bandwidth (NVSwitch)")
    pcie_switches: int = Field(1, ge=1, description="PCIe switches; GPUs split evenly; one per socket when 2")
    pcie_switch_gbs: float = Field(12.0, gt=0, description="uplink of one PCIe switch (PCIe 3.0 x16: ~12 GB/s)")
    socket_gbs: float = Field(9.0, gt=0, description="GPU peer traffic across CPU sockets")
    nic_gbps: float = Field(100.0, gt=0, description="bandwidth of one NIC in Gb/s")
    nics: int = Field(1, ge=1, le=64, description="NICs per server; GPU k uses NIC k * nics // gpus_per_node")

    @model_validator(mode="after")
    def _check(self) -> NodeTypeSpec:
        if self.gpu not in GPU_TYPES:
            raise ValueError(f"unknown gpu {self.gpu!r}; choose one of {', '.join(GPU_TYPES)}")
        if self.gpus_per_node % self.pcie_switches:
            raise ValueError("gpus_per_node must split evenly over pcie_switches")
        if self.gpus_per_node % self.nics:
            raise ValueError("gpus_per_node must split evenly over nics")
        return self


def nics_for(nics: int, gpus: int) -> int:
    """The NICs of a server of a type with `nics` NICs that has `gpus` GPUs (a partial or smaller one): as many as
    its GPUs split evenly over, at most `nics` (a 1-GPU HGX host: one NIC)."""
    return max(d for d in range(1, min(nics, gpus) + 1) if gpus % d == 0)


PRESETS: dict[str, NodeTypeSpec] = {
    # DGX A100: 8 x A100 80 GB on NVSwitch (300 GB/s per GPU each way), one 200 Gb/s NIC as the issue specifies.
    "dgx-a100": NodeTypeSpec(gpu="A100-80GB", gpus_per_node=8, interconnect="nvlink", nvlink_gbs=300.0, nic_gbps=200.0),
    # Commodity PCIe server: 8 x V100 32 GB, two PCIe switches (one per CPU socket), 100 Gb/s NIC.
    "pcie-v100": NodeTypeSpec(
        gpu="V100-32GB", gpus_per_node=8, interconnect="pcie", pcie_switches=2, pcie_switch_gbs=12.0,
        socket_gbs=9.0, nic_gbps=100.0,
    ),
    # A small inference box: 4 x T4 on one PCIe switch, 25 Gb/s NIC.
    "pcie-t4": NodeTypeSpec(gpu="T4", gpus_per_node=4, interconnect="pcie", pcie_switches=1, nic_gbps=25.0),
    # HGX H100 / H200: 8 GPUs on NVSwitch with NVLink 4 (18 links, 450 GB/s per GPU each way; the H200 keeps the
    # H100's NVLink) and one 400 Gb/s NDR InfiniBand (or RoCE) NIC per GPU: GPU k's NIC is on rail k of a
    # rail-optimised fabric. A ring across servers runs one channel per GPU, each over its GPU's NIC.
    "hgx-h100": NodeTypeSpec(gpu="H100-80GB", gpus_per_node=8, interconnect="nvlink", nvlink_gbs=450.0,
                             nic_gbps=400.0, nics=8),
    "hgx-h200": NodeTypeSpec(gpu="H200-141GB", gpus_per_node=8, interconnect="nvlink", nvlink_gbs=450.0,
                             nic_gbps=400.0, nics=8),
}


class NodeGroupSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(ge=1, le=100_000)
    preset: str | None = None
    node: NodeTypeSpec | None = None
    rack: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$",
                             description="the rack (leaf group) its nodes sit in; groups naming one rack share it, "
                             "nodes of groups naming none fill racks of nodes_per_rack in order")
    labels: dict[str, str] = Field(default_factory=dict, description="labels its nodes carry besides their "
                                   "hardware's (scheduler.core.constraints), e.g. {zone: a}")
    names: list[str] | None = Field(None, description="its nodes' names, one per node (default: node<index>)")

    @model_validator(mode="after")
    def _one_of(self) -> NodeGroupSpec:
        if (self.preset is None) == (self.node is None):
            raise ValueError("give exactly one of 'preset' or 'node'")
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        try:
            check_labels(self.labels)
        except ConstraintError as exc:
            raise ValueError(str(exc)) from None
        if self.names is not None and len(self.names) != self.count:
            raise ValueError(f"names: {len(self.names)} names for {self.count} nodes")
        return self

    def node_type(self) -> NodeTypeSpec:
        return PRESETS[self.preset] if self.preset is not None else self.node  # type: ignore[return-value]


class ClusterSpec(BaseModel):
    """What a cluster YAML file holds (and what `PRESET:N[@FABRIC]` expands to)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "cluster"
    nodes_per_rack: int = Field(16, ge=1)
    oversubscription: float = Field(2.0, ge=1.0, description="without a fabric: rack uplink = rack NIC total / this")
    groups: list[NodeGroupSpec] = Field(min_length=1)
    fabric: FabricSpec | None = Field(None, description="the network above the servers, port by port")

    @model_validator(mode="after")
    def _one_oversubscription(self) -> ClusterSpec:
        if self.fabric is not None and "oversubscription" in self.model_fields_set:
            raise ValueError("with a fabric, give the oversubscription in it (fabric.oversubscription)")
        return self


# --------------------------------------------------------------------------------------------------------------------
# The built cluster
# --------------------------------------------------------------------------------------------------------------------


class NodeLabels(Mapping[str, str]):
    """A node's labels: read-only, since a cluster is shared by everything that reads it, and picklable, since
    clusters travel to worker processes (the benchmarks' and the evaluation's process pools; a `MappingProxyType`
    cannot be pickled)."""

    __slots__ = ("_labels",)

    def __init__(self, labels: Mapping[str, str]) -> None:
        self._labels = dict(labels)

    def __getitem__(self, key: str) -> str:
        return self._labels[key]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __repr__(self) -> str:
        return f"NodeLabels({self._labels!r})"

    def __reduce__(self) -> tuple[type[NodeLabels], tuple[dict[str, str]]]:
        return NodeLabels, (self._labels,)


@dataclass(eq=False)
class Cluster:
    """A built topology. Immutable by convention once built; all arrays are read-only."""

    name: str
    spec: ClusterSpec
    gpu_types: list[GpuType]
    gpu_type: np.ndarray  # [G] index into gpu_types
    gpu_node: np.ndarray  # [G]
    gpu_mem: np.ndarray  # [G] GB
    gpu_speed: np.ndarray  # [G]
    gpu_local_link: np.ndarray  # [G] NVLink port or PCIe switch link id
    gpu_switch: np.ndarray  # [G] PCIe switch index within its node (0 for NVLink nodes)
    node_first_gpu: np.ndarray  # [N]
    node_num_gpus: np.ndarray  # [N]
    node_rack: np.ndarray  # [N]
    node_nic: np.ndarray  # [N] link id of its first NIC
    node_socket: np.ndarray  # [N] link id of the socket interconnect, -1 if none
    node_nvlink: np.ndarray  # [N] bool
    rack_uplink: np.ndarray  # [R] link id of the rack's one aggregate uplink; empty with a fabric (its own links)
    link_capacity: np.ndarray  # [L] GB/s
    link_kind: list[LinkKind]
    node_types: list[NodeTypeSpec] = field(default_factory=list)
    node_type_index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # [N]
    reference_speed: float = 1.0  # speed of the GPU that trace durations refer to (the cluster's most common type)
    gpu_nic: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # [G] NIC index its traffic leaves by
    nic_link: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # [NICs] link id
    nic_node: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # [NICs]
    fabric: Fabric | None = None  # the network above the servers (scheduler.core.fabric); None: one uplink per rack
    rack_names: tuple[str | None, ...] = ()  # [R] the name a node group gave its rack; None: filled in order
    # Per node, what placement constraints read (`scheduler.core.constraints`): its name, its labels (its hardware's
    # and its group's) and its GPU type's name; and the masks of the constraints asked so far (one per distinct one).
    node_names: tuple[str, ...] = ()
    node_labels: tuple[Mapping[str, str], ...] = ()
    node_gpu_types: tuple[str, ...] = ()
    constraint_masks: dict[Constraints, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def num_gpus(self) -> int:
        return int(self.gpu_node.shape[0])

    @property
    def num_nodes(self) -> int:
        return int(self.node_rack.shape[0])

    @cached_property
    def num_racks(self) -> int:
        return int(self.node_rack.max()) + 1

    @cached_property
    def fabric_links(self) -> np.ndarray:
        """Ids of every fabric link (each tier's uplinks and downlinks); empty without a fabric."""
        if self.fabric is None:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([ids for tier in self.fabric.links for pair in tier for ids in pair]).astype(np.int64)

    def rack_links(self, rack: int) -> np.ndarray:
        """Ids of the links a rack's traffic leaves and enters it by: its one aggregate uplink, or with a fabric the
        uplinks and downlinks of its leaf groups (one per rack in a fat-tree, one per rail in a rail fabric)."""
        if self.fabric is None:
            return self.rack_uplink[rack:rack + 1].astype(np.int64)
        groups = np.unique(self.fabric.nic_group[0][self.nic_node_rack == rack])
        return np.concatenate([ids for g in groups.tolist() for ids in self.fabric.links[0][g]]).astype(np.int64)

    @cached_property
    def nic_node_rack(self) -> np.ndarray:
        """[NICs] the rack of each NIC's server."""
        return self.node_rack[self.nic_node]

    @cached_property
    def max_rack_gpus(self) -> int:
        """GPUs of the largest rack: a gang of n GPUs needs at least ceil(n / this) racks."""
        return int(np.bincount(self.node_rack, weights=self.node_num_gpus).max())

    def nics_of(self, nodes: np.ndarray | list[int]) -> np.ndarray:
        """Link ids of every NIC of `nodes` (one per node on single-NIC servers)."""
        if self.one_nic:
            return self.node_nic[nodes]
        return self.nic_link[np.isin(self.nic_node, nodes)]

    @cached_property
    def one_nic(self) -> bool:
        """Every server has one NIC (all presets before HGX): its traffic all leaves by `node_nic`."""
        return len(self.nic_link) == self.num_nodes

    @property
    def num_links(self) -> int:
        return int(self.link_capacity.shape[0])

    @cached_property
    def max_gpus_per_node(self) -> int:
        return int(self.node_num_gpus.max())

    @cached_property
    def gpus_by_node(self) -> bool:
        """The GPUs are numbered node by node (each node's a range, in node order): what the planner's index of free
        GPUs needs (`policies.free_index`). Every preset builds them so."""
        return bool(np.all(np.diff(self.gpu_node) >= 0))

    @cached_property
    def node_gpu_mem(self) -> np.ndarray:
        """[N] GB of each node's first GPU: a node's memory, as the planner reads it."""
        return self.gpu_mem[self.node_first_gpu]

    @cached_property
    def gpu_node_list(self) -> list[int]:
        """`gpu_node` as Python ints: a loop over a placement's few GPUs reads a list several times faster than an
        array (the planner's `take`, once per job a datacentre's call places)."""
        return self.gpu_node.tolist()

    @cached_property
    def node_spans(self) -> list[tuple[int, int, bool]]:
        """Per node, (its first GPU, its GPU count, NVLink), as Python values (`gpu_node_list`'s reason)."""
        return list(zip(self.node_first_gpu.tolist(), self.node_num_gpus.tolist(), self.node_nvlink.tolist(),
                        strict=True))

    @cached_property
    def min_gpu_mem(self) -> float:
        """GB of the smallest GPU: a job needing no more fits every GPU."""
        return float(self.gpu_mem.min())

    def fewest_nodes(self, workers: int) -> int:
        """The fewest servers `workers` whole GPUs can be on (a placement on more is spread)."""
        return -(-workers // self.max_gpus_per_node)

    def node_gpus(self, node: int) -> range:
        first = int(self.node_first_gpu[node])
        return range(first, first + int(self.node_num_gpus[node]))

    def describe(self) -> dict[str, object]:
        kinds: dict[str, int] = {}
        for t in self.gpu_type:
            name = self.gpu_types[int(t)].name
            kinds[name] = kinds.get(name, 0) + 1
        return {
            "name": self.name,
            "nodes": self.num_nodes,
            "gpus": self.num_gpus,
            "racks": self.num_racks,
            "gpu_types": kinds,
            "oversubscription": self.spec.oversubscription if self.fabric is None else None,
            **({"fabric": self.fabric.describe()} if self.fabric is not None else {}),
        }


def build_cluster(spec: ClusterSpec) -> Cluster:
    gpu_types: list[GpuType] = []
    type_index: dict[str, int] = {}
    g_type: list[int] = []
    g_node: list[int] = []
    g_local: list[int] = []
    g_switch: list[int] = []
    n_first: list[int] = []
    n_count: list[int] = []
    n_nic: list[int] = []
    n_socket: list[int] = []
    n_nvlink: list[bool] = []
    n_type: list[int] = []
    node_types: list[NodeTypeSpec] = []
    caps: list[float] = []
    kinds: list[LinkKind] = []
    nic_links: list[int] = []
    nic_node: list[int] = []
    nic_rail: list[int] = []
    nic_gbps: list[float] = []
    g_nic: list[int] = []
    n_names: list[str] = []
    n_labels: list[Mapping[str, str]] = []
    n_gpu_type: list[str] = []

    def link(kind: LinkKind, cap: float) -> int:
        caps.append(cap)
        kinds.append(kind)
        return len(caps) - 1

    node = 0
    rack_key: list[tuple[str, object]] = []  # racks numbered in order of first appearance
    unnamed = 0
    for group in spec.groups:
        nt = group.node_type()
        if nt not in node_types:
            node_types.append(nt)
        nt_idx = node_types.index(nt)
        gt = GPU_TYPES[nt.gpu]
        if gt.name not in type_index:
            type_index[gt.name] = len(gpu_types)
            gpu_types.append(gt)
        labels = NodeLabels(carried_labels(gt.name, nt.interconnect, group.labels))
        for i in range(group.count):
            n_names.append(group.names[i] if group.names is not None else f"node{node}")
            n_labels.append(labels)
            n_gpu_type.append(gt.name)
            n_first.append(len(g_node))
            n_count.append(nt.gpus_per_node)
            if group.rack is not None:
                rack_key.append(("named", group.rack))
            else:
                rack_key.append(("filled", unnamed // spec.nodes_per_rack))
                unnamed += 1
            n_type.append(nt_idx)
            n_nvlink.append(nt.interconnect == "nvlink")
            nics = [link(LinkKind.NIC, nt.nic_gbps / 8.0) for _k in range(nt.nics)]
            n_nic.append(nics[0])
            nic_first = len(nic_links)
            nic_links.extend(nics)
            nic_node.extend([node] * nt.nics)
            nic_rail.extend(range(nt.nics))
            nic_gbps.extend([nt.nic_gbps] * nt.nics)
            g_nic.extend(nic_first + g * nt.nics // nt.gpus_per_node for g in range(nt.gpus_per_node))
            if nt.interconnect == "nvlink":
                n_socket.append(-1)
                for _g in range(nt.gpus_per_node):
                    g_local.append(link(LinkKind.NVLINK, nt.nvlink_gbs))
                    g_switch.append(0)
            else:
                switches = [link(LinkKind.PCIE, nt.pcie_switch_gbs) for _s in range(nt.pcie_switches)]
                n_socket.append(link(LinkKind.SOCKET, nt.socket_gbs) if nt.pcie_switches > 1 else -1)
                per = nt.gpus_per_node // nt.pcie_switches
                for g in range(nt.gpus_per_node):
                    g_local.append(switches[g // per])
                    g_switch.append(g // per)
            for _g in range(nt.gpus_per_node):
                g_type.append(type_index[gt.name])
                g_node.append(node)
            node += 1

    if len(set(n_names)) != len(n_names):
        raise SpecError(f"cluster {spec.name}: node names repeat (each node's name must be its own)")
    rack_ids: dict[tuple[str, object], int] = {}
    n_rack = [rack_ids.setdefault(key, len(rack_ids)) for key in rack_key]
    num_racks = len(rack_ids)
    rack_uplink: list[int] = []
    fabric = None
    if spec.fabric is None:
        nic_cap = np.array(caps)[nic_links]
        nic_rack = np.array(n_rack)[nic_node]
        for r in range(num_racks):
            rack_nic_total = float(nic_cap[nic_rack == r].sum())
            rack_uplink.append(link(LinkKind.UPLINK, rack_nic_total / spec.oversubscription))
    else:
        fabric = build_fabric(spec.fabric, np.array(nic_node), np.array(nic_rail), np.array(nic_gbps),
                              np.array(n_rack), lambda kind, cap: link(LinkKind(kind), cap))

    gt_arr = np.array(g_type, dtype=np.int32)
    counts = np.bincount(gt_arr, minlength=len(gpu_types))
    reference_speed = gpu_types[int(np.argmax(counts))].speed

    def ro(a: np.ndarray) -> np.ndarray:
        a.flags.writeable = False
        return a

    return Cluster(
        name=spec.name,
        spec=spec,
        gpu_types=gpu_types,
        gpu_type=ro(gt_arr),
        gpu_node=ro(np.array(g_node, dtype=np.int32)),
        gpu_mem=ro(np.array([gpu_types[t].memory_gb for t in g_type], dtype=np.float64)),
        gpu_speed=ro(np.array([gpu_types[t].speed for t in g_type], dtype=np.float64)),
        gpu_local_link=ro(np.array(g_local, dtype=np.int32)),
        gpu_switch=ro(np.array(g_switch, dtype=np.int32)),
        node_first_gpu=ro(np.array(n_first, dtype=np.int32)),
        node_num_gpus=ro(np.array(n_count, dtype=np.int32)),
        node_rack=ro(np.array(n_rack, dtype=np.int32)),
        node_nic=ro(np.array(n_nic, dtype=np.int32)),
        node_socket=ro(np.array(n_socket, dtype=np.int32)),
        node_nvlink=ro(np.array(n_nvlink, dtype=bool)),
        rack_uplink=ro(np.array(rack_uplink, dtype=np.int32)),
        link_capacity=ro(np.array(caps, dtype=np.float64)),
        link_kind=kinds,
        node_types=node_types,
        node_type_index=ro(np.array(n_type, dtype=np.int32)),
        reference_speed=reference_speed,
        gpu_nic=ro(np.array(g_nic, dtype=np.int32)),
        nic_link=ro(np.array(nic_links, dtype=np.int32)),
        nic_node=ro(np.array(nic_node, dtype=np.int32)),
        fabric=fabric,
        rack_names=tuple(str(name) if kind == "named" else None for kind, name in rack_ids),
        node_names=tuple(n_names),
        node_labels=tuple(n_labels),
        node_gpu_types=tuple(n_gpu_type),
    )


def _format_validation(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


def parse_cluster(text: str) -> Cluster:
    """Build a cluster from `PRESET:NODES[,PRESET:NODES...][@FABRIC]` or a YAML file path.

    Raises SpecError naming the problem and the accepted choices.
    """
    text = text.strip()
    nodes_text, at, fabric_name = text.partition("@")
    if at:
        return _with_fabric(parse_cluster(nodes_text), fabric_name.strip(), text)
    path = Path(text)
    if text.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise SpecError(f"--cluster: file {text} does not exist")
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise SpecError(f"{text}: not valid YAML: {exc}") from None
        if not isinstance(raw, dict):
            raise SpecError(f"{text}: expected a mapping with 'groups' at the top level")
        try:
            spec = ClusterSpec.model_validate(raw)
        except ValidationError as exc:
            raise SpecError(f"{text}: {_format_validation(exc)}") from None
        if spec.name == "cluster":
            spec.name = path.stem
        return build_cluster(spec)

    groups = []
    for part in text.split(","):
        preset, sep, count = part.strip().partition(":")
        if preset not in PRESETS:
            raise SpecError(
                f"--cluster: unknown preset {preset!r} in {text!r}; choose one of {', '.join(PRESETS)} "
                "(as PRESET:NODES, e.g. dgx-a100:256) or give a YAML file"
            )
        if not sep:
            raise SpecError(f"--cluster: {part!r} needs a node count, e.g. {preset}:16")
        try:
            n = int(count)
        except ValueError:
            raise SpecError(f"--cluster: node count {count!r} in {part!r} is not an integer") from None
        if n < 1:
            raise SpecError(f"--cluster: node count in {part!r} must be at least 1")
        groups.append(NodeGroupSpec(preset=preset, count=n))
    return build_cluster(ClusterSpec(name=text, groups=groups))


def fabric_preset(name: str, where: str) -> FabricPreset:
    """The fabric preset `name`; SpecError naming `where` it was asked for and the choices for an unknown one."""
    preset = FABRICS.get(name)
    if preset is None:
        raise SpecError(f"{where}: unknown fabric {name!r}; choose one of {', '.join(FABRICS)}")
    return preset


def on_fabric(spec: ClusterSpec, preset: FabricPreset, name: str) -> ClusterSpec:
    """`spec` on the fabric `preset`: nodes that name no rack fill leaf groups as large as its leaf switches allow
    (for the most NICs a server of the spec has); nodes that name one stay in it."""
    nics = max(group.node_type().nics for group in spec.groups)
    return ClusterSpec(name=name, nodes_per_rack=preset.nodes_per_rack(nics), groups=spec.groups, fabric=preset.spec)


def _with_fabric(cluster: Cluster, name: str, text: str) -> Cluster:
    """`cluster` rebuilt on the named fabric preset, with leaf groups as large as its leaf switches allow."""
    preset = fabric_preset(name, f"--cluster {text!r}")
    if cluster.fabric is not None:
        raise SpecError(f"--cluster: {text!r} names a fabric twice")
    return build_cluster(on_fabric(cluster.spec, preset, text))

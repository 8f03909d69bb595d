"""Where a job may run: its GPU type, the node labels it needs, the nodes it is limited to and those it excludes
(Slurm's `--constraint`, `--nodelist` and `--exclude`; Kueue's ResourceFlavors and node selectors). The one rule,
read by every placement search, the cluster state's legality check, the victim searches, admission, the pending
reasons and what-if.

A node matches when its GPUs are of `gpu_type` (the type's name, e.g. `H100-80GB`, or its family, `h100`; any case),
it carries every label of `labels` with that value, it is one of `nodes` when any are named, and it is none of
`exclude`. Every node carries the labels its hardware gives (`hardware_labels`: `gpu=h100`, `interconnect=nvlink`)
and those its operator gives it (`corral node start --label k=v`; a cluster YAML's group `labels`).

A job with no constraints has `JobSpec.constraints` None: the hot paths test that and nothing more. The masks of a
constrained job are computed once per cluster and distinct constraints (`eligible_nodes`), so a deep queue of jobs
alike costs one mask. numpy is imported where the masks are made: the command line parses `corral submit
--constraint` with this module, and the HTTP client commands import no numpy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

# What a label's key and value, and a node's name, may be: Kubernetes' label characters, and no more than a host name.
LABEL_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,62})$")
NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$")
MAX_LABELS = 32  # labels one job may require, or one node may carry
MAX_NODES = 1024  # nodes one job may name in its node list, or in its exclusion


class ConstraintError(ValueError):
    """Constraints that cannot be used; `field` names the part at fault ("gpu_type", "labels", "nodes", "exclude")."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


def gpu_family(gpu_type: str) -> str:
    """The family a GPU type's name gives its nodes' `gpu` label: 'A100-80GB' -> 'a100', 'T4' -> 't4'."""
    return gpu_type.split("-", 1)[0].lower()


def hardware_labels(gpu_type: str, interconnect: str) -> dict[str, str]:
    """The labels a node's hardware gives it, whatever its operator adds: its GPU family and its interconnect."""
    return {"gpu": gpu_family(gpu_type), "interconnect": interconnect}


def carried_labels(gpu_type: str, interconnect: str, own: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every label a node carries, which a constraint's `labels` match: its hardware's (`hardware_labels`) and its
    operator's (`own`), the operator's winning on a key both give. The cluster model's nodes are labelled by this;
    the cluster map lists it."""
    return {**hardware_labels(gpu_type, interconnect), **(own or {})}


def check_labels(labels: Mapping[str, str], field: str = "labels") -> dict[str, str]:
    """`labels` checked (ConstraintError naming `field` otherwise): at most MAX_LABELS, keys and values of label
    characters."""
    if not isinstance(labels, Mapping):
        raise ConstraintError(field, f"expected an object of key: value, got {type(labels).__name__}")
    if len(labels) > MAX_LABELS:
        raise ConstraintError(field, f"at most {MAX_LABELS} labels, got {len(labels)}")
    out: dict[str, str] = {}
    for k, v in labels.items():
        for part in (k, v):
            if not isinstance(part, str) or not LABEL_RE.match(part):
                raise ConstraintError(field, f"{part!r} in {k!r}: {v!r} is no label (letters, digits and ._/- "
                                             "up to 63 characters, starting with a letter or digit)")
        out[k] = v
    return out


def parse_label(text: str, field: str = "labels") -> tuple[str, str]:
    """'k=v' as a label (ConstraintError naming `field` otherwise)."""
    key, eq, value = text.partition("=")
    if not eq:
        raise ConstraintError(field, f"{text!r} is not KEY=VALUE")
    return next(iter(check_labels({key.strip(): value.strip()}, field).items()))


def _names(names: Iterable[str], field: str) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise ConstraintError(field, "expected a list of node names")
    out = tuple(dict.fromkeys(names))
    if len(out) > MAX_NODES:
        raise ConstraintError(field, f"at most {MAX_NODES} nodes, got {len(out)}")
    for n in out:
        if not isinstance(n, str) or not NODE_NAME_RE.match(n):
            raise ConstraintError(field, f"{n!r} is not a node name")
    return out


@dataclass(frozen=True, slots=True)
class Constraints:
    """Where a job may run (the module's rule). Hashable: jobs alike in it share their masks and searches."""

    gpu_type: str | None = None
    labels: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs: every one must hold
    nodes: tuple[str, ...] = ()  # only these nodes (none named: any)
    exclude: tuple[str, ...] = ()  # never these

    @classmethod
    def make(cls, gpu_type: str | None = None, labels: Mapping[str, str] | None = None,
             nodes: Iterable[str] = (), exclude: Iterable[str] = ()) -> Constraints | None:
        """Checked constraints, or None when they constrain nothing (what a job without any carries);
        ConstraintError naming the field at fault."""
        if gpu_type is not None and (not isinstance(gpu_type, str) or not LABEL_RE.match(gpu_type)):
            raise ConstraintError("gpu_type", f"{gpu_type!r} is not a GPU type (e.g. H100-80GB or h100)")
        pairs = tuple(sorted(check_labels(labels or {}).items()))
        only, never = _names(nodes, "nodes"), _names(exclude, "exclude")
        both = sorted(set(only) & set(never))
        if both:
            raise ConstraintError("exclude", f"excludes {', '.join(both)}, which its node list names")
        made = cls(gpu_type or None, pairs, only, never)
        return made if made.any() else None

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Constraints | None:
        """The constraints `to_json` gave (the store's and the API's form); None for none."""
        if not data:
            return None
        if not isinstance(data, Mapping):
            raise ConstraintError("constraints", "expected an object")
        unknown = set(data) - {"gpu_type", "labels", "nodes", "exclude"}
        if unknown:
            raise ConstraintError(sorted(unknown)[0], "unknown field (gpu_type, labels, nodes or exclude)")
        return cls.make(data.get("gpu_type"), data.get("labels") or {}, data.get("nodes") or (),
                        data.get("exclude") or ())

    def any(self) -> bool:
        return bool(self.gpu_type or self.labels or self.nodes or self.exclude)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.gpu_type:
            out["gpu_type"] = self.gpu_type
        if self.labels:
            out["labels"] = dict(self.labels)
        if self.nodes:
            out["nodes"] = list(self.nodes)
        if self.exclude:
            out["exclude"] = list(self.exclude)
        return out

    def words(self) -> str:
        """The constraints as people read them: 'gpu=h100, on node1 or node2, not node3'."""
        parts = [f"GPU type {self.gpu_type}"] if self.gpu_type else []
        parts += [f"{k}={v}" for k, v in self.labels]
        if self.nodes:
            parts.append("on " + listed(self.nodes, "or"))
        if self.exclude:
            parts.append("not on " + listed(self.exclude, "or"))
        return ", ".join(parts)

    def matches(self, name: str, labels: Mapping[str, str], gpu_type: str) -> bool:
        """Whether one node (its name, labels and GPU type) may run the job."""
        return all(self.part_mask(part, [name], [labels], [gpu_type])[0] for part in self.parts())

    def parts(self) -> list[str]:
        return [p for p in ("gpu_type", "labels", "nodes", "exclude") if getattr(self, p)]

    def part_mask(self, part: str, names: Sequence[str], labels: Sequence[Mapping[str, str]],
                   gpu_types: Sequence[str]) -> np.ndarray:
        import numpy as np

        if part == "gpu_type":
            want = (self.gpu_type or "").lower()
            return np.array([t.lower() == want or gpu_family(t) == want for t in gpu_types], dtype=bool)
        if part == "labels":
            return np.array([all(lab.get(k) == v for k, v in self.labels) for lab in labels], dtype=bool)
        if part == "nodes":
            return np.isin(np.asarray(names, dtype=object), list(self.nodes))
        return ~np.isin(np.asarray(names, dtype=object), list(self.exclude))


def listed(names: Sequence[str], conj: str, most: int = 4) -> str:
    shown = list(names[:most]) + ([f"{len(names) - most} more"] if len(names) > most else [])
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + f" {conj} {shown[-1]}"


class NodeTable(Protocol):
    """What the rule reads of a cluster (`scheduler.core.model.Cluster`): per node, its name, labels and GPU type,
    and a place to keep the masks."""

    node_names: tuple[str, ...]
    node_labels: tuple[Mapping[str, str], ...]
    node_gpu_types: tuple[str, ...]
    gpu_node: np.ndarray
    constraint_masks: dict[Constraints, tuple[np.ndarray, np.ndarray]]


def _masks(cluster: NodeTable, constraints: Constraints) -> tuple[np.ndarray, np.ndarray]:
    found = cluster.constraint_masks.get(constraints)
    if found is None:
        import numpy as np

        nodes = np.ones(len(cluster.node_names), dtype=bool)
        for part in constraints.parts():
            nodes &= constraints.part_mask(part, cluster.node_names, cluster.node_labels, cluster.node_gpu_types)
        gpus = nodes[cluster.gpu_node]
        nodes.flags.writeable = gpus.flags.writeable = False  # handed out as they are
        found = cluster.constraint_masks[constraints] = (nodes, gpus)
    return found


def eligible_nodes(cluster: NodeTable, constraints: Constraints) -> np.ndarray:
    """Per node, whether a job of `constraints` may run there (read-only; computed once per cluster and
    constraints)."""
    return _masks(cluster, constraints)[0]


def eligible_gpus(cluster: NodeTable, constraints: Constraints) -> np.ndarray:
    """Per GPU, whether its node is eligible (`eligible_nodes`)."""
    return _masks(cluster, constraints)[1]


def parse_constraint(text: str) -> tuple[str | None, dict[str, str]]:
    """Slurm's `--constraint` text: features joined by `&`, each `KEY=VALUE` (a label) or a bare word (the GPU type,
    e.g. `h100`, at most one): 'gpu=h100&zone=a' -> (None, {gpu: h100, zone: a}). ConstraintError naming the field."""
    gpu_type: str | None = None
    labels: dict[str, str] = {}
    for term in (t.strip() for t in text.split("&")):
        if not term:
            continue
        if "=" in term:
            key, value = parse_label(term)
            labels[key] = value
        elif gpu_type is None:
            gpu_type = term
        else:
            raise ConstraintError("gpu_type", f"{gpu_type!r} and {term!r}: at most one GPU type (labels are KEY=VALUE)")
    return gpu_type, labels


def parse_names(text: str, field: str) -> tuple[str, ...]:
    """A node list as Slurm's `--nodelist` and `--exclude` take it: names separated by commas or spaces."""
    return _names([n for n in re.split(r"[,\s]+", text.strip()) if n], field)


def from_text(constraint: str = "", nodelist: str = "", exclude: str = "") -> Constraints | None:
    """Constraints from the Slurm-like text of a trace's columns or the command line (`parse_constraint`,
    `parse_names`)."""
    gpu_type, labels = parse_constraint(constraint)
    return Constraints.make(gpu_type, labels, parse_names(nodelist, "nodes"), parse_names(exclude, "exclude"))

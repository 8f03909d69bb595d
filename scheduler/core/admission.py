"""Admission: can this cluster ever run this job? The one rule, asked by the simulator when a job arrives, the live
controller when it takes a submission in, the API before it stores one (a 422 instead of a job that fails at once)
and what-if for its hypothetical jobs. Each caller adds its own context to the words (which nodes are alive, the
extra nodes); the decision and its figures are made here only.

A job is admitted when its model is in the catalog, its gang (at least one worker: a share of one GPU is one) fits in
the cluster's GPU count, one of its workers fits in the memory of the cluster's largest GPU, and, for a share of one
GPU, the memory CUDA MPS gives that share of the largest GPU holds the model (`scheduler.core.colocation`: the cap
the live worker sets; a smaller GPU gives less, and placements skip those), and its constraints
(`scheduler.core.constraints`: GPU type, labels, node list, exclusion) leave nodes that hold it (the refusal names
the part of them that leaves too few). Whether it fits *now* is the policy's business, not admission's.

An elastic job (`scheduler.core.elastic`) is admitted when any size it accepts can run here (`elastic_admission`).
When its submitted size cannot, it is submitted at the largest size that can (a `Fit`: the simulator on arrival,
what-if for its hypothetical jobs, the API before it stores one and the controller's intake when it takes one in,
`scheduler.core.elastic.brought_down` its work in that size's seconds), so that every policy, those that start a job
at its submitted size included, can start it. Refusals only grow with the size (a larger gang needs more GPUs, of
the nodes its constraints allow), so the largest size is found by bisection. Refused only when its smallest size
cannot run either; a refusal that has nothing to do with the size (its model, or a node its constraints name that does
not exist) is the submitted size's.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.core.colocation import cap_words, holds, least_share
from scheduler.core.constraints import Constraints, listed
from scheduler.core.model import Cluster, JobSpec
from scheduler.core.reasons import Code, Reason
from scheduler.core.workloads import ModelProfile


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a job can never run here: the request field at fault, and the reason in words."""

    field: str  # "model", "num_gpus" or "constraints.<part>"
    why: str
    code: str = ""  # which rule: "unknown_model", "gang", "memory" (no GPU holds the model), "share" (MPS cap),
    # "constraint" (its constraints leave too few GPUs: `scheduler.core.constraints`)


def admission(model: str, num_gpus: float, *, gpus: int, largest_gpu_gb: float,
              profiles: Mapping[str, ModelProfile]) -> Refusal | None:
    """The refusal of a job of `num_gpus` GPUs of `model` on a cluster of `gpus` GPUs whose largest has
    `largest_gpu_gb` GB, or None when it may run there."""
    if model not in profiles:
        return Refusal("model", f"unknown model {model!r}", "unknown_model")
    workers = max(1, int(num_gpus))
    if workers > gpus:
        return Refusal("num_gpus", f"needs {workers} GPUs, the cluster has {gpus}", "gang")
    mem = profiles[model].mem_gb
    if mem > largest_gpu_gb:
        return Refusal("model", f"needs {mem:g} GB per GPU, the largest GPU has {largest_gpu_gb:g} GB", "memory")
    if num_gpus < 1 and not holds(mem, num_gpus, largest_gpu_gb):
        least = least_share(mem, largest_gpu_gb)
        ask = f"ask for at least {least:g}" if least < 1 else "ask for a whole GPU (1)"
        return Refusal("num_gpus", f"{cap_words(num_gpus, largest_gpu_gb)}, but {model} needs {mem:g} GB; {ask}",
                       "share")
    return None


@dataclass(frozen=True, slots=True)
class Fit:
    """An elastic job whose submitted size (`num_gpus`) the cluster can never hold, admitted at `size`, the largest
    size it accepts that it can; `refusal` says why its submitted size cannot."""

    num_gpus: int
    size: int
    refusal: Refusal

    @property
    def reason(self) -> Reason:
        """What was done and why, as data (its words: `Reason.text`)."""
        return Reason(Code.SIZED_DOWN, {"from": self.num_gpus, "to": self.size, "why": self.refusal.why})


def elastic_admission(spec: JobSpec, refusal_at: Callable[[float], Refusal | None]) -> Refusal | Fit | None:
    """`spec`'s admission by `refusal_at` (the caller's refusal of a job of `spec`'s model and constraints at a size,
    on its cluster): None when its submitted size may run; for an elastic job whose submitted size cannot, a `Fit` at
    the largest size it accepts that can, else the refusal of its smallest size (naming `min_gpus`, or `sizes` when
    that is where its smallest size comes from, for too large a gang); a rigid job's refusal as it is. See the module
    docstring."""
    refusal = refusal_at(spec.num_gpus)
    if refusal is None or not spec.elastic:
        return refusal
    choices = spec.size_choices()
    below = choices[:bisect_left(choices, spec.workers)]  # (it accepts its submitted size: `JobSpec` checks)
    smallest = refusal_at(below[0]) if below else refusal
    if smallest is not None:
        if smallest.why == refusal.why:  # the same at every size: not the size's fault
            return refusal
        field = smallest.field if smallest.code != "gang" else "sizes" if below[0] != spec.min_gpus else "min_gpus"
        return Refusal(field, f"the smallest size it accepts, {below[0]} GPUs, can never run here: {smallest.why}",
                       smallest.code)
    lo, hi = 1, len(below)  # below[lo - 1] may run, below[hi] (if any) may not
    while lo < hi:
        mid = (lo + hi) // 2
        if refusal_at(below[mid]) is None:
            lo = mid + 1
        else:
            hi = mid
    return Fit(spec.workers, below[lo - 1], refusal)


# What admission reads of a job, by the names a submission's fields and a stored job's columns share.
ADMITTED_FIELDS = ("name", "model", "num_gpus", "duration_s", "min_gpus", "max_gpus", "sizes", "constraints")


def admitted_spec(fields: Mapping[str, Any]) -> JobSpec:
    """The job admission weighs, from its `ADMITTED_FIELDS` as stored (constraints as JSON): a submission's fields
    before the API stores them, or a stored job's columns when the controller takes it in. One reading for both, so
    the API and the controller admit the same job. A duration not given yet (estimated after admission) reads as 1 s:
    only an elastic job brought down reads it, to price its work at the smaller size."""
    return JobSpec(name=fields.get("name") or "-", submit_s=0.0, num_gpus=fields["num_gpus"],
                   duration_s=fields.get("duration_s") or 1.0, model=fields["model"], min_gpus=fields.get("min_gpus"),
                   max_gpus=fields.get("max_gpus"), sizes=tuple(fields.get("sizes") or ()),
                   constraints=Constraints.from_json(fields.get("constraints")))


def spec_admission(cluster: Cluster, spec: JobSpec, profiles: Mapping[str, ModelProfile], *,
                   unknown: bool = True) -> Refusal | Fit | None:
    """`elastic_admission` by `cluster_refusal` on a cluster model (the simulator's on arrival, what-if's)."""
    return elastic_admission(spec, lambda k: cluster_refusal(cluster, spec.model, k, spec.constraints, profiles,
                                                             unknown=unknown))


# ---- constraints (`scheduler.core.constraints`) ----------------------------------------------------------------


def unknown_nodes(constraints: Constraints, known: Iterable[str]) -> Refusal | None:
    """The refusal of constraints naming a node the cluster does not have (a typo would otherwise wait forever, or
    exclude nothing)."""
    names = set(known)
    for field in ("nodes", "exclude"):
        missing = [n for n in getattr(constraints, field) if n not in names]
        if missing:
            return Refusal(f"constraints.{field}", f"no node named {listed(missing, 'or')} in the cluster",
                           "constraint")
    return None


def constraint_refusal(constraints: Constraints, *, names: Sequence[str], labels: Sequence[Mapping[str, str]],
                       gpu_types: Sequence[str], node_gpus: Sequence[int], node_mem_gb: Sequence[float],
                       num_gpus: float, mem_gb: float) -> Refusal | None:
    """The refusal of a job of `num_gpus` GPUs needing `mem_gb` per GPU whose constraints leave too few GPUs that hold
    it among the nodes described (per node: name, labels, GPU type, GPU count, GPU memory), naming the part of the
    constraints that leaves too few (the first in gpu_type, labels, nodes, exclude); None when they leave enough.
    Whether they fit *now* is the policy's business, as with admission."""
    workers = max(1, int(num_gpus))
    share = num_gpus if num_gpus < 1 else 1.0
    gpus = np.asarray(node_gpus, dtype=np.int64) * np.array([holds(mem_gb, share, m) for m in node_mem_gb], dtype=bool)
    if int(gpus.sum()) < workers:
        return None  # admission's refusal (memory, gang) says why, without the constraints
    ok = np.ones(len(names), dtype=bool)
    for part in constraints.parts():
        ok &= constraints.part_mask(part, names, labels, gpu_types)
        have = int(gpus[ok].sum())
        if have < workers:
            return Refusal(f"constraints.{part}", _short_words(constraints, part, workers, have, len(names),
                                                               sorted(set(gpu_types))), "constraint")
    return None


def _short_words(c: Constraints, part: str, workers: int, have: int, nodes: int, types: list[str]) -> str:
    need = f"{workers} GPU" + ("s" if workers > 1 else "")
    head = f"needs {need} on nodes matching {c.words()}"
    if have == 0:
        tail = {"gpu_type": f"no node has them (GPU types here: {', '.join(types)})",
                "labels": "no node carries those labels with room for it",
                "nodes": "none of those nodes holds it", "exclude": "it excludes every node that could"}
        return f"{head}: {tail[part]}"
    return f"{head}: those have {have} that hold it"


def cluster_refusal(cluster: Cluster, model: str, num_gpus: float, constraints: Constraints | None,
                    profiles: Mapping[str, ModelProfile], *, unknown: bool = True) -> Refusal | None:
    """`admission` on a cluster model, then its constraints (`constraint_refusal`; with `unknown`, a node they name
    that the model lacks is refused too: the simulator's and what-if's cluster has every node, the live controller's
    only the alive ones)."""
    refusal = admission(model, num_gpus, gpus=cluster.num_gpus, largest_gpu_gb=float(cluster.gpu_mem.max()),
                        profiles=profiles)
    if refusal is not None or constraints is None:
        return refusal
    if unknown:
        refusal = unknown_nodes(constraints, cluster.node_names)
    return refusal or constraint_refusal(
        constraints, names=cluster.node_names, labels=cluster.node_labels, gpu_types=cluster.node_gpu_types,
        node_gpus=cluster.node_num_gpus.tolist(), node_mem_gb=cluster.gpu_mem[cluster.node_first_gpu].tolist(),
        num_gpus=num_gpus, mem_gb=profiles[model].mem_gb)

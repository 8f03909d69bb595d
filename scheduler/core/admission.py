"""Admission: can this cluster ever run this job? The one rule, asked by the simulator when a job arrives, the live
controller when it takes a submission in, the API before it stores one (a 422 instead of a job that fails at once)
and what-if for its hypothetical jobs. Each caller adds its own context to the words (which nodes are alive, the
extra nodes); the decision and its figures are made here only.

A job is admitted when its model is in the catalog, its gang (at least one worker: a share of one GPU is one) fits in
the cluster's GPU count, one of its workers fits in the memory of the cluster's largest GPU, and, for a share of one
GPU, the memory CUDA MPS gives that share of the largest GPU holds the model (`scheduler.core.colocation`: the cap
the live worker sets; a smaller GPU gives less, and placements skip those). Whether it fits *now* is the policy's
business, not admission's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.core.colocation import cap_words, holds, least_share
from scheduler.core.workloads import ModelProfile


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a job can never run here: the request field at fault, and the reason in words."""

    field: str  # "model" or "num_gpus"
    why: str
    code: str = ""  # which rule: "unknown_model", "gang", "memory" (no GPU holds the model), "share" (MPS cap)


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

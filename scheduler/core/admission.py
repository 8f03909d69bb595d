"""Admission: can this cluster ever run this job? The one rule, asked by the simulator when a job arrives, the live
controller when it takes a submission in, the API before it stores one (a 422 instead of a job that fails at once)
and what-if for its hypothetical jobs. Each caller adds its own context to the words (which nodes are alive, the
extra nodes); the decision and its figures are made here only.

A job is admitted when its model is in the catalog, its gang (at least one worker: a share of one GPU is one) fits in
the cluster's GPU count, and one of its workers fits in the memory of the cluster's largest GPU. Whether it fits
*now* is the policy's business, not admission's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.core.workloads import ModelProfile


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a job can never run here: the request field at fault, and the reason in words."""

    field: str  # "model" or "num_gpus"
    why: str


def admission(model: str, num_gpus: float, *, gpus: int, largest_gpu_gb: float,
              profiles: Mapping[str, ModelProfile]) -> Refusal | None:
    """The refusal of a job of `num_gpus` GPUs of `model` on a cluster of `gpus` GPUs whose largest has
    `largest_gpu_gb` GB, or None when it may run there."""
    if model not in profiles:
        return Refusal("model", f"unknown model {model!r}")
    workers = max(1, int(num_gpus))
    if workers > gpus:
        return Refusal("num_gpus", f"needs {workers} GPUs, the cluster has {gpus}")
    mem = profiles[model].mem_gb
    if mem > largest_gpu_gb:
        return Refusal("model", f"needs {mem:g} GB per GPU, the largest GPU has {largest_gpu_gb:g} GB")
    return None

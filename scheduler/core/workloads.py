"""Catalog of model profiles: compute, memory and communication, calibrated from published measurements.

The table lives in `scheduler/core/data/workloads.csv`; `scheduler/core/calibrate/` derives it from the raw DeepShare
and Gavel measurements in `../shared/calibration` and writes each row's source. Profiles are stated on one V100: a node
type's `GpuType.speed` scales compute.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources

from scheduler.core.model import JobKind


@dataclass(frozen=True, slots=True)
class ModelProfile:
    name: str
    kind: JobKind
    compute_ms: float  # one iteration's compute on one V100, per worker (data parallel, fixed per-GPU batch)
    sm: float  # SM demand alone on a whole GPU, as a fraction of the GPU (0, 1]
    membw: float  # memory-bandwidth demand alone, fraction of the GPU's (0, 1]
    mem_gb: float  # GPU memory footprint per worker
    grad_mb: float  # gradient bytes all-reduced per iteration (data parallel), MB
    overlap: float  # fraction of compute time under which communication can hide [0, 1]
    latency_ms: float = 0.0  # inference: isolated request latency on a V100 (0 for training)
    slo_ms: float = 0.0  # inference: default latency SLO (0 for training)
    source: str = ""  # where the numbers come from

    @property
    def grad_gb(self) -> float:
        return self.grad_mb / 1024.0


def profile_from_row(row: dict[str, str]) -> ModelProfile:
    """One catalog table row (the columns of workloads.csv) as a profile."""
    return ModelProfile(
        name=row["name"],
        kind=JobKind(row["kind"]),
        compute_ms=float(row["compute_ms"]),
        sm=float(row["sm"]),
        membw=float(row["membw"]),
        mem_gb=float(row["mem_gb"]),
        grad_mb=float(row["grad_mb"]),
        overlap=float(row["overlap"]),
        latency_ms=float(row.get("latency_ms") or 0.0),
        slo_ms=float(row.get("slo_ms") or 0.0),
        source=row.get("source", ""),
    )


@cache
def catalog() -> dict[str, ModelProfile]:
    """All profiles by name, in table order."""
    text = resources.files("scheduler.core").joinpath("data/workloads.csv").read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return {p.name: p for p in map(profile_from_row, csv.DictReader(lines))}


def get(name: str) -> ModelProfile:
    try:
        return catalog()[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(catalog())}") from None


def training_models() -> list[str]:
    return [n for n, p in catalog().items() if p.kind is JobKind.TRAINING]


def inference_models() -> list[str]:
    return [n for n, p in catalog().items() if p.kind is JobKind.INFERENCE]

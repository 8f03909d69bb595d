"""Catalog of model profiles: compute, memory and communication, calibrated from published measurements.

The table lives in `scheduler/core/data/workloads.csv`; `scheduler/core/calibrate/` derives it from the raw DeepShare
and Gavel measurements in `../shared/calibration` and writes each row's source. Profiles are stated on one V100: a node
type's `GpuType.speed` scales compute.

The catalog's LLM-scale models (`LLM_MODELS`) come after the table's: `llm_profiles` derives them from training steps
measured on an H100 (`scheduler/core/data/llm_steps.csv`, `scheduler.core.calibrate.llm`); the same steps measured on an
H200 state its speed (`llm_speedup`).
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from scheduler.core.model import GPU_TYPES, JobKind

LLM_STEPS_PATH = Path(str(resources.files("scheduler.core").joinpath("data/llm_steps.csv")))
LLM_STEPS_COLUMNS = ("run", "gpu", "model", "params", "batch", "seq", "step_ms", "forward_ms", "backward_ms",
                     "optimizer_ms", "model_tflops", "peak_mem_gib", "gpu_busy", "mem_busy")
# benchmarks/gpu_llm_profiles.py's names -> the catalog's
LLM_MODELS = {"gpt-1.3b": "GPT-1.3B", "gpt-2.7b": "GPT-2.7B", "bert-large": "BERT-large"}
# NVML's names of the GPUs LLM steps may be measured on -> GPU_TYPES (whose speed states the step on a V100)
MEASURED_GPUS = {"NVIDIA H100 80GB HBM3": "H100-80GB", "NVIDIA H200": "H200-141GB"}
# The profiles are the H100's runs; runs on another GPU measure that GPU's speed against it (`llm_speedup`).
PROFILE_GPU = "NVIDIA H100 80GB HBM3"
CUDA_CONTEXT_GB = 0.5  # a CUDA context and PyTorch's kernels on a Hopper GPU, beyond what the allocator reports
DDP_GRAD_BYTES = 4  # PyTorch DDP all-reduces the fp32 gradients of fp32 weights trained under bf16 autocast


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


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader([ln for ln in text.splitlines() if ln and not ln.startswith("#")]))


@cache
def catalog() -> dict[str, ModelProfile]:
    """All profiles by name: the calibrated table's in its order, then the LLM-scale ones."""
    text = resources.files("scheduler.core").joinpath("data/workloads.csv").read_text()
    return {p.name: p for p in map(profile_from_row, _rows(text))} | llm_profiles()


def llm_steps_by_gpu(path: Path) -> dict[str, dict[str, list[dict[str, str]]]]:
    """The measured table's rows by GPU, then by model; refuses a GPU with no speed in GPU_TYPES."""
    out: dict[str, dict[str, list[dict[str, str]]]] = defaultdict(lambda: defaultdict(list))
    for row in _rows(path.read_text()):
        if row["gpu"] not in MEASURED_GPUS:
            raise ValueError(f"{path}: {row['model']} was measured on {row['gpu']!r}; expected one of "
                             f"{', '.join(MEASURED_GPUS)}")
        out[row["gpu"]][row["model"]].append(row)
    return out


@cache
def llm_profiles(path: Path = LLM_STEPS_PATH) -> dict[str, ModelProfile]:
    """The LLM-scale profiles from the steps measured on `PROFILE_GPU`, averaged over runs:

    * compute_ms: the whole step (forward, backward, optimizer) times the measured GPU's speed over a V100's;
    * sm, membw: NVML's busy fractions during the steps (not fitted on co-location: these jobs take whole GPUs);
    * mem_gb: the peak PyTorch allocated plus the CUDA context;
    * grad_mb: fp32 gradients, 4 bytes a parameter, what a DDP all-reduce moves per step. With tensor and pipeline
      parallelism inside a server a much larger model's GPU holds a shard of this size (a 70B model over 8 x 4
      GPUs: 2.2B parameters), so these stand in for the data-parallel traffic per GPU of today's LLM runs too;
    * overlap: the backward pass's share of the step, the most of it DDP's bucketed all-reduce can hide under.
    """
    by_model = llm_steps_by_gpu(path).get(PROFILE_GPU, {})
    speed = GPU_TYPES[MEASURED_GPUS[PROFILE_GPU]].speed
    out: dict[str, ModelProfile] = {}
    for key, name in LLM_MODELS.items():
        rows = by_model.get(key)
        if not rows:
            continue

        def mean(col: str, rows: list[dict[str, str]] = rows) -> float:
            return statistics.fmean(float(r[col]) for r in rows)

        step = mean("step_ms")
        params = int(rows[0]["params"])
        out[name] = ModelProfile(
            name=name, kind=JobKind.TRAINING, compute_ms=round(step * speed, 1),
            sm=round(min(1.0, mean("gpu_busy")), 3), membw=round(min(1.0, mean("mem_busy")), 3),
            mem_gb=round(max(float(r["peak_mem_gib"]) for r in rows) + CUDA_CONTEXT_GB, 1),
            grad_mb=round(params * DDP_GRAD_BYTES / 1e6, 1), overlap=round(mean("backward_ms") / step, 3),
            source=(f"measured on an {PROFILE_GPU} (benchmarks/gpu_llm_profiles.py, {len(rows)} runs): batch "
                    f"{rows[0]['batch']} x {rows[0]['seq']} tokens, {step:.0f} ms a step, {mean('model_tflops'):.0f} "
                    "TFLOP/s; sm/membw: NVML busy fractions; overlap: the backward pass's share of the step"),
        )
    return out


def llm_speedup(gpu: str, path: Path = LLM_STEPS_PATH) -> float:
    """How many times faster `gpu` (NVML's name) trained the LLM-scale models than `PROFILE_GPU`: the geometric mean
    over the models measured on both of the ratio of their mean step times. The figure `GPU_TYPES` states a GPU's
    speed from where it was measured (the H200's: the H100's times this)."""
    rows = llm_steps_by_gpu(path)
    base, other = rows.get(PROFILE_GPU, {}), rows.get(gpu, {})
    both = [m for m in LLM_MODELS if base.get(m) and other.get(m)]
    if not both:
        raise ValueError(f"{path}: no model was measured on both {PROFILE_GPU} and {gpu}")
    return statistics.geometric_mean(
        statistics.fmean(float(r["step_ms"]) for r in base[m]) / statistics.fmean(float(r["step_ms"]) for r in other[m])
        for m in both)


def get(name: str) -> ModelProfile:
    try:
        return catalog()[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(catalog())}") from None


def training_models() -> list[str]:
    return [n for n, p in catalog().items() if p.kind is JobKind.TRAINING]


def inference_models() -> list[str]:
    return [n for n, p in catalog().items() if p.kind is JobKind.INFERENCE]

"""Elastic jobs: the sizes a job may run at, how fast it runs at each, and what a resize costs it.

A job gives `min_gpus` and `max_gpus` (and optionally the `sizes` it accepts) beside `num_gpus`, the size its work
(`duration_s`) is measured at: alone, packed, on the reference GPU. A data-parallel job keeps its per-GPU batch as it
grows (Ray Train's and torchrun's elastic default), so at size k it does k workers' samples per iteration and moves
through its work

    speedup(k) = (k / ref_iteration(k)) / (n / ref_iteration(n))

times as fast as at its reference size n, before contention. Compute divides; the all-reduce's traffic grows with the
size and the links it crosses (`ContentionModel.reference_iteration`, the same rule that prices every placement), so
scaling is sublinear, and a model whose gradients are large scales worse. On a placement the contention model's
slowdown (its iteration there over `ref_iteration(k)`) divides it further. Statistical efficiency (a larger global
batch needing more samples, Pollux's goodput) is not modelled: the speedup is an upper bound for such jobs.

A resize stops the job at a checkpoint and restarts it at the new size: it makes no progress for `resize_pause_s`,
the job's own figure or the model's default, fitted (`pause_fit`) from real resizes timed on an NVIDIA H200
(`benchmarks/gpu_resize.py`; the table `data/resize_pauses.csv`, with its provenance, from
`python -m scheduler.core.calibrate.resize --ingest`): a part that does not depend on the model (the old processes'
teardown, the new ones' interpreter, CUDA context and model build, the step in progress and the first step after the
resume) and the checkpoint's save and load, in proportion to the job's memory footprint. What the measurement did not
see adds to a real job's pause: the collective's rendezvous across nodes, a data loader's warm-up, checkpoints on
shared storage rather than a local disk's page cache (docs/elastic.md).
"""

from __future__ import annotations

import csv
import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from scheduler.core.jobs import JobKind, JobSpec

if TYPE_CHECKING:
    from scheduler.core.contention import ContentionModel
    from scheduler.core.workloads import ModelProfile

RESIZE_PAUSES_PATH = Path(str(resources.files("scheduler.core").joinpath("data/resize_pauses.csv")))
RESIZE_PAUSES_COLUMNS = ["workload", "params", "ckpt_mb", "footprint_gb", "change", "steady_before_ms",
                         "steady_after_ms", "signal_to_saved_s", "save_s", "stop_s", "mps_s", "restart_s", "python_s",
                         "cuda_init_s", "build_s", "load_s", "first_step_s", "warmup_extra_s", "pause_s"]
# The least time between two resizes of a job, unless its cluster says otherwise (`ClusterView.resize_interval_s`;
# `scheduler.core.resizing`, rule 3, says why this much).
RESIZE_INTERVAL_S = 600.0


def sized(spec: JobSpec, k: int) -> JobSpec:
    """`spec` running at `k` GPUs (what the contention model prices a run at that size by). ValueError for a size
    it does not accept."""
    choices = spec.size_choices()
    if k not in choices:
        said = f"{choices.start} to {choices.stop - 1}" if isinstance(choices, range) else str(list(choices))
        raise ValueError(f"{spec.name} runs at {said} GPUs, not {k}")
    return spec if k == spec.num_gpus else replace(spec, num_gpus=float(k))


def sizes_within(spec: JobSpec, lo: int, hi: int) -> Sequence[int]:
    """The sizes `spec` accepts from `lo` to `hi` (both included), smallest first, without reading the others: a job's
    bounds may be as wide as the API allows (8,192 GPUs), and the policies ask at every step of a plan."""
    choices = spec.size_choices()
    if isinstance(choices, range):
        return range(max(choices.start, lo), min(choices.stop, hi + 1))
    return choices[bisect_left(choices, lo):bisect_right(choices, hi)]


def speedup(model: ContentionModel, spec: JobSpec, k: int) -> float:
    """How many times as fast as at its reference size `spec` moves through its work at `k` GPUs, alone and packed
    (the module docstring's formula)."""
    n = spec.workers
    if k == n:
        return 1.0
    return (k / model.reference_iteration(sized(spec, k))) / (n / model.reference_iteration(spec))


def brought_down(model: ContentionModel, spec: JobSpec, k: int) -> JobSpec:
    """`spec` submitted at `k` GPUs, a size it accepts, instead of its `num_gpus`: the same work, its `duration_s` in
    `k`'s seconds (over `speedup(k)`), so that every size it later runs at is priced from there. Admission's rule for an
    elastic job larger than the cluster can ever hold (`scheduler.core.admission.Fit`); its reference size cannot be
    placed here, so its iteration there is priced without the all-reduce (`ContentionModel.reference_iteration`)."""
    return replace(sized(spec, k), duration_s=spec.duration_s / speedup(model, spec, k))


@dataclass(frozen=True)
class PauseFit:
    """The model's pause of a resize: `restart_s` whatever the job, and `checkpoint_s_per_gb` for each GB of its
    memory footprint (the checkpoint's save and load)."""

    restart_s: float
    checkpoint_s_per_gb: float
    resizes: int  # how many measured resizes it was fitted from

    def pause_s(self, footprint_gb: float) -> float:
        return self.restart_s + self.checkpoint_s_per_gb * footprint_gb


@cache
def measured_pauses() -> list[dict[str, float | str]]:
    """The rows of `data/resize_pauses.csv`: one per real resize (module docstring), numbers as floats."""
    lines = [ln for ln in RESIZE_PAUSES_PATH.read_text().splitlines() if ln and not ln.startswith("#")]
    return [{k: (v if k in ("workload", "change") else float(v)) for k, v in row.items()}
            for row in csv.DictReader(lines)]


@cache
def pause_fit() -> PauseFit:
    """The model's pause, fitted from the measured resizes by medians (a few slow first steps, cuDNN choosing its
    kernels again, must not set every job's pause): the part that does not depend on the checkpoint is each resize's
    pause less its save and load; the checkpoint's part is the save and load per GB of the workload's footprint."""
    rows = measured_pauses()
    if not rows:
        raise ValueError(f"{RESIZE_PAUSES_PATH}: no measured resize to fit the pause from")
    return PauseFit(
        restart_s=statistics.median(float(r["pause_s"]) - float(r["save_s"]) - float(r["load_s"]) for r in rows),
        checkpoint_s_per_gb=statistics.median((float(r["save_s"]) + float(r["load_s"])) / float(r["footprint_gb"])
                                              for r in rows),
        resizes=len(rows))


def resize_pause_s(spec: JobSpec, profiles: Mapping[str, ModelProfile]) -> float:
    """Seconds a resize stops `spec` for: its own `resize_pause_s`, or the measured model's (module docstring)."""
    if spec.resize_pause_s is not None:
        return spec.resize_pause_s
    return pause_fit().pause_s(profiles[spec.model].mem_gb)


def elastic_window(jobs: list[JobSpec], share: float, seed: int) -> list[JobSpec]:
    """A trace's jobs with `share` of their whole-GPU training jobs made elastic (`make_elastic`), drawn from
    `seed`: how `corral simulate --elastic` and `benchmarks/elastic.py` make a trace window an elastic mix (a synthetic
    workload draws its own, `synthetic:N,elastic=F`)."""
    if not 0 <= share <= 1:
        raise ValueError(f"elastic: the share of whole-GPU training jobs made elastic must be in [0, 1], got {share:g}")
    return make_elastic(jobs, share, np.random.default_rng([seed, 49]).random(len(jobs)).tolist())


def make_elastic(jobs: list[JobSpec], share: float, draws: Sequence[float]) -> list[JobSpec]:
    """`jobs` with each whole-GPU training job whose draw (one per job, uniform in [0, 1)) is under `share` made
    elastic from half to twice its size (at least one GPU): the elastic mix of issue 49's targets, for synthetic
    workloads (`elastic=F`) and trace windows alike. Inference services and GPU shares keep their one size."""
    return [
        replace(job, min_gpus=max(1, job.workers // 2), max_gpus=2 * job.workers)
        if u < share and job.kind is JobKind.TRAINING and job.num_gpus >= 1 and job.min_gpus is None else job
        for job, u in zip(jobs, draws, strict=True)
    ]

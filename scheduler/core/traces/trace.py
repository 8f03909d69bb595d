"""What every trace loader returns: a `Trace`, or a `TraceError`.

Every loader returns a `Trace`: `JobSpec`s sorted by arrival (ties keep file order) with submit times shifted so the
first kept job arrives at 0.0, plus a count of the rows it skipped and why. Bad data raises `TraceError` naming the
file, the 1-based line and the column; it never escapes as a traceback, because traces come from users and from third
parties whose files we do not control.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scheduler.core.model import JobKind, JobSpec, SpecError
from scheduler.core.workloads import catalog

SMALLEST_GPU_GB = 16.0  # memory of the smallest GPU in the shipped presets (T4, V100-16GB): fractional jobs fit in it


class TraceError(SpecError):
    """A trace that cannot be used; the message names the file, line and column."""


@dataclass(frozen=True)
class Trace:
    """Jobs to replay, sorted by submit time, the first at 0.0, and what the loader left out (reason -> count).

    `features`: a format's own columns of each job, as text, in the order of `jobs` (Alibaba's `ALIBABA_FEATURES`);
    empty when the format has none beyond what a `JobSpec` holds. They stay beside the jobs, not in them: no rule
    reads them, only learners of a trace (`scheduler.core.durations`).
    """

    name: str
    format: str
    jobs: list[JobSpec]
    skipped: dict[str, int] = field(default_factory=dict)
    source: str = ""
    features: tuple[dict[str, str], ...] = ()

    def __len__(self) -> int:
        return len(self.jobs)

    def describe(self) -> dict[str, object]:
        """A JSON-able summary, for `corral trace describe` and for checking a loader against a trace's README."""
        jobs = self.jobs
        n = len(jobs)
        gpus = np.fromiter((j.num_gpus for j in jobs), dtype=np.float64, count=n)
        dur = np.fromiter((j.duration_s for j in jobs), dtype=np.float64, count=n)
        whole = gpus >= 1
        sizes, counts = np.unique(gpus[whole].astype(np.int64), return_counts=True)
        profiles = catalog()
        over = sum(
            1 for j in jobs if j.num_gpus < 1 and j.model in profiles
            and profiles[j.model].mem_gb > j.num_gpus * SMALLEST_GPU_GB + 1e-9
        )
        models: dict[str, int] = {}
        for j in jobs:
            models[j.model] = models.get(j.model, 0) + 1
        return {
            "name": self.name,
            "format": self.format,
            "source": self.source,
            "jobs": n,
            "skipped": dict(self.skipped),
            "span_s": float(jobs[-1].submit_s - jobs[0].submit_s) if n else 0.0,
            "gpu_sizes": {str(int(s)): int(c) for s, c in zip(sizes, counts, strict=False)},
            "fractional": int((~whole).sum()),
            "inference": sum(1 for j in jobs if j.kind is JobKind.INFERENCE),
            "gpu_hours": float((gpus * dur).sum() / 3600.0),
            "median_duration_s": float(np.median(dur)) if n else 0.0,
            "models": dict(sorted(models.items())),
            "fractional_over_share_memory": over,
        }

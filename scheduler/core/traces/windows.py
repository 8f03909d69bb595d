"""Windows and offered load: the evaluation scenarios cut from a trace and sized to a load.

`window` cuts consecutive jobs out of a trace; `window_starts` keeps training windows before `HOLDOUT_FROM` and
evaluation windows after it; `offered_load`, `nodes_for_load`, `scale_to_load` and `fit_load` bring a window to a
target offered load by resizing the cluster or, where that cannot get close, rescaling arrival times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from scheduler.core.model import JobSpec
from scheduler.core.traces.trace import TraceError

# Trace windows starting at or after this fraction of a trace are held out: `corral train` never draws them, and the
# evaluations that report how a trained policy generalises draw only them.
HOLDOUT_FROM = 0.75


def window(jobs: Sequence[JobSpec], start: int, size: int) -> list[JobSpec]:
    """`size` consecutive jobs from index `start`, submit times shifted so the first arrives at 0.0."""
    if not 0 <= start < len(jobs):
        raise TraceError(f"window start {start} is outside the trace's {len(jobs)} jobs")
    chosen = list(jobs[start:start + size])
    t0 = chosen[0].submit_s
    return [replace(j, submit_s=j.submit_s - t0) for j in chosen]


def window_starts(n_jobs: int, size: int, part: str) -> tuple[int, int]:
    """Range [lo, hi) of window starts in `part` ("train": before the hold-out, "test": in it, "all")."""
    size = min(size, n_jobs)
    split = int(n_jobs * HOLDOUT_FROM)
    if part == "train":
        return 0, max(1, split - size + 1)
    if part == "test":
        return split, max(split + 1, n_jobs - size + 1)
    if part == "all":
        return 0, n_jobs - size + 1
    raise TraceError(f"unknown trace part {part!r}; choose train, test or all")


def offered_load(jobs: Sequence[JobSpec], num_gpus: float) -> float:
    """Mean GPUs busy per GPU over the window's arrival span, if every job started on arrival and ran its isolated
    duration: the utilisation the window asks of the cluster while it arrives.

    Only the part of each run inside the span counts. A long job that arrives late asks for little of this window
    (most of its work lands after it); counting all of its work would size clusters so large that nothing queues.
    """
    if len(jobs) < 2:
        return 0.0
    t0, t1 = jobs[0].submit_s, jobs[-1].submit_s
    span = max(t1 - t0, 1.0)
    busy = sum((min(j.submit_s + j.duration_s, t1) - j.submit_s) * j.gpu_demand for j in jobs)
    return busy / (span * num_gpus)


def nodes_for_load(jobs: Sequence[JobSpec], gpus_per_node: int, load: float, min_nodes: int = 1) -> int:
    """The node count whose offered load is closest to `load`, at least large enough for the biggest job."""
    if not load > 0:
        raise TraceError(f"load must be positive, got {load}")
    busy = offered_load(jobs, 1.0)
    biggest = max((j.workers for j in jobs), default=1)
    need = max(min_nodes, -(-biggest // gpus_per_node))
    ideal = busy / (load * gpus_per_node)
    lo = max(need, int(ideal))
    return min((lo, lo + 1), key=lambda n: abs(busy / (n * gpus_per_node) - load))


def scale_to_load(jobs: Sequence[JobSpec], num_gpus: int, load: float) -> list[JobSpec]:
    """Stretch or compress arrival times (not durations) until the offered load on `num_gpus` GPUs is `load`."""
    submit = np.array([j.submit_s for j in jobs])
    dur = np.array([j.duration_s for j in jobs])
    demand = np.array([j.gpu_demand for j in jobs])

    def load_at(factor: float) -> float:
        s = submit * factor
        span = max(s[-1] - s[0], 1.0)
        return float((np.minimum(s + dur, s[-1]) - s).clip(min=0) @ demand) / (span * num_gpus)

    lo, hi = 1e-4, 1e4  # load falls as arrivals are stretched: bisect the factor in log space
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if load_at(mid) > load else (lo, mid)
    factor = (lo * hi) ** 0.5
    return [replace(j, submit_s=j.submit_s * factor) for j in jobs]


@dataclass(frozen=True)
class LoadFit:
    """How a window was brought to a target offered load: the node count, the (possibly rescaled) jobs, and what
    was done, in words, for reports."""

    nodes: int
    jobs: list[JobSpec]
    load: float  # the offered load reached
    how: str


LOAD_TOLERANCE = 0.05  # resizing alone is accepted when it lands within 5% of the target


def fit_load(jobs: Sequence[JobSpec], gpus_per_node: int, load: float) -> LoadFit:
    """Bring `jobs` to offered load `load` on nodes of `gpus_per_node` GPUs: resize the cluster where that gets
    within `LOAD_TOLERANCE`, else rescale arrival times (durations unchanged) on the nearest node count.

    Resizing cannot always get there: a cluster cannot shrink below the node count its largest gang needs (Alibaba's
    8-GPU pods keep a pcie-t4 cluster at 2 nodes or more), and a few nodes are coarse steps (2 or 3 nodes is 1.5x).
    Then arrivals are compressed (or stretched) until the window asks for `load` of that cluster."""
    nodes = nodes_for_load(jobs, gpus_per_node, load)
    reached = offered_load(jobs, nodes * gpus_per_node)
    if reached > 0 and abs(reached / load - 1.0) <= LOAD_TOLERANCE:
        return LoadFit(nodes, list(jobs), reached, f"cluster resized to {nodes} nodes")
    scaled = scale_to_load(jobs, nodes * gpus_per_node, load)
    span, new_span = jobs[-1].submit_s - jobs[0].submit_s, scaled[-1].submit_s - scaled[0].submit_s
    factor = span / new_span if new_span > 0 else 1.0
    floor = -(-max(j.workers for j in jobs) // gpus_per_node)
    why = "its largest job's floor" if nodes == floor and reached < load else "the nearest size"
    verb = "compressed" if factor >= 1.0 else "stretched"
    return LoadFit(nodes, scaled, offered_load(scaled, nodes * gpus_per_node),
                   f"{nodes} nodes ({why}), arrivals {verb} {max(factor, 1 / factor):.2f}x")

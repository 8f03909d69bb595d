"""Jobs and placements: what a user submits (or a trace records), where its workers run, and its run-time record.
The simulator, the RL environment and the controller share them (`scheduler.core.model` names them too)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import numpy as np

from scheduler.core.constraints import Constraints
from scheduler.core.dependencies import Dependency


class GpuNodes(Protocol):
    """What a placement reads of a cluster (`scheduler.core.model.Cluster`, which imports this module)."""

    gpu_node: np.ndarray  # per GPU, its node

class JobKind(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"


DEFAULT_TEAM = "default"  # the team of jobs that name none (scheduler.core.tenancy: no quota, it only borrows)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a user submits (or a trace records). `num_gpus` is an integer >= 1 or a fraction in (0, 1).

    `duration_s` is the isolated run time: alone, packed as tightly as the cluster allows, on the cluster's reference
    GPU. For inference jobs it is the wall time the service stays up; contention raises its latency instead.
    """

    name: str
    submit_s: float
    num_gpus: float
    duration_s: float
    model: str
    kind: JobKind = JobKind.TRAINING
    user: str = ""
    priority: int = 0
    slo_ms: float | None = None
    compression: float = 1.0  # fraction of gradient bytes actually sent (gradient compression: < 1)
    team: str = DEFAULT_TEAM  # the tenant whose quota it runs under (scheduler.core.tenancy)
    preemptible: bool = True  # false: never preempted, and inside the tenancy frame it never borrows
    time_limit_s: float | None = None  # wall seconds a run may last before it is stopped (timed out); None: no limit
    # Offered to the policy only once these hold (`scheduler.core.dependencies`); a task of an array (its key), of
    # which at most `array_max_running` run at once.
    depends_on: tuple[Dependency, ...] = ()
    array: str | None = None
    array_max_running: int | None = None
    # Elastic (`scheduler.core.elastic`): runs on any whole number of GPUs from `min_gpus` to `max_gpus` (only the
    # `sizes` among them, when given); `num_gpus` is the size its `duration_s` is measured at. A resize pauses it for
    # `resize_pause_s` (a checkpoint and a restart; None: the model's default).
    min_gpus: int | None = None
    max_gpus: int | None = None
    sizes: tuple[int, ...] = ()
    resize_pause_s: float | None = None
    # Where it may run (`scheduler.core.constraints`): GPU type, node labels, node list, exclusion; None: anywhere
    # (what the hot paths test, and all they test, for a job without any).
    constraints: Constraints | None = None
    workers: int = field(init=False, repr=False, compare=False)  # gang size; a fractional job has one worker

    def __post_init__(self) -> None:
        if not (self.num_gpus > 0 and (self.num_gpus < 1 or float(self.num_gpus).is_integer())):
            raise ValueError(f"num_gpus must be an integer >= 1 or a fraction in (0, 1), got {self.num_gpus}")
        if not self.duration_s > 0:
            raise ValueError(f"duration_s must be positive, got {self.duration_s}")
        if not 0 < self.compression <= 1:
            raise ValueError(f"compression must be in (0, 1], got {self.compression}")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ValueError(f"time_limit_s must be positive, got {self.time_limit_s}")
        object.__setattr__(self, "workers", max(1, int(self.num_gpus)))  # hot in every policy: computed once
        if self.min_gpus is not None or self.max_gpus is not None or self.sizes or self.resize_pause_s is not None:
            self._check_elastic()

    def _check_elastic(self) -> None:
        lo, hi = self.min_gpus, self.max_gpus
        if lo is None or hi is None:
            raise ValueError("min_gpus and max_gpus go together: give both, or neither for a job of one size")
        if self.num_gpus < 1:
            raise ValueError(f"min_gpus: an elastic job runs on whole GPUs; num_gpus is {self.num_gpus:g}")
        if not 1 <= lo <= self.num_gpus <= hi:
            raise ValueError(f"min_gpus <= num_gpus <= max_gpus must hold with min_gpus >= 1, got {lo} <= "
                             f"{self.num_gpus:g} <= {hi}")
        if self.sizes:
            if list(self.sizes) != sorted(set(self.sizes)):
                raise ValueError(f"sizes must be distinct and increasing, got {list(self.sizes)}")
            if self.sizes[0] < lo or self.sizes[-1] > hi or int(self.num_gpus) not in self.sizes:
                raise ValueError(f"sizes must lie within min_gpus..max_gpus ({lo}..{hi}) and include num_gpus "
                                 f"({self.num_gpus:g}), got {list(self.sizes)}")
        if self.resize_pause_s is not None and not self.resize_pause_s >= 0:
            raise ValueError(f"resize_pause_s must be >= 0, got {self.resize_pause_s}")

    @property
    def elastic(self) -> bool:
        """Whether it may run at more than one size."""
        return self.min_gpus is not None and self.max_gpus is not None and self.min_gpus < self.max_gpus and (
            not self.sizes or len(self.sizes) > 1)

    def size_choices(self) -> Sequence[int]:
        """The sizes it may run at, smallest first: its `sizes`, every size from `min_gpus` to `max_gpus` (a range:
        a trace may give any bounds, and asking whether a size is in it reads none), or its one size."""
        if self.sizes:
            return self.sizes
        if self.min_gpus is not None and self.max_gpus is not None:
            return range(self.min_gpus, self.max_gpus + 1)
        return (self.workers,)

    @property
    def share(self) -> float:
        """Share of each of its GPUs: 1.0 for whole GPUs."""
        return self.num_gpus if self.num_gpus < 1 else 1.0

    @property
    def gpu_demand(self) -> float:
        return float(self.num_gpus)


@dataclass(frozen=True, slots=True)
class Placement:
    """The GPUs a job's workers run on (one per worker, distinct) and the share of each it holds."""

    gpus: tuple[int, ...]
    share: float = 1.0

    def nodes(self, cluster: GpuNodes) -> list[int]:
        return sorted({int(cluster.gpu_node[g]) for g in self.gpus})


class JobPhase(StrEnum):
    """Where a job is in the simulator's (and the controller's model's) life cycle. The live service's states, with
    failures and cancels, are `scheduler.live.job_states.JobState`."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    REJECTED = "rejected"
    TIMED_OUT = "timed_out"  # its run reached its time limit and was stopped
    CANCELLED = "cancelled"  # a dependency that can never be met


class Job:
    """A job's run-time record. The simulator and controller write it; policies only read it."""

    __slots__ = (
        "attained_gpu_s",
        "end_s",
        "first_start_s",
        "id",
        "last_update",
        "placement",
        "preemptions",
        "queued_since",
        "rate",
        "reject_reason",
        "resized_s",
        "resizes",
        "run_time",
        "slo_violation_s",
        "slowdown_time",
        "spec",
        "speedup",
        "start_s",
        "state",
        "submitted",
        "work_left",
    )

    def __init__(self, job_id: int, spec: JobSpec, work: float) -> None:
        self.id = job_id
        self.spec = spec
        self.state = JobPhase.PENDING
        self.placement: Placement | None = None
        self.work_left = work  # isolated seconds still to run
        self.rate = 1.0  # progress per second of wall time (1 / predicted slowdown)
        self.last_update = spec.submit_s
        self.attained_gpu_s = 0.0  # GPU-seconds of service so far (Tiresias' 2D attained service)
        self.start_s: float | None = None  # start of the current run
        self.first_start_s: float | None = None
        self.end_s: float | None = None
        self.preemptions = 0
        self.reject_reason = ""
        self.slowdown_time = 0.0  # integral of (1/rate) dt while running, for the average contention slowdown
        self.run_time = 0.0
        self.slo_violation_s = 0.0
        self.queued_since = spec.submit_s
        # An elastic job running at another size than it was submitted at: `spec` is the sized spec (what every
        # reader of a running job's GPUs reads), `submitted` the spec as submitted, put back when the run stops, and
        # `speedup` its work rate at this size over the rate at `submitted.num_gpus` (`scheduler.core.elastic`).
        self.submitted: JobSpec | None = None
        self.speedup = 1.0
        # When the current run last changed size (None: not since it started), and how many times it did
        # (`scheduler.core.resizing`): its service since then is at its present size.
        self.resized_s: float | None = None
        self.resizes = 0

    @property
    def sized_since(self) -> float | None:
        """When its run began holding the GPUs it holds now (its start, or its last resize); None: not running."""
        return self.resized_s if self.resized_s is not None else self.start_s

    def __repr__(self) -> str:
        return f"Job({self.id}, {self.spec.name}, {self.state}, gpus={self.spec.num_gpus})"


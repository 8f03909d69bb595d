"""What a replay starts from beside its trace (`Placed`: jobs already running) and what it returns (`SimResult`);
`scheduler.core.simulator` names both too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler.core.model import Job, JobPhase, JobSpec, Placement
from scheduler.core.tenancy import Isolated


@dataclass(frozen=True, slots=True)
class Placed:
    """A job already running when the simulation starts: it holds `placement` from t=0 with `work_left` isolated
    seconds to go (wall seconds for an inference service) and `attained_gpu_s` of service so far (Tiresias)."""

    spec: JobSpec
    placement: Placement
    work_left: float
    attained_gpu_s: float = 0.0


@dataclass
class SimResult:
    policy: str
    jobs: list[Job]
    metrics: dict[str, float]
    wall_s: float
    events: int
    pending_reasons: dict[int, str] = field(default_factory=dict)
    teams: dict[str, Any] | None = None  # with teams: per team, Jain's index, Themis' rho (TeamLedger.report)
    isolated: Isolated | None = None  # with teams, from run(): each job's JCT with its team alone on its quota

    def jct(self) -> np.ndarray:
        return np.array([j.end_s - j.spec.submit_s for j in self.jobs
                         if j.state is JobPhase.DONE and j.end_s is not None], dtype=float)

"""A controller that restarts while an elastic job runs at a size it was resized to adopts the run as one run: its
time limit still counts from its first workers, the resize interval from its last resize, and its attained service
includes what it had before the resize. Without Ray (a backend whose workers start at once and are adopted), on SQLite
and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

from conftest import StartingBackend

from policies import make_policy
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.runs import JobStatus, Launch
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job as JobRow

NAMES = ["n0"]
GPUS = 4


class Adopting(StartingBackend):
    """Workers survive a controller: a restarted one adopts every run the backend still has. Runs named in `ended`
    report success at the next poll."""

    def __init__(self) -> None:
        super().__init__(NAMES, GPUS)
        self.ended: set[int] = set()

    def adopt(self, launch: Launch) -> bool:
        # As Ray's backend finds workers: by job, attempt and rank (`actor_name`).
        run = self.launches.get(launch.job_id)
        return run is not None and run.attempt == launch.attempt and len(run.ranks) == len(launch.ranks)

    def poll(self) -> list[JobStatus]:
        now = time.time()
        return [st if st.job_id not in self.ended else JobStatus(
            job_id=st.job_id, attempt=st.attempt, phase="succeeded", started_at=st.started_at,
            ended_at=[now] * len(st.started_at), exit_codes=[0] * len(st.started_at), done_s=0.0, error="")
            for st in super().poll()]


def controller(store: Store, backend: Adopting) -> Controller:
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [GPUS]), NAMES, make_policy,
                     default_policy="marginal-gain", tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    return ctl


def steps(ctl: Controller, n: int) -> None:
    for _ in range(n):
        ctl._last_poll = 0.0  # poll every pass
        ctl.step()


def test_a_resized_run_is_adopted_as_the_run_it_was(store: Store, corral_home: Path) -> None:
    backend = Adopting()
    ctl = controller(store, backend)
    with store.session(write=True) as s:
        ann = q.ensure_user(s, "ann")
        rigid = q.submit(s, ann, {"name": "rigid", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 2,
                                  "duration_s": 600.0})[0].id
    steps(ctl, 2)
    with store.session(write=True) as s:
        job_id = q.submit(s, q.ensure_user(s, "ann"), {
            "name": "grows", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 2, "min_gpus": 2,
            "max_gpus": 4, "duration_s": 36000.0, "time_limit_s": 7200.0})[0].id
    steps(ctl, 3)
    assert len(ctl.m.running[job_id].placement.gpus) == 2  # type: ignore[union-attr]  # all that was free
    # The rigid job ends: marginal-gain grows the elastic one into its GPUs (its gain dwarfs its pause).
    backend.ended.add(rigid)
    for _ in range(20):
        ctl._last_poll = 0.0  # poll every pass
        ctl.step()
        job = ctl.m.running.get(job_id)
        if job is not None and job.resized_s is not None and ctl.m.started.get(job_id):
            break
    job = ctl.m.running[job_id]
    assert job.resized_s is not None and job.resizes == 1 and len(job.placement.gpus) == 4  # type: ignore[union-attr]
    with store.session() as s:
        row = s.get(JobRow, job_id)
        assert row is not None and row.attempt == 2 and row.started_at is not None
        first_start, latest_workers = row.first_started_at, row.started_at
    assert first_start is not None and latest_workers >= job.resized_s
    before = (job.start_s, job.resized_s, job.attained_gpu_s, job.resizes)
    assert before[0] == first_start  # the run's start: its time limit counts from here

    restarted = controller(store, backend)  # the old one is simply dropped; its workers live on
    adopted = restarted.m.running[job_id]
    assert (adopted.start_s, adopted.resized_s, adopted.attained_gpu_s, adopted.resizes) == before
    assert adopted.sized_since == job.resized_s and len(adopted.placement.gpus) == 4  # type: ignore[union-attr]

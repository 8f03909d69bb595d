"""When the controller asks its policy: as the simulator does, when something the policy sees changed (a submission,
a cancel, a start, an end, a node, the policy or the teams) or at a time the policy asked to be woken, not at every
tick. Without Ray (a backend whose workers start at once and never end), on SQLite."""

from __future__ import annotations

import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from conftest import StartingBackend

from policies.heuristics import Fifo
from scheduler.core.decisions import Decision, WakeAt
from scheduler.core.model import Job
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.runs import JobStatus
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import Team

NAMES = ["n0", "n1"]
GPUS = 2


class Counting:
    """FIFO that counts its calls and, when told, asks to be woken at a time."""

    name = "counting"
    oracle = False

    def __init__(self) -> None:
        self.inner = Fifo()
        self.calls = 0
        self.wake_at: float | None = None

    def schedule(self, view: Any, queue: Collection[Job], now: float) -> list[Decision]:
        self.calls += 1
        out = self.inner.schedule(view, queue, now)
        return out + [WakeAt(self.wake_at)] if self.wake_at is not None else out


class Ending(StartingBackend):
    """Runs named in `ended` report success at the next poll."""

    def __init__(self) -> None:
        super().__init__(NAMES, GPUS)
        self.ended: set[int] = set()

    def poll(self) -> list[JobStatus]:
        out = super().poll()
        for i, st in enumerate(out):
            if st.job_id in self.ended:
                out[i] = JobStatus(job_id=st.job_id, attempt=st.attempt, phase="succeeded",
                                   started_at=st.started_at, ended_at=[time.time()] * len(st.started_at),
                                   exit_codes=[0] * len(st.started_at), done_s=0.0, error="")
        return out


def submit(store: Store, n: int, name: str = "j") -> list[int]:
    with store.session(write=True) as s:
        user = q.ensure_user(s, "ann")
        return [q.submit(s, user, {"name": f"{name}-{i}", "kind": "emulated", "model": "ResNet-50-bs64",
                                   "num_gpus": 1, "duration_s": 600.0})[0].id for i in range(n)]


def steps(ctl: Controller, n: int) -> None:
    for _ in range(n):
        ctl._last_poll = 0.0  # poll every pass
        ctl.step()


def test_the_policy_is_asked_when_what_it_sees_changes_not_at_every_pass(store: Store, corral_home: Path) -> None:
    policy = Counting()
    backend = Ending()
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [GPUS] * len(NAMES)), NAMES,
                     lambda name: policy, default_policy="counting", tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    first = submit(store, 6)  # 4 GPUs: 4 run, 2 wait
    steps(ctl, 3)  # placed, then their workers report started: both change what the policy sees
    assert len(ctl.running) == 4 and len(ctl.pending) == 2
    settled = policy.calls
    steps(ctl, 10)
    assert policy.calls == settled, "nothing changed, yet the policy was asked again"

    submit(store, 1, "late")  # a submission
    steps(ctl, 1)
    assert policy.calls > settled
    settled = policy.calls
    steps(ctl, 5)
    assert policy.calls == settled

    ctl.ask_next_pass()  # told to: the next pass asks though nothing changed, and the one after does not
    steps(ctl, 2)
    assert policy.calls == settled + 1

    backend.ended.add(first[0])  # an end: its GPU goes to the next in line
    steps(ctl, 3)
    assert policy.calls > settled and first[4] in ctl.running
    settled = policy.calls

    with store.session(write=True) as s:  # a cancel of a pending job
        q.cancel(s, s.get(JobRow, first[5]))  # type: ignore[arg-type]
    steps(ctl, 1)
    assert policy.calls > settled and first[5] not in ctl.pending
    settled = policy.calls

    policy.wake_at = time.time() + 0.3  # the policy asks to be woken: asked then, with nothing else changed
    submit(store, 1, "wake")
    steps(ctl, 1)
    settled = policy.calls
    policy.wake_at = None
    steps(ctl, 2)
    assert policy.calls == settled
    time.sleep(0.35)
    steps(ctl, 1)
    assert policy.calls == settled + 1

    with store.session(write=True) as s:  # a team with a quota: the policy is framed anew, and asked
        now = time.time()
        s.add(Team(name="A", quota_gpus=2.0, borrow_limit_gpus=None, created_at=now, updated_at=now))
    steps(ctl, 1)
    assert policy.calls > settled
    settled = policy.calls
    steps(ctl, 5)
    assert policy.calls == settled

    ctl.ask_next_pass()  # told to: the next pass asks though nothing changed, and the one after does not
    steps(ctl, 2)
    assert policy.calls == settled + 1

"""The controller inside the tenancy frame, without Ray (a backend whose workers start at once and never end): when
the frame applies, quota changes at the next pass, fair share carried over a change and rebuilt from the store's
history after a restart, and a reclaim through the controller's own preemption path. On SQLite and PostgreSQL."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from conftest import StartingBackend
from sqlalchemy import select

from policies import make_policy
from scheduler.core.tenancy import TenancyFrame
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Allocation, Job, JobEvent, Team

NAMES = ["n0", "n1"]
GPUS = 4
HALF_LIFE_S = 3600.0


def controller(store: Store, backend: StartingBackend) -> Controller:
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [GPUS] * len(NAMES)), NAMES, make_policy,
                     default_policy="fifo", tick_s=0.1, preset="dgx-a100", half_life_s=HALF_LIFE_S)
    ctl.recover()
    return ctl


def set_teams(store: Store, quotas: dict[str, float]) -> None:
    with store.session(write=True) as s:
        now = time.time()
        for name, quota in quotas.items():
            team = q.team_by_name(s, name)
            if team is None:
                s.add(Team(name=name, quota_gpus=quota, borrow_limit_gpus=None, created_at=now, updated_at=now))
            else:
                team.quota_gpus = quota


def submit(store: Store, user: str, team: str, n: int, gpus: float = 1.0) -> list[int]:
    with store.session(write=True) as s:
        u = q.ensure_user(s, user, team=team)
        return [q.submit(s, u, {"name": f"{user}-{i}", "kind": "emulated", "model": "ResNet-50-bs64",
                                "num_gpus": gpus, "duration_s": 600.0})[0].id for i in range(n)]


def states(store: Store, ids: list[int]) -> list[str]:
    with store.session() as s:
        return [s.get(Job, i).state for i in ids]  # type: ignore[union-attr]


def steps(ctl: Controller, n: int = 3) -> None:
    for _ in range(n):
        ctl._last_poll = 0.0  # poll every pass: the workers report started
        ctl.step()


def test_no_frame_until_a_team_has_a_quota_then_the_next_pass_applies_it(store: Store, corral_home: Path) -> None:
    backend = StartingBackend(NAMES, GPUS)
    ctl = controller(store, backend)
    assert not isinstance(ctl.policy, TenancyFrame)  # only `default`: the policy alone, as before teams
    set_teams(store, {"A": 4.0, "B": 4.0})
    a = submit(store, "ann", "A", 8)
    steps(ctl)
    assert isinstance(ctl.policy, TenancyFrame) and ctl.policy.name == "fifo"
    assert states(store, a) == ["running"] * 8  # A borrows B's idle quota
    b = submit(store, "ben", "B", 4)
    steps(ctl)
    assert states(store, b) == ["running"] * 4
    assert sorted(states(store, a)) == ["pending"] * 4 + ["running"] * 4
    with store.session() as s:
        preempted = s.scalars(select(JobEvent).where(JobEvent.kind == "preempted")).all()
        reasons = {s.get(Job, i).pending_reason for i in a if s.get(Job, i).state == "pending"}  # type: ignore[union-attr]
    # Youngest first: fifo placed A's jobs in order, so the last four are the ones reclaimed.
    assert sorted(e.job_id for e in preempted) == a[4:]
    assert all("reclaimed for team B" in e.message for e in preempted)
    assert reasons == {("team A holds 4 GPUs, all of its 4-GPU quota; the job needs 1, beyond its quota, so it must "
                        "borrow: waiting for idle GPUs to lend, 0 may be lent now (0 free)")}
    assert sorted(backend.stopped) == a[4:]


def test_a_quota_change_keeps_the_fair_share_usage(store: Store, corral_home: Path) -> None:
    ctl = controller(store, StartingBackend(NAMES, GPUS))
    set_teams(store, {"A": 4.0, "B": 4.0})
    submit(store, "ann", "A", 4)
    steps(ctl)
    frame = ctl.policy
    assert isinstance(frame, TenancyFrame)
    time.sleep(0.2)
    submit(store, "ann", "A", 1)  # a pending job: the frame is asked again and integrates A's usage
    steps(ctl, 1)
    used = frame.share.usage["A"]
    assert used > 0.5  # 4 GPUs for over 0.2 s
    set_teams(store, {"A": 2.0})
    steps(ctl, 1)
    assert ctl.policy is not frame and isinstance(ctl.policy, TenancyFrame)
    assert ctl.policy.teams.teams["A"].quota_gpus == 2.0
    assert ctl.policy.share.usage["A"] >= used  # carried over (and counted further), not reset


def test_a_restarted_controller_rebuilds_fair_share_from_the_history(store: Store, corral_home: Path) -> None:
    set_teams(store, {"A": 4.0, "B": 4.0})
    now = time.time()
    with store.session(write=True) as s:
        user = q.ensure_user(s, "ann", team="A")
        job = Job(user_id=user.id, team="A", name="old", kind="emulated", model="ResNet-50-bs64", num_gpus=2,
                  duration_s=60, state="succeeded", submitted_at=now - 7200, queued_since=now - 7200,
                  finished_at=now - 3600)
        s.add(job)
        s.flush()
        # Two GPUs from two hours ago to one hour ago: 2 * h / ln 2 * (2^-1 - 2^-2) decayed GPU-seconds now.
        s.add_all([Allocation(job_id=job.id, attempt=1, rank=0, node="n0", gpu=g, local_gpu=g, share=1.0,
                              allocated_at=now - 7200, released_at=now - 3600) for g in (0, 1)])
    submit(store, "ben", "B", 1)
    ctl = controller(store, StartingBackend(NAMES, GPUS))
    assert isinstance(ctl.policy, TenancyFrame)
    expected = 2 * HALF_LIFE_S / math.log(2) * (0.5 - 0.25)
    assert ctl.policy.share.usage["A"] == pytest.approx(expected, rel=1e-3)
    assert ctl.policy.share.usage["B"] == 0.0
    # So B (lower usage over quota) comes first in the fair-share order.
    assert list(ctl.policy.standings(ctl.view, ctl.pending.values()))[:2] == ["B", "A"]

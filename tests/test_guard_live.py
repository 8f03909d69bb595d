"""The guard in the live service (issue 50, part 3): a guarded policy that loses hands its decisions to its fallback
in the controller, and the switch is on the active policy's row (`GET /policies`, the dashboard), in the metrics and
in the log. Without Ray (a backend whose workers start at once and run until stopped), on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import StartingBackend

from policies.guarded import Guarded
from scheduler.core.guard import GuardSettings
from scheduler.live import metrics
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.store import JobState, Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job as JobRow
from web import create_app

NAMES = ["n0"]
GPUS = 4
SETTINGS = GuardSettings(threshold=1.02, min_windows=3, keep=6, alpha=0.05, every_jobs=5)


def submit(store: Store, name: str, gpus: int, duration_s: float) -> int:
    with store.session(write=True) as s:
        return q.submit(s, q.ensure_user(s, "ann"), {"name": name, "kind": "emulated", "model": "ResNet-50-bs64",
                                                     "num_gpus": gpus, "duration_s": duration_s})[0].id


def steps(ctl: Controller, n: int) -> None:
    for _ in range(n):
        ctl._last_poll = 0.0  # poll every pass
        ctl.step()


def test_a_losing_guarded_policy_hands_over_live_and_says_so(store: Store, corral_home: Path) -> None:
    guarded = Guarded("fifo", candidates=("fifo-backfill",), settings=SETTINGS)
    made: list[Any] = []

    def factory(name: str) -> Any:
        made.append(name)
        return guarded

    ctl = Controller(store, StartingBackend(NAMES, GPUS), build_live_cluster("dgx-a100", [GPUS]), NAMES, factory,
                     default_policy="guarded:fifo", tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    before = metrics.GUARD_SWITCHES.labels("fifo-backfill")._value.get()
    submit(store, "long", 2, 36000.0)  # holds half the GPUs for hours
    steps(ctl, 2)
    # Windows of arrivals: a 4-GPU job heads each, which cannot start while "long" runs, and short 1-GPU jobs follow,
    # which FIFO holds behind it and backfilling starts on the idle GPUs.
    small: list[int] = []
    for w in range(8):
        submit(store, f"head-{w}", 4, 600.0)
        small += [submit(store, f"small-{w}-{i}", 1, 60.0) for i in range(4)]
        steps(ctl, 2)
        if guarded.rule.fallback is not None:
            break
    assert made == ["guarded:fifo"] and guarded.rule.fallback == "fifo-backfill"
    steps(ctl, 2)  # the fallback acts: the short jobs backfill onto the idle GPUs
    with store.session() as s:
        running = [r.id for r in s.query(JobRow).filter(JobRow.state == JobState.RUNNING)]
        assert set(small) & set(running)
        guard = q.active_policy_info(s)["guard"]
    assert guard["acting"] == "fifo-backfill" and guard["learned"] == "fifo" and guard["ratio"] > 1.02
    assert [w["to"] for w in guard["switches"]] == ["fifo-backfill"]
    assert "switched to fifo-backfill" in guard["switches"][0]["text"]
    assert metrics.GUARD_SWITCHES.labels("fifo-backfill")._value.get() == before + 1

    with store.session(write=True) as s:
        token = q.create_token(s, "root", admin=True)
    client = create_app(store).test_client()
    body = client.get("/api/v1/policies", headers={"Authorization": f"Bearer {token}"}).json
    assert body["active"] == "guarded:fifo" and body["guard"]["acting"] == "fifo-backfill"
    assert "guarded:rl:default" in body["available"]
    scraped = client.get("/metrics").text
    assert "corral_guard_fallback_acting 1.0" in scraped

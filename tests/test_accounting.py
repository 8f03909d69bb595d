"""Accounting (`GET /accounting`, `scheduler.live.accounting`): over a period, per user, team or UTC day, GPU-hours
held (share-weighted, clipped to the period, split at midnight), those held before the workers started, jobs ended
by state, waits, JCTs and preemptions; an admin sees all, a user their own and their team's; CSV as well; bad
periods are a 422 naming the field. On a store made by hand."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.live.store import JobState, Store, queries
from scheduler.live.store.models import Allocation, Job, JobEvent

MIDNIGHT = 1_767_225_600.0  # 2026-01-01 00:00 UTC
T0 = MIDNIGHT - 1800  # the period starts half an hour before midnight
HOUR = 3600.0


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    """alice and carol in team vision, bob in nlp, root an admin. alice's job held 2 GPUs [T0, T0+50 min), its workers
    up from T0+10 min, and succeeded then (submitted 20 min before T0); bob's holds half a GPU from T0+30 min on,
    started at once, preempted once at T0+40 min; carol's failed at T0+5 min without ever running."""
    from web import create_app

    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    with store.session(write=True) as s:
        for name, team in (("alice", "vision"), ("bob", "nlp"), ("carol", "vision")):
            if queries.team_by_name(s, team) is None:
                queries.create_team(s, team, 8, None)
            queries.ensure_user(s, name, team=team)
        tokens = {name: queries.create_token(s, name, admin=name == "root")
                  for name in ("alice", "bob", "carol", "root")}
        users = {u: queries.ensure_user(s, u) for u in ("alice", "bob", "carol")}
        base = {"kind": "emulated", "model": "ResNet-50-bs64", "duration_s": 3600.0}
        rows = {}
        for name, user, gpus in (("a", "alice", 2), ("b", "bob", 0.5), ("c", "carol", 1)):
            job, _ = queries.submit(s, users[user], {"name": name, "num_gpus": gpus, **base})
            s.flush()
            rows[name] = s.get(Job, job.id)
        a, b, c = rows["a"], rows["b"], rows["c"]
        a.submitted_at, a.first_started_at, a.finished_at, a.state = T0 - 1200, T0 + 600, T0 + 3000, JobState.SUCCEEDED
        b.submitted_at, b.first_started_at, b.state = T0 + 1800, T0 + 1800, JobState.RUNNING
        c.submitted_at, c.finished_at, c.state = T0 - 60, T0 + 300, JobState.FAILED
        for g in range(2):
            s.add(Allocation(job_id=a.id, attempt=1, rank=g, node="n0", gpu=g, local_gpu=g, share=1.0,
                             allocated_at=T0, released_at=T0 + 3000))
        s.add(Allocation(job_id=b.id, attempt=1, rank=0, node="n0", gpu=2, local_gpu=2, share=0.5,
                         allocated_at=T0 + 1800, released_at=None))
        s.add(JobEvent(job_id=a.id, at=T0 + 600, kind="started", message="", data={"attempt": 1}))
        s.add(JobEvent(job_id=b.id, at=T0 + 1800, kind="started", message="", data={"attempt": 1}))
        s.add(JobEvent(job_id=b.id, at=T0 + 2400, kind="preempted", message="", data={}))
    yield create_app(store), tokens
    store.close()


@pytest.fixture
def api(app: tuple[Any, dict[str, str]]) -> tuple[Any, dict[str, dict[str, str]]]:
    flask_app, tokens = app
    return flask_app.test_client(), {name: {"Authorization": f"Bearer {t}"} for name, t in tokens.items()}


def get(api: tuple[Any, dict[str, dict[str, str]]], who: str, path: str = "/accounting", **query: Any) -> Any:
    client, auth = api
    return client.get(f"/api/v1{path}", query_string=query, headers=auth[who])


def test_an_admin_sees_every_user_s_figures(api: tuple[Any, dict[str, dict[str, str]]]) -> None:
    r = get(api, "root", since=T0, until=T0 + HOUR, by="user")
    assert r.status_code == 200, r.json
    rows = {row["key"]: row for row in r.json["rows"]}
    assert set(rows) == {"alice", "bob", "carol"}
    a, b, c = rows["alice"], rows["bob"], rows["carol"]
    assert a["gpu_hours"] == pytest.approx(2 * 3000 / HOUR) and a["idle_gpu_hours"] == pytest.approx(2 * 600 / HOUR)
    assert (a["jobs_succeeded"], a["jobs_ended"], a["jct_p50_s"]) == (1, 1, 4200.0)
    assert (a["jobs_started"], a["wait_p50_s"]) == (1, 1800.0)
    assert b["gpu_hours"] == pytest.approx(0.5 * 1800 / HOUR) and b["idle_gpu_hours"] == 0
    assert (b["preemptions"], b["jobs_ended"], b["wait_p50_s"]) == (1, 0, 0.0)
    assert (c["jobs_failed"], c["gpu_hours"], c["jct_p50_s"]) == (1, 0.0, None)
    total = r.json["total"]
    assert total["gpu_hours"] == pytest.approx(2 * 3000 / HOUR + 0.25)
    assert total["jobs_ended"] == 2 and total["preemptions"] == 1


def test_by_team_and_by_day_split_the_same_hours(api: tuple[Any, dict[str, dict[str, str]]]) -> None:
    teams = {row["key"]: row for row in get(api, "root", since=T0, until=T0 + HOUR, by="team").json["rows"]}
    assert teams["vision"]["gpu_hours"] == pytest.approx(2 * 3000 / HOUR) and teams["vision"]["jobs_ended"] == 2
    assert teams["nlp"]["gpu_hours"] == pytest.approx(0.25)
    days = {row["key"]: row for row in get(api, "root", since=T0, until=T0 + HOUR, by="day").json["rows"]}
    assert set(days) == {"2025-12-31", "2026-01-01"}
    # alice's 2 GPUs: 30 min before midnight and 20 after, idle for the first 10 minutes (all before midnight).
    assert days["2025-12-31"]["gpu_hours"] == pytest.approx(1.0)
    assert days["2025-12-31"]["idle_gpu_hours"] == pytest.approx(2 * 600 / HOUR)
    assert days["2026-01-01"]["gpu_hours"] == pytest.approx(2 * 1200 / HOUR + 0.25)
    assert days["2026-01-01"]["idle_gpu_hours"] == 0
    assert days["2025-12-31"]["jobs_failed"] == 1 and days["2026-01-01"]["jobs_succeeded"] == 1


def test_a_user_sees_their_own_and_their_team_s_jobs_only(api: tuple[Any, dict[str, dict[str, str]]]) -> None:
    alice = get(api, "alice", since=T0, until=T0 + HOUR).json
    assert {row["key"] for row in alice["rows"]} == {"alice", "carol"}  # vision's; not bob's
    assert alice["total"]["gpu_hours"] == pytest.approx(2 * 3000 / HOUR) and alice["total"]["preemptions"] == 0
    bob = get(api, "bob", since=T0, until=T0 + HOUR, by="team").json
    assert [row["key"] for row in bob["rows"]] == ["nlp"]


def test_the_default_team_shares_nobody_s_figures(app: tuple[Any, dict[str, str]]) -> None:
    """Until an admin makes teams every user is in `default`: there a user sees their own jobs only."""
    from scheduler.live.accounting import Viewer, accounting

    flask_app, _ = app
    store = flask_app.extensions["corral.store"]
    with store.session(write=True) as s:
        for name in ("alice", "carol"):
            user = queries.ensure_user(s, name)
            s.query(Job).filter(Job.user_id == user.id).update({"team": "default"})
        alice = queries.ensure_user(s, "alice")
        seen = accounting(s, T0, T0 + HOUR, "user", Viewer(alice.id, False, "default"))
    assert [row["key"] for row in seen["rows"]] == ["alice"]


def test_the_table_counts_every_terminal_state() -> None:
    from scheduler.live.accounting_table import END_STATES

    assert set(END_STATES) == {s.value for s in JobState if s.terminal}


def test_csv_holds_the_rows_and_the_total(api: tuple[Any, dict[str, dict[str, str]]]) -> None:
    r = get(api, "root", "/accounting.csv", since=T0, until=T0 + HOUR, by="user")
    assert r.status_code == 200 and r.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(r.get_data(as_text=True))))
    assert [row["key"] for row in rows] == ["alice", "bob", "carol", "total"]
    assert float(rows[0]["gpu_hours"]) == pytest.approx(2 * 3000 / HOUR) and rows[2]["jct_p50_s"] == ""


@pytest.mark.parametrize(("query", "field"), [
    ({"since": T0, "until": T0}, "until"),
    ({"since": T0, "until": T0 + 400 * 86400}, "since"),
    ({"since": 0}, "since"),  # until now: decades, not at most a year
    ({"since": 4e9}, "until"),  # after now, the default end
    ({"by": "week"}, "by"),
    ({"since": "yesterday"}, "since"),
    ({"until": 1e12}, "until"),
])
def test_bad_periods_are_a_422_naming_the_field(api: tuple[Any, dict[str, dict[str, str]]], query: dict[str, Any],
                                                field: str) -> None:
    r = get(api, "root", **query)
    assert r.status_code == 422 and field in r.json["errors"]["query"], r.json


def test_corral_accounting_prints_a_table_csv_and_refuses_a_bad_date(app: tuple[Any, dict[str, str]]) -> None:
    from click.testing import CliRunner
    from conftest import served

    from scheduler.cli.commands import main

    flask_app, tokens = app
    with served(flask_app) as url:
        env = {"CORRAL_URL": url, "CORRAL_TOKEN": tokens["root"]}
        period = ["--since", "2025-12-31T23:30", "--until", "2026-01-01T00:30"]
        table = CliRunner().invoke(main, ["accounting", *period, "--by", "team"], env=env)
        assert table.exit_code == 0, table.output
        rows = {ln.split()[0]: ln.split() for ln in table.output.splitlines() if ln.split()[:1] in
                (["vision"], ["nlp"], ["total"])}
        assert rows["vision"][1:3] == ["1.67", "0.33"] and rows["nlp"][1] == "0.25" and rows["total"][1] == "1.92"
        assert "2025-12-31 23:30 to 2026-01-01 00:30 UTC, by team" in " ".join(table.output.split())
        as_csv = CliRunner().invoke(main, ["accounting", *period, "--csv"], env=env)
        assert as_csv.exit_code == 0 and as_csv.output.splitlines()[0].startswith("key,gpu_hours,idle_gpu_hours")
        assert [ln.split(",")[0] for ln in as_csv.output.splitlines()[1:]] == ["alice", "bob", "carol", "total"]
        bad = CliRunner().invoke(main, ["accounting", "--since", "yesterday"], env=env)
        assert bad.exit_code == 2 and "--since" in bad.output and "'yesterday'" in bad.output


def test_the_prometheus_counter_matches_the_accounting(app: tuple[Any, dict[str, str]]) -> None:
    """`corral_team_gpu_seconds_total` counts what accounting by team sums: alice's 2 GPUs for 50 minutes in
    vision, bob's half GPU still held in nlp (counting up to the scrape)."""
    import re

    flask_app, tokens = app
    client = flask_app.test_client()
    text = client.get("/metrics").get_data(as_text=True)
    value = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^corral_team_gpu_seconds_total\{team="([^"]+)"\} (\S+)$', text, re.MULTILINE)}
    report = client.get("/api/v1/accounting", query_string={"since": T0, "until": T0 + HOUR, "by": "team"},
                        headers={"Authorization": f"Bearer {tokens['root']}"}).json
    vision = next(row for row in report["rows"] if row["key"] == "vision")
    assert value["vision"] == pytest.approx(vision["gpu_hours"] * 3600) == pytest.approx(6000)
    assert value["nlp"] > 0.5 * 1800 and value["default"] == 0.0  # a team with no job: 0, not absent

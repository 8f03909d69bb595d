"""The dashboard's Teams page and the cluster map's team marks in a real browser (Playwright on Debian's
/usr/bin/chromium; skipped, saying why, as in tests/test_dashboard.py) against the app served from a thread over a
hand-made store (`test_stats.seed_teams`: vision with quota 4 lending 0.5 GPU to nlp, which holds 4.5 on a quota of
2), so every figure on the page is known. No controller runs: nothing moves while the page is read."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import HTTP_TIMEOUT_S, served, signed_in_page
from sqlalchemy import select
from test_stats import seed_teams

from scheduler.live.store import Store
from scheduler.live.store.models import Team


@dataclass
class Site:
    base: str
    token: str
    shots: Path


@pytest.fixture(scope="module")
def site(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from web import create_app

    home = tmp_path_factory.mktemp("dashboard-teams")
    store = Store.open(f"sqlite:///{home / 'corral.db'}")
    tokens = seed_teams(store, time.time())
    with store.session() as s:  # vision's members may rank higher than the built-in ceiling
        vision = s.scalars(select(Team).where(Team.name == "vision")).one()
        vision.max_priority, vision.allow_nonpreemptible = 100, True
    app = create_app(store, config={"FAIR_SHARE_HALF_LIFE_S": 600.0})
    with served(app) as url:
        yield Site(url, tokens["ann"], home / "screenshots")
    store.close()


@pytest.fixture
def page(browser: Any, site: Site) -> Iterator[Any]:
    with signed_in_page(browser, site.token) as pg:
        yield pg


def shoot(pg: Any, site: Site, name: str) -> None:
    site.shots.mkdir(exist_ok=True)
    pg.screenshot(path=str(site.shots / f"{name}.png"), full_page=True)


# A colour as the browser computes it (rgb(...)), whatever notation it was written in.
NORMALISE = """c => { const d = document.createElement('div'); d.style.color = c; document.body.appendChild(d);
  const v = getComputedStyle(d).color; d.remove(); return v; }"""


def test_teams_page_shows_each_teams_figures_and_charts(page: Any, site: Site) -> None:
    page.goto(f"{site.base}/#/teams")
    page.wait_for_selector("#teams-table tbody tr[data-team='vision']")
    assert page.locator("#nav a.on").inner_text() == "Teams"
    rows = page.eval_on_selector_all("#teams-table tbody tr", """rows => rows.map(r => [r.dataset.team,
      Object.fromEntries([...r.querySelectorAll('td')].map(td => [td.dataset.k, td.innerText.trim()]))])""")
    assert [name for name, _ in rows] == ["default", "nlp", "vision"]
    table = dict(rows)
    columns = ("quota_gpus", "borrow_limit_gpus", "in_use_gpus", "borrowed_gpus", "lent_gpus", "pending_jobs",
               "running_jobs")
    assert {k: table["vision"][k] for k in columns} == dict(zip(columns, ["4", "2", "2", "0", "0.5", "1", "1"], strict=False))
    assert {k: table["nlp"][k] for k in columns} == dict(zip(columns, ["2", "no limit", "4.5", "2.5", "0", "1", "2"], strict=False))
    assert {k: table["default"][k] for k in columns} == dict(zip(columns, ["0", "no limit", "0", "0", "0", "0",
                                                                           "0"], strict=False))
    assert table["default"]["usage_ratio"] == "no quota"
    assert (table["vision"]["priority_ceiling"], table["nlp"]["priority_ceiling"]) == ("≤ 100; non-preemptible", "≤ 0")
    # Fair share, as the API gives it (a few seconds may pass between the two reads: compare to the GPU-hour shown).
    api = requests.get(f"{site.base}/api/v1/stats/teams", headers={"Authorization": f"Bearer {site.token}"},
                       timeout=HTTP_TIMEOUT_S).json()
    for t in api["teams"]:
        assert float(table[t["name"]]["usage_gpu_h"]) == pytest.approx(t["usage_gpu_s"] / 3600, abs=0.011)
    # Usage over quota reads as time at full quota: nlp about 551 s (9 min 11 s), vision about 207 s (3 min 27 s).
    assert table["nlp"]["usage_ratio"].startswith("9 min") and table["vision"]["usage_ratio"].startswith("3 min")
    summary = " ".join(page.inner_text("#teams-summary").split())
    assert "3 teams" in summary and "quotas 6 of 8 GPUs" in summary and "half-life 10 min 00 s" in summary

    # Two charts: usage over quota for the teams with a quota, GPUs in use for every team; one colour per team,
    # the one its row's key shows.
    page.wait_for_selector("#chart-ratio svg.chart path")
    keys = {name: page.eval_on_selector(f"#teams-table tr[data-team='{name}'] .key i",
                                        "i => getComputedStyle(i).backgroundColor") for name in table}
    assert len(set(keys.values())) == 3
    for chart, names in (("#chart-ratio", ["nlp", "vision"]), ("#chart-in-use", ["default", "nlp", "vision"])):
        strokes = page.eval_on_selector_all(f"{chart} svg.chart path[fill='none']", "ps => ps.map(p => p.getAttribute"
                                            "('stroke'))")
        assert sorted({page.evaluate(NORMALISE, s) for s in strokes}) == sorted(keys[n] for n in names), chart
        assert page.locator(f"{chart} svg.chart text.empty").count() == 0, chart
        assert page.locator(f"{chart} .legend .key").all_inner_texts() == names, chart
    # The lines have height: vision's usage over quota peaks above zero, nlp's GPUs in use reach 4.33 at the end.
    heights = page.eval_on_selector_all("#chart-in-use svg.chart path[fill='none']",
                                        "ps => ps.map(p => p.getBBox().height)")
    assert max(heights) > 50, heights
    page.click("#team-windows button:has-text('15 min')")
    page.wait_for_timeout(500)
    assert page.locator("#chart-ratio svg.chart path[fill='none']").count() >= 2
    shoot(page, site, "teams")


def test_cluster_map_marks_each_tenant_with_its_team(page: Any, site: Site) -> None:
    page.goto(f"{site.base}/#/map")
    page.wait_for_selector(".tenant.teamed")
    tenants = page.eval_on_selector_all(".tenant", """els => els.map(e => ({job: +e.dataset.jobId,
      team: e.dataset.team, label: e.querySelector('.tteam') && e.querySelector('.tteam').innerText,
      stripe: getComputedStyle(e).getPropertyValue('--team').trim(), shadow: getComputedStyle(e).boxShadow}))""")
    assert sorted({(t["job"], t["team"], t["label"]) for t in tenants}) == [
        (2, "vision", "vision"), (3, "nlp", "nlp"), (4, "nlp", "nlp")]
    assert len(tenants) == 2 + 4 + 1  # job 2 on GPUs 0-1, job 3 on 4-7, job 4's share on GPU 2
    legend = page.eval_on_selector_all("#map-teams .key", """ks => ks.map(k => [k.dataset.team,
      getComputedStyle(k.querySelector('i')).backgroundColor])""")
    colours = dict(legend)
    assert sorted(colours) == ["nlp", "vision"] and colours["nlp"] != colours["vision"]
    for t in tenants:  # the stripe on the band's left edge is its team's legend colour
        rgb = page.evaluate(NORMALISE, t["stripe"])
        assert rgb == colours[t["team"]] and rgb in t["shadow"], t
    # The Teams page gives each team the same colour as the map does.
    page.click("#map-teams a[href='#/teams']")
    page.wait_for_selector("#teams-table tbody tr[data-team='vision']")
    for name, colour in colours.items():
        assert page.eval_on_selector(f"#teams-table tr[data-team='{name}'] .key i",
                                     "i => getComputedStyle(i).backgroundColor") == colour
    page.goto(f"{site.base}/#/map")
    page.wait_for_selector(".tenant.teamed")
    page.mouse.move(0, 0)
    shoot(page, site, "map-teams")

"""The dashboard at a thousand GPUs and on a phone (issue 51): the cluster map of 128 nodes x 8 GPUs fits a 1400x900
window with no horizontal scroll, a tile a node and a square a GPU, and a click opens one node's GPUs with their
tenants; at 390 px the Queue and Jobs pages are cards whose reasons read at full width. On a store made by hand,
served without Ray, in Debian's chromium."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import served

from scheduler.live.store import JobState, Store, queries
from scheduler.live.store.models import Allocation, Gpu, Job, Node

NODES, GPUS, PER_RACK = 128, 8, 16


@pytest.fixture
def big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """(the app's URL, an admin's token) on a store of 128 nodes in 8 racks, a job of one GPU on every other GPU of
    the first 64 nodes, and node n3 drained."""
    from web import create_app

    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    now = time.time()
    with store.session(write=True) as s:
        token = queries.create_token(s, "admin", admin=True)
        user = queries.ensure_user(s, "admin")
        for n in range(NODES):
            node = Node(name=f"n{n}", index=n, preset="dgx-a100", alive=True, updated_at=now, rack=f"r{n // PER_RACK}",
                        drained_at=now if n == 3 else None, drain_reason="maintenance" if n == 3 else None)
            node.gpus = [Gpu(index=GPUS * n + k, local_index=k, gpu_type="A100-80GB", mem_gb=80.0) for k in range(GPUS)]
            s.add(node)
        s.flush()
        for n in range(NODES // 2):
            for k in range(0, GPUS, 2):
                job, _ = queries.submit(s, user, {"name": f"j{n}-{k}", "kind": "emulated", "model": "ResNet-50-bs64",
                                                  "num_gpus": 1, "duration_s": 3600.0})
                s.flush()
                row = s.get(Job, job.id)
                assert row is not None
                row.state, row.attempt, row.predicted_slowdown = JobState.RUNNING, 1, 1.0 + 0.1 * (k % 4)
                s.add(Allocation(job_id=job.id, attempt=1, rank=0, node=f"n{n}", gpu=GPUS * n + k, local_gpu=k,
                                 share=1.0, allocated_at=now))
        for k in range(3):  # waiting, with reasons as long as real ones
            job, _ = queries.submit(s, user, {"name": f"wait-{k}", "kind": "emulated", "model": "ResNet-50-bs64",
                                              "num_gpus": 64, "duration_s": 3600.0})
            s.flush()
            row = s.get(Job, job.id)
            assert row is not None
            row.pending_reason = ("needs 64 whole GPUs on 8 nodes with memory enough; the most on one rack is 60 "
                                  "(rack r0), and topology waits up to a day for the fewest servers")
    with served(create_app(store)) as url:
        yield url, token
    store.close()


@contextmanager
def signed_in(browser: Any, token: str, width: int, height: int, **context: Any) -> Iterator[Any]:
    """A page of its own context (the page's Content-Security-Policy enforced: no bypass), signed in with `token`;
    on leaving, no JavaScript error may have happened on it."""
    ctx = browser.new_context(viewport={"width": width, "height": height}, **context)
    ctx.add_init_script(f"localStorage.setItem('corral.token', {token!r})")
    page = ctx.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        ctx.close()
    assert not errors, errors


def test_a_thousand_gpus_fit_the_window_and_a_click_opens_a_node(browser: Any, big: tuple[str, str]) -> None:
    url, token = big
    with signed_in(browser, token, 1400, 900) as page:
        page.goto(f"{url}/#/map")
        page.wait_for_selector(".node-tile[data-node=n127]")
        assert page.locator(".node-tile").count() == NODES
        assert page.locator(".node-tile .squares i").count() == NODES * GPUS
        assert page.locator("section.rack.compact").count() == NODES // PER_RACK
        width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"horizontal scroll: the page is {width[0]} px wide in a {width[1]} px window"
        # The map's tiles, not pages of cards: every node is within two windows' height.
        bottom = page.evaluate("() => document.querySelector('.node-tile[data-node=n127]').getBoundingClientRect()"
                               ".bottom + window.scrollY")
        assert bottom < 2 * 900, bottom
        assert page.locator(".node-tile[data-node=n3].drained").count() == 1
        assert page.locator(".node-tile[data-node=n0] i.free").count() == GPUS // 2
        assert page.locator(".node-tile[data-node=n100] i.free").count() == GPUS
        page.click(".node-tile[data-node=n5]")
        page.wait_for_selector("#map-node-detail .node[data-node=n5]")
        if os.environ.get("CORRAL_SHOTS"):  # a look at it: CORRAL_SHOTS=folder
            page.screenshot(path=str(Path(os.environ["CORRAL_SHOTS"]) / "map-1024.png"), full_page=True)
        detail = page.locator("#map-node-detail .node[data-node=n5]")
        assert detail.locator(".gpu").count() == GPUS and detail.locator(".tenant").count() == GPUS // 2
        assert "j5-0" in detail.inner_text()
        page.click(".node-tile[data-node=n5]")  # again: closed
        page.wait_for_selector("#map-node-detail .node", state="detached")


@pytest.mark.parametrize(("view", "table"), [("queue", "#queue-table"), ("jobs", "#jobs-table")])
def test_queue_and_jobs_read_on_a_phone(browser: Any, big: tuple[str, str], view: str, table: str) -> None:
    """390 px wide: no horizontal scroll, each job a card whose pending reason spans it (before: a column two
    characters wide, rows 430 px tall, columns cut without a cue)."""
    url, token = big
    with signed_in(browser, token, 390, 844) as page:
        page.goto(f"{url}/#/{view}")
        page.wait_for_selector(f"{table} tbody tr")
        if os.environ.get("CORRAL_SHOTS"):
            page.screenshot(path=str(Path(os.environ["CORRAL_SHOTS"]) / f"{view}-390.png"))
        width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"horizontal scroll: {width}"
        # One look, in one turn of the page's script: the view redraws its rows as the service's answers come, and
        # a row read box by box can be replaced between two reads (CI once saw the card's box gone, its cell's not).
        look = page.evaluate("""(sel) => {
            const row = document.querySelector(sel + ' tbody tr');
            const box = (el) => { const r = el.getBoundingClientRect(); return {width: r.width, height: r.height}; };
            return {card: box(row), reason: box(row.querySelector('td.reason')),
                    labels: [...row.cells].map((td) => getComputedStyle(td, '::before').content)};
        }""", table)
        card, reason, labels = look["card"], look["reason"], look["labels"]
        assert reason["width"] > 0.8 * card["width"] and card["width"] > 300, (reason, card)
        assert card["height"] < 330, card  # the reason wraps over a few lines, not forty
        assert '"GPUs"' in labels and '"User"' in labels, labels  # each value labelled


def test_the_accounting_page_draws_gpu_hours_and_downloads_csv(browser: Any, big: tuple[str, str]) -> None:
    """#/accounting: bars of GPU-hours per user, the figures in a table with the total, a chart per day, and the
    CSV the API gives, downloaded with the token (the page's policy enforced)."""
    url, token = big
    with signed_in(browser, token, 1400, 900, accept_downloads=True) as page:
        page.goto(f"{url}/#/accounting")
        page.wait_for_selector("#accounting-bars .bar-row[data-key=admin]")
        assert page.locator("#accounting-table tr[data-key=admin]").count() == 1
        assert "total" in page.inner_text("#accounting-table tr.total")
        with page.expect_download() as download:
            page.click("#accounting-csv")
        text = Path(download.value.path()).read_text()
        assert text.splitlines()[0].startswith("key,gpu_hours") and text.splitlines()[-1].startswith("total,")
        page.click("#accounting-by button[data-by=day]")
        page.wait_for_selector("#accounting-chart svg.chart")

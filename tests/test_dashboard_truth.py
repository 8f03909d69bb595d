"""Issue 26 item 4, "one truth on every page", in a real browser (Playwright on Debian's /usr/bin/chromium; skipped,
saying why, as in tests/test_dashboard.py) against the app served from a thread over a hand-made store, so every
figure is known and nothing moves: the durations' words (`Corral.duration`, held to the Python table), a preempted
job's last placement, one GPU numbering on the job page, the jobs list, the explanation and the map, no progress bar
for a command job, and the queue's estimates with how they were made."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import served, signed_in_page
from test_one_truth import DURATIONS

from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Allocation, Decision, Gpu, Job, Node, User


@dataclass
class Site:
    base: str
    token: str
    ids: dict[str, int]


def job_row(s: Any, user: User, name: str, gpus: float, now: float, **values: Any) -> Job:
    row = Job(user_id=user.id, name=name, kind="emulated", model="ResNet-50-bs64", num_gpus=gpus, duration_s=600.0,
              submitted_at=now - 300, queued_since=now - 300, env={})
    for k, v in values.items():
        setattr(row, k, v)
    s.add(row)
    s.flush()
    return row


def seed(store: Store, now: float) -> tuple[str, dict[str, int]]:
    with store.session() as s:
        token = q.create_token(s, "alice", admin=True)
    with store.session() as s:
        user = q.user_by_name(s, "alice")
        assert user is not None
        for n in range(3):
            node = Node(name=f"node{n}", index=n, preset="dgx-a100", updated_at=now - 3600)
            s.add(node)
            s.flush()
            for g in range(8):
                s.add(Gpu(node_id=node.id, index=n * 8 + g, local_index=g, gpu_type="A100-80GB", mem_gb=80.0))
        gang = job_row(s, user, "gang", 8, now, state="running", attempt=1, started_at=now - 200, progress=0.4,
                       predicted_slowdown=1.0)
        for g in range(8):
            s.add(Allocation(job_id=gang.id, attempt=1, rank=0, node="node2", gpu=16 + g, local_gpu=g, share=1.0,
                             allocated_at=now - 210))
        s.add(Decision(job_id=gang.id, at=now - 210, policy="fifo", action="place", reason="", gpus=list(range(16, 24)),
                       share=1.0, predicted_slowdown=1.0, latency_ms=1.0, candidates=[
                           {"gpus": list(range(16, 24)), "share": 1.0, "slowdown": 1.0, "others_added": 0.0},
                           {"gpus": list(range(4, 12)), "share": 1.0, "slowdown": 1.3, "others_added": 0.1}]))
        cmd = job_row(s, user, "cmd", 8, now, kind="command", entrypoint="sleep 1000", state="running", attempt=1,
                      started_at=now - 330, predicted_slowdown=1.0)
        for g in range(8):
            s.add(Allocation(job_id=cmd.id, attempt=1, rank=0, node="node1", gpu=8 + g, local_gpu=g, share=1.0,
                             allocated_at=now - 340))
        pre = job_row(s, user, "preempted", 2, now, state="pending", attempt=1, preemptions=1,
                      pending_reason="fits now: fifo chose to wait")
        for local in (0, 1):
            s.add(Allocation(job_id=pre.id, attempt=1, rank=0, node="node0", gpu=local, local_gpu=local, share=1.0,
                             allocated_at=now - 250, released_at=now - 100))
        q.add_event(s, pre.id, "preempted", "reclaimed for team nlp (under its quota)", at=now - 100)
        big = job_row(s, user, "big", 10, now, state="pending", pending_reason="waiting for 10 GPUs (8 free)")
        ids = {"gang": gang.id, "cmd": cmd.id, "preempted": pre.id, "big": big.id}
    return token, ids


@pytest.fixture(scope="module")
def site(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from web import create_app

    home = tmp_path_factory.mktemp("dashboard-truth")
    store = Store.open(f"sqlite:///{home / 'corral.db'}")
    token, ids = seed(store, time.time())
    app = create_app(store)
    with served(app) as url:
        yield Site(url, token, ids)
    store.close()


@pytest.fixture
def page(browser: Any, site: Site) -> Iterator[Any]:
    with signed_in_page(browser, site.token) as pg:
        yield pg


def test_durations_are_rounded_before_they_are_split(page: Any, site: Site) -> None:
    """Issue 26: "10 min 60 s" and "1 min 60 s ago". The same table as the Python words (`duration_text`), "–" for
    unknown where Python says "-"."""
    page.goto(f"{site.base}/#/map")
    page.wait_for_function("typeof Corral !== 'undefined'")
    for seconds, text in DURATIONS:
        want = "–" if seconds is None else text
        assert page.evaluate("s => Corral.duration(s)", seconds) == want, (seconds, text)
    got = page.evaluate("() => Corral.ago(Date.now() / 1000 - 119.7)")
    assert got in ("2 min 00 s ago", "2 min 01 s ago"), got


def test_a_preempted_job_shows_its_last_placement_and_why_it_stopped(page: Any, site: Site) -> None:
    page.goto(f"{site.base}/#/job/{site.ids['preempted']}")
    page.wait_for_selector("#last-placement")
    text = " ".join(page.inner_text("#job-placement").split())
    assert "Not placed yet" not in text
    assert "Not placed now. Last ran on node0: GPU 0-1 (cluster GPUs 0-1) (attempt 1)" in text, text
    assert "until it was preempted: reclaimed for team nlp (under its quota)" in text, text
    summary = page.inner_text("#explain .summary-text")
    assert "it last ran on node0: GPU 0-1 (cluster GPUs 0-1)" in summary, summary


def test_one_gpu_numbering_on_the_job_page_the_list_the_explanation_and_the_map(page: Any, site: Site) -> None:
    page.goto(f"{site.base}/#/job/{site.ids['gang']}")
    page.wait_for_selector("#placement-where")
    assert page.inner_text("#placement-where") == "node2: GPU 0-7 (cluster GPUs 16-23)"
    cells = page.eval_on_selector_all("#placement tbody td:nth-child(3)", "tds => tds.map(td => [td.innerText, "
                                      "td.title])")
    assert cells[0] == ["GPU 0", "cluster-wide GPU 16"] and cells[7] == ["GPU 7", "cluster-wide GPU 23"]
    page.wait_for_selector("#candidates")
    where = page.eval_on_selector_all("#candidates td.where", "tds => tds.map(td => td.innerText)")
    assert where == ["node2: GPU 0-7 (cluster GPUs 16-23)", "node0: GPU 4-7; node1: GPU 0-3 (cluster GPUs 4-11)"]
    assert "on node2: GPU 0-7 (cluster GPUs 16-23)" in page.inner_text("#explain .summary-text")

    page.goto(f"{site.base}/#/jobs")
    page.wait_for_selector(f"#jobs-table tr[data-job-id='{site.ids['gang']}'] .where")
    cell = page.locator(f"#jobs-table tr[data-job-id='{site.ids['gang']}'] .where")
    assert cell.inner_text() == "node2: GPU 0-7"
    assert cell.get_attribute("title") == "node2: GPU 0-7 (cluster GPUs 16-23)"

    page.goto(f"{site.base}/#/map")
    page.wait_for_selector(".gpu[data-gpu='16'] .gpu-head")
    head = page.locator(".gpu[data-gpu='16'] .gpu-head")
    assert head.locator("b").inner_text() == "GPU 0"
    assert head.locator(".cluster-gpu").inner_text() == "cluster 16"


def test_a_command_job_shows_no_progress_bar_but_how_long_it_runs(page: Any, site: Site) -> None:
    page.goto(f"{site.base}/#/job/{site.ids['cmd']}")
    page.wait_for_selector("#job-progress")
    assert page.locator("#job-head .progress").count() == 0
    text = " ".join(page.inner_text("#job-progress").split())
    assert text.startswith("running for 5 min") and "reports no progress" in text, text
    page.goto(f"{site.base}/#/job/{site.ids['gang']}")
    page.wait_for_selector("#job-head .progress")
    assert page.inner_text("#job-head .progress") == "40%"  # an emulated job's progress, as it reported


def test_the_queue_shows_estimates_and_how_they_were_made(page: Any, site: Site) -> None:
    page.goto(f"{site.base}/#/queue")
    page.wait_for_selector(f"#queue-table tr[data-job-id='{site.ids['big']}'] td.starts")
    page.wait_for_function("document.querySelector('#queue-basis').textContent.includes('replaying')")
    basis = " ".join(page.inner_text("#queue-basis").split())
    assert "replaying 2 running and 2 pending job(s) under rl:default in the simulator" in basis, basis
    # The preempted 2-GPU job fits node0 now; the 10-GPU one waits for the gang (360 s left at 40%) or the command job
    # (600 s estimate, 330 s up): the earliest, 270 s; never "now" beside "waiting for 10 GPUs (8 free)". The
    # replay asks the active policy (here the default, rl:default) and it starts them so.
    starts = page.inner_text(f"#queue-table tr[data-job-id='{site.ids['preempted']}'] td.starts")
    assert starts == "now", starts
    big = page.inner_text(f"#queue-table tr[data-job-id='{site.ids['big']}'] td.starts")
    assert big.startswith("in ≈ 4 min"), big

"""A job's page shows where it may run and what it runs in (issue 51): its constraints (GPU type, node labels, node
list, exclusion) and its environment (pip packages, a node's venv, a container image, an uploaded working directory
or a folder on the node), as labelled lines whose values are text, never markup; nothing for a job with neither; and
at 390 px the lines wrap with no horizontal scroll. Jobs submitted through the API to the app served from a thread
over a store of three nodes; in Debian's chromium (skipped, saying why, as in tests/test_dashboard.py), the page's
Content-Security-Policy enforced."""

from __future__ import annotations

import base64
import io
import os
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import served

from scheduler.live.cluster import ModelNode, model_cluster
from scheduler.live.nodes import register_nodes
from scheduler.live.runs import NodeInfo
from scheduler.live.store import Store
from scheduler.live.store import queries as q

LABELS = {"n0": (("zone", "a"),), "n1": (("zone", "a"),), "n2": (("zone", "b"),)}
COMMAND = {"kind": "command", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 60.0, "entrypoint": "true"}
# A folder on the node may be any path: a user's markup in it must read as text.
MARKUP_DIR = "/data/<b id=injected>bold</b>&amp;<img src=x onerror=alert(1)>"


@dataclass
class Site:
    url: str
    token: str
    ids: dict[str, int]


def _archive() -> str:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("train.py", "print('hi')\n" * 200)
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from web import create_app

    home = tmp_path_factory.mktemp("setup-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("CORRAL_HOME", str(home))
    store = Store.open(f"sqlite:///{home / 'corral.db'}")
    reported = [NodeInfo(n, 2, True, n, "", "dgx-a100", None, labels, ("torch",)) for n, labels in LABELS.items()]
    cluster = model_cluster([ModelNode(n, 2, "dgx-a100", None, labels) for n, labels in LABELS.items()])
    with store.session(write=True) as s:
        register_nodes(s, reported, cluster, list(LABELS), ["dgx-a100"] * 3, time.time())
        token = q.create_token(s, "ann")
    jobs = {
        "both": {**COMMAND, "name": "both", "constraints": {
            "gpu_type": "A100-80GB", "labels": {"zone": "a", "gpu": "a100"}, "nodes": ["n0", "n1"], "exclude": ["n2"]},
            "environment": {"pip": ["numpy>=1.26", "torch==2.4.*", "scipy[all]"], "working_dir": _archive()}},
        "image": {**COMMAND, "name": "image", "workdir": MARKUP_DIR,
                  "environment": {"image": "registry.example.com:5000/team/trainer:2026.11-cuda12"}},
        "venv": {**COMMAND, "name": "venv", "constraints": {"exclude": ["n2"]}, "environment": {"venv": "torch"}},
        "plain": {**COMMAND, "name": "plain"},
    }
    with served(create_app(store, config={"CORRAL_COMMAND_JOBS": "everyone"})) as url:
        ids = {}
        for key, body in jobs.items():
            r = requests.post(f"{url}/api/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"},
                              timeout=30)
            assert r.status_code == 201, r.text
            ids[key] = r.json()["id"]
        yield Site(url, token, ids)
    store.close()
    mp.undo()


@contextmanager
def job_page(browser: Any, site: Site, job: str, width: int = 1400, height: int = 900) -> Iterator[Any]:
    """Job `job`'s page, loaded, in a context of its own (CSP enforced); no JavaScript error may happen on it."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    ctx.add_init_script(f"localStorage.setItem('corral.token', {site.token!r})")
    page = ctx.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda d: errors.append(f"dialog: {d.message}") or d.dismiss())
    try:
        page.goto(f"{site.url}/#/job/{site.ids[job]}")
        page.wait_for_selector("#job-head h1")
        page.wait_for_selector("#timeline li")  # the page's other parts are in: a part shown late would be missed
        yield page
    finally:
        ctx.close()
    assert not errors, errors


def parts(page: Any, section: str) -> dict[str, str]:
    """The labelled lines of a section, by part (`data-part`): their text, whitespace folded."""
    found = page.eval_on_selector_all(f"{section} dd", "(dds) => dds.map((d) => [d.dataset.part, d.textContent])")
    return {part: " ".join(text.split()) for part, text in found}


def test_the_job_page_shows_its_constraints_and_environment(browser: Any, site: Site) -> None:
    with job_page(browser, site, "both") as page:
        where = parts(page, "#job-constraints")
        assert where == {"gpu_type": "A100-80GB", "labels": "gpu=a100 zone=a", "nodes": "n0 n1", "exclude": "n2"}
        assert page.locator("#job-constraints dt").all_inner_texts() == ["GPU type", "Node labels", "Only on",
                                                                         "Never on"]
        how = parts(page, "#job-environment")
        assert how["pip"] == "numpy>=1.26 torch==2.4.* scipy[all]"
        assert page.locator("#job-environment dd[data-part=pip] code").count() == 3  # a chip a package
        assert how["working_dir"].startswith("a folder uploaded with the job,") and "sha256 " in how["working_dir"]
        assert set(how) == {"pip", "working_dir"}
    with job_page(browser, site, "venv") as page:
        assert parts(page, "#job-constraints") == {"exclude": "n2"}
        assert parts(page, "#job-environment") == {"venv": "torch (the node's own)"}


def test_values_are_text_and_a_job_with_neither_shows_nothing(browser: Any, site: Site) -> None:
    with job_page(browser, site, "image") as page:
        how = parts(page, "#job-environment")
        assert how["image"] == "registry.example.com:5000/team/trainer:2026.11-cuda12"
        assert how["workdir"] == f"{MARKUP_DIR} (on the node)"  # the markup as its characters
        assert page.locator("#injected").count() == 0 and page.locator("#job-environment img").count() == 0
        assert page.locator("#job-constraints").count() == 0
    with job_page(browser, site, "plain") as page:
        assert page.locator(".job-setup, #job-constraints, #job-environment").count() == 0


@pytest.mark.parametrize("job", ["both", "image"])
def test_the_lines_wrap_on_a_phone(browser: Any, site: Site, job: str) -> None:
    with job_page(browser, site, job, 390, 844) as page:
        if (shots := os.environ.get("CORRAL_SHOTS")):
            page.screenshot(path=str(Path(shots) / f"job-setup-{job}-390.png"), full_page=True)
        width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"horizontal scroll: {width}"
        boxes = page.eval_on_selector_all(".job-setup dd", "(dds) => dds.map((d) => d.getBoundingClientRect().right)")
        assert boxes and all(right <= 390 for right in boxes), boxes
        tall = page.eval_on_selector_all(".job-setup dd", "(dds) => Math.max(...dds.map((d) => d.offsetHeight))")
        assert tall < 200, tall  # wrapped over a few lines, not a character a line

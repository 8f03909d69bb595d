"""The dashboard at `/`: served without a token and with no CDN (Flask test client), and driven in a real browser
(Playwright on Debian's /usr/bin/chromium) against a real `corral serve --nodes 4 --gpus-per-node 8` on a local Ray
cluster: sign in, submit from the form, find the job on the cluster map and its explanation, and a 32-GPU, 50-job map.

Screenshots go to tests/screenshots/ (gitignored). The browser tests skip, saying why, without chromium or playwright
(`make test` installs both; never `playwright install`: it downloads a browser of its own).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import ServeProcess, wait_until

from scheduler.store import Store, queries

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "web"
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
NODES, GPUS = 4, 8
TEXT_SUFFIXES = {".html", ".js", ".css", ".svg", ".json", ".txt", ".map"}


# ---- without a browser -------------------------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Any]:
    from web import create_app

    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    app = create_app(store)
    yield app.test_client()
    store.close()


def asset_urls(page: str) -> list[str]:
    return re.findall(r'(?:src|href)="(/static/[^"]+)"', page)


def test_page_and_assets_are_served_without_a_token(client: Any) -> None:
    r = client.get("/")
    assert r.status_code == 200 and r.mimetype == "text/html"
    page = r.get_data(as_text=True)
    urls = asset_urls(page)
    assert any(u.endswith(".js") for u in urls) and any(u.endswith(".css") for u in urls), urls
    for url in urls:
        asset = client.get(url)
        assert asset.status_code == 200, url
        asset.close()
    assert client.get("/api/v1/cluster").status_code == 401, "the data behind the page still needs a token"


def test_nothing_is_fetched_from_another_site(client: Any) -> None:
    """No CDN: neither the page nor any template or static file names an http(s) URL."""
    assert not re.search(r"https?://", client.get("/").get_data(as_text=True))
    files = [p for d in ("templates", "static") for p in (WEB / d).rglob("*") if p.suffix in TEXT_SUFFIXES]
    assert files
    offenders = [str(p.relative_to(ROOT)) for p in files if re.search(r"https?://", p.read_text(errors="replace"))]
    assert not offenders, f"files naming external URLs: {offenders}"


# ---- in a browser, against a real `corral serve` -----------------------------------------------------------------


class Service(ServeProcess):
    """`corral serve` with its own local Ray cluster of 4 virtual nodes x 8 virtual GPUs, SQLite under CORRAL_HOME."""

    def __init__(self, home: Path) -> None:
        store = Store.open(f"sqlite:///{home / 'corral.db'}")
        with store.session() as s:
            self.token = queries.create_token(s, "alice", admin=True)
        store.close()
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "RAY_ADDRESS")}
        env |= {"CORRAL_HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0"}
        super().__init__(home, ["--nodes", str(NODES), "--gpus-per-node", str(GPUS), "--tick", "0.2"], env)
        self.base = self.api.removesuffix("/api/v1")

    def get(self, path: str) -> Any:
        r = requests.get(f"{self.api}{path}", headers={"Authorization": f"Bearer {self.token}"}, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    def submit(self, **fields: Any) -> dict[str, Any]:
        r = requests.post(f"{self.api}/jobs", json=fields, headers={"Authorization": f"Bearer {self.token}"},
                          timeout=10)
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]


def browser_or_skip() -> Any:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent: install Debian's chromium (`apt-get install chromium`; `make test` does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: pip install -e '.[test]' (do not run `playwright install`)")
    return sync_playwright


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_playwright = browser_or_skip()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def service(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = Service(tmp_path_factory.mktemp("dashboard"))
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def page(browser: Any, service: Service) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def shoot(pg: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    pg.screenshot(path=str(path), full_page=True)
    return path


def sign_in(pg: Any, service: Service) -> None:
    pg.goto(f"{service.base}/#/signin")
    pg.fill("#token", service.token)
    pg.click("#signin-form button")
    pg.wait_for_selector(".node .gpu")


def test_sign_in_refuses_a_bad_token_then_accepts_a_good_one(page: Any, service: Service) -> None:
    page.goto(f"{service.base}/")
    page.wait_for_selector("#signin-form")  # no token yet: every route leads here
    page.fill("#token", "corral_not-a-real-token")
    page.click("#signin-form button")
    page.wait_for_function("document.querySelector('#signin-message').textContent.includes('401')")
    assert "refused" in page.inner_text("#signin-message")
    sign_in(page, service)
    assert page.evaluate("localStorage.getItem('corral.token')") == service.token
    page.wait_for_function(f"document.querySelectorAll('.gpu').length === {NODES * GPUS}")
    assert page.locator(".node").count() == NODES
    # A token revoked or wrong later: the next call's 401 sends the user back to sign in, saying why.
    page.evaluate("localStorage.setItem('corral.token', 'corral_revoked')")
    page.wait_for_selector("#signin-form", timeout=10_000)
    assert "401" in page.inner_text("#signin-message")
    sign_in(page, service)


def test_submit_from_the_form_and_find_the_job_on_the_map(page: Any, service: Service) -> None:
    sign_in(page, service)
    page.goto(f"{service.base}/#/submit")
    page.wait_for_selector("#f-model option[value='ResNet-50-bs64']", state="attached")
    page.fill("#f-name", "ui-submitted")
    page.select_option("#f-model", "ResNet-50-bs64")
    page.fill("#f-num_gpus", "1.5")  # not a valid GPU count: the API's 422 is shown next to the field
    page.fill("#f-duration_s", "900")
    page.click("#submit-form button[type=submit]")
    page.wait_for_function("document.querySelector('[data-error-for=num_gpus]').textContent.length > 0")
    assert "whole number" in page.inner_text("[data-error-for=num_gpus]")
    shoot(page, "submit-422")
    page.fill("#f-num_gpus", "2")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r".*#/job/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    job = wait_until("the submitted job to be placed",
                     lambda: (j := service.get(f"/jobs/{job_id}"))["allocation"] and j, timeout=60)
    assert job["name"] == "ui-submitted" and job["num_gpus"] == 2 and len(job["allocation"]) == 2

    page.goto(f"{service.base}/#/map")
    for a in job["allocation"]:
        cell = page.wait_for_selector(f".gpu[data-gpu='{a['gpu']}'] .tenant[data-job-id='{job_id}']")
        assert "ui-submitted" in cell.inner_text()


def test_job_page_shows_placement_explanation_timeline_and_logs(page: Any, service: Service) -> None:
    job = next(j for j in service.get("/jobs?state=running")["jobs"] if j["name"] == "ui-submitted")
    page.goto(f"{service.base}/#/job/{job['id']}")
    page.wait_for_selector("#explain h2")
    page.wait_for_function("document.querySelector('#explain .summary-text').textContent.trim().length > 0")
    assert page.locator("#placement tbody tr").count() == len(job["allocation"])
    explain = page.inner_text("#explain")
    if page.locator("#candidates").count():
        assert page.locator("#candidates tr.chosen").count() >= 1, explain
    assert "placed" in explain.lower(), explain
    page.wait_for_function("document.querySelector('#timeline').textContent.includes('placed')")
    assert "submitted" in page.inner_text("#timeline")
    page.wait_for_selector("#logs-body pre.log, #logs-body.muted")
    assert "×" in page.inner_text("#job-slowdown")  # a predicted slowdown is shown
    shoot(page, "job")


# 62 GPUs asked of 32: fractional (MPS) jobs share GPUs, a 12-GPU gang spans nodes, and some jobs must queue.
SIZES = [0.25, 12, 0.5, 1, 0.25, 0.5, 1, 2, 0.25, 0.5, 1, 0.25, 4, 0.5, 0.25, 1, 0.5, 0.25, 2, 0.5, 1, 0.25, 0.5, 0.25,
         0.5]
MODELS = ["ResNet-50-bs64", "Transformer-XL", "LM-bs20", "ResNet-18-bs128", "MoE"]


def test_map_of_32_gpus_with_50_jobs(page: Any, service: Service) -> None:
    known = {m["name"] for m in service.get("/models")["models"]}
    models = [m for m in MODELS if m in known] or sorted(known)[:3]
    ids = [service.submit(name=f"{models[i % len(models)].split('-')[0].lower()}-{i:02d}", kind="emulated",
                          model=models[i % len(models)], num_gpus=SIZES[i % len(SIZES)], duration_s=3600 + 60 * i,
                          )["id"] for i in range(50)]

    def settled() -> dict[str, Any] | None:
        jobs = {j["id"]: j for j in service.get("/jobs?limit=1000")["jobs"] if j["id"] in ids}
        pending = [j for j in jobs.values() if j["state"] == "pending"]
        # Every job is placed, or the controller has said why it waits.
        return jobs if len(jobs) == 50 and all(j["pending_reason"] for j in pending) else None

    wait_until("the controller to place or explain all 50 jobs", settled, timeout=120, every=1.0)
    time.sleep(1.0)  # let the placements of the last tick's workers settle
    cluster = service.get("/cluster")
    expected = [(g["index"], t["job_id"], t["name"]) for n in cluster["nodes"] for g in n["gpus"] for t in g["tenants"]]
    running = {t[1] for t in expected if t[1] in ids}
    assert len(running) >= 20, f"only {len(running)} of the 50 jobs run"
    assert any(len(g["tenants"]) > 1 for n in cluster["nodes"] for g in n["gpus"]), "no GPU is shared"

    page.goto(f"{service.base}/#/map")
    page.wait_for_function(f"document.querySelectorAll('.gpu').length === {NODES * GPUS}")
    pairs = [[gpu, job_id] for gpu, job_id, _ in expected]
    page.wait_for_function(
        """pairs => pairs.every(([g, j]) =>
             document.querySelector(`.gpu[data-gpu="${g}"] .tenant[data-job-id="${j}"]`))""", arg=pairs)
    for gpu, job_id, name in expected:
        cell = page.locator(f".gpu[data-gpu='{gpu}'] .tenant[data-job-id='{job_id}']")
        assert name in cell.inner_text(), (gpu, job_id, name)
    # Readable: every band is visible (at least one line of text tall) and shows its job's name.
    heights = page.eval_on_selector_all(".tenant", "els => els.map(e => e.getBoundingClientRect().height)")
    assert min(heights) >= 14, f"a tenant band is {min(heights):.1f} px tall"
    assert page.locator(".nic").count() == NODES
    page.mouse.move(0, 0)  # no hover highlight in the picture
    path = shoot(page, "map-32gpu-50jobs")
    assert path.stat().st_size > 20_000

    page.goto(f"{service.base}/#/queue")
    pending = [j for j in settled().values() if j["state"] == "pending"]  # type: ignore[union-attr]
    if pending:
        page.wait_for_selector("#queue-table tbody tr")
        assert page.locator("#queue-table tbody tr").count() == len(pending)
        assert pending[0]["pending_reason"] in page.inner_text("#queue-table") or page.locator(".reason").count()
    shoot(page, "queue")


def test_metrics_and_policies_pages(page: Any, service: Service) -> None:
    page.goto(f"{service.base}/#/metrics")
    page.wait_for_selector("#charts svg.chart")
    assert page.locator("#charts svg.chart").count() == 4
    page.wait_for_function("document.querySelector('#metrics-summary').textContent.includes('running')")
    page.click("#windows button:has-text('15 min')")
    page.wait_for_timeout(500)
    shoot(page, "metrics")

    page.goto(f"{service.base}/#/policies/rl:default")
    page.wait_for_selector("#policies tr.active")
    page.wait_for_selector("#report-table")
    page.wait_for_selector("#curve img.curve")
    assert page.eval_on_selector("#curve img.curve", "img => img.complete && img.naturalWidth > 0")
    assert "tiresias" in page.inner_text("#report-table")
    shoot(page, "policies")
    # Switch the active policy as admin, and back.
    page.click("button[data-activate='contention-greedy']")
    page.wait_for_function("document.querySelector('#policy-message').textContent.includes('now the active')")
    assert service.get("/policies")["active"] == "contention-greedy"
    page.click("button[data-activate='rl:default']")
    page.wait_for_function("document.querySelector('#policy-message').textContent.includes('rl:default is now')")
    assert service.get("/policies")["active"] == "rl:default"


def test_whatif_page_compares_a_scenario_with_the_present(page: Any, service: Service) -> None:
    sign_in(page, service)
    page.goto(f"{service.base}/#/whatif")
    page.wait_for_selector("#f-policy option[value='fifo']", state="attached")
    page.select_option("#f-policy", "fifo")
    page.fill("#f-extra_nodes", "2")
    page.fill("#f-seeds", "2")
    page.fill("#f-job_gpus", "4")
    page.click("#whatif-form button[type=submit]")
    page.wait_for_selector("#whatif-result table.whatif", timeout=120_000)
    result = page.inner_text("#whatif-result")
    assert "fifo on 48 GPUs" in result  # 32 live GPUs plus two 8-GPU nodes
    assert "as it is (" in result and "average JCT" in result  # the baseline column: the present, unchanged
    assert "The added job (4 GPUs) would finish in about" in result
    shoot(page, "whatif")

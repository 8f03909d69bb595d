"""The dashboard at `/`: served without a token and with no CDN (Flask test client), and driven in a real browser
(Playwright on Debian's /usr/bin/chromium) against a real `corral serve --nodes 4 --gpus-per-node 8` on a local Ray
cluster: sign in, submit from the form, find the job on the cluster map and its explanation, and a 32-GPU, 50-job map.

Screenshots go to the service's CORRAL_HOME under pytest's temporary directory (`screenshots/`), never the repo.
The browser tests skip, saying why, without chromium or playwright (`make test` installs both; never `playwright
install`: it downloads a browser of its own). Then issue 10's dashboard items: the Jobs page (filters, pages, failure
reasons), a missing job's 404, chart labels inside the chart, a phone-width navigation, inference SLOs, explanation
figures with their time and neighbours, and HTML/JS payloads in every free-text field rendered as text.
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
from conftest import HTTP_TIMEOUT_S, ServeProcess, wait_until
from sqlalchemy import select
from tiers import tiered

from scheduler.live.store import Store, queries
from scheduler.live.store.models import PolicyVersion

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "web"
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
        r = requests.get(f"{self.api}{path}", headers={"Authorization": f"Bearer {self.token}"},
                         timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200, r.text
        return r.json()

    def post(self, path: str, body: Any = None) -> requests.Response:
        return requests.post(f"{self.api}{path}", json=body, headers={"Authorization": f"Bearer {self.token}"},
                             timeout=HTTP_TIMEOUT_S)

    def submit(self, **fields: Any) -> dict[str, Any]:
        r = self.post("/jobs", fields)
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]

    def cancel_all(self) -> None:
        """Cancel every live job and wait until none runs: the next test gets the whole cluster. The cancels are sent
        again at each look: a job preempted between the two listings (running at the first, pending at the second)
        is in neither, and was once left running for the whole wait."""

        def none_left() -> bool:
            live = [j for state in ("pending", "running")
                    for j in self.get(f"/jobs?state={state}&limit=1000")["jobs"]]
            for j in live:
                self.post(f"/jobs/{j['id']}/cancel")
            return not live

        wait_until("every job to stop", none_left, timeout=60, every=0.5)


@pytest.fixture(scope="module")
@tiered("ray")
def service(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = Service(tmp_path_factory.mktemp("dashboard"))
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def page(browser: Any, service: Service) -> Iterator[Any]:
    # bypass_csp: Playwright evaluates these tests' string predicates with eval, which the dashboard's policy forbids;
    # test_every_page_runs_under_the_content_security_policy loads every page with the policy enforced.
    context = browser.new_context(viewport={"width": 1600, "height": 1000}, bypass_csp=True)
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def shoot(pg: Any, service: Service, name: str) -> Path:
    folder = service.home / "screenshots"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.png"
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
    # Each node says since when it is up (issue 14: nodes come and go).
    assert page.locator(".node .node-since").count() == NODES
    assert all(s.startswith("up since ") and s.endswith(" ago") for s in page.locator(".node-since").all_inner_texts())
    # A token revoked or wrong later: the next call's 401 sends the user back to sign in, saying why.
    page.evaluate("localStorage.setItem('corral.token', 'corral_revoked')")
    page.wait_for_selector("#signin-form", timeout=10_000)
    assert "401" in page.inner_text("#signin-message")
    sign_in(page, service)


def put_health(service: Service, node: str, interval_s: float, bad: dict[int, dict[str, Any]]) -> None:
    """What `corral node start --api` pushes for `node`: virtual GPUs, but those in `bad`."""
    gpus = [{"index": i, "status": "virtual", "temperature_c": None, "ecc_uncorrected": None, "xid_errors": [],
             "error": "", **bad.get(i, {})} for i in range(GPUS)]
    r = requests.put(f"{service.api}/nodes/{node}/health", headers={"Authorization": f"Bearer {service.token}"},
                     json={"agent": "running", "updated_at": time.time(), "interval_s": interval_s, "gpus": gpus},
                     timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 200, r.text


def test_the_map_shows_the_gpu_health_agents_report(page: Any, service: Service) -> None:
    """Issue 14: the node agents' GPU health on the map. A degraded GPU is badged on its node (how many of its GPUs)
    and on the GPU itself, with the readings in its tooltip; a node whose reports stopped coming says its health is
    stale; a node that never reported (no agent) shows nothing. The error text is the node's: shown as text."""
    payload = "<img src=x onerror=\"window.__pwned=1\">"
    put_health(service, "node0", 60.0, {3: {"status": "degraded", "temperature_c": 71, "ecc_uncorrected": 2,
                                            "xid_errors": [48], "error": payload}})
    put_health(service, "node1", 0.2, {})  # reports every 0.2 s, then no more: stale after 0.6 s
    sign_in(page, service)
    page.goto(f"{service.base}/#/map")
    degraded = page.wait_for_selector(".node[data-node='node0'] .node-health[data-health='degraded']")
    assert " ".join(degraded.inner_text().split()) == "GPU trouble: 1 of 8"
    gpu = page.locator(".node[data-node='node0'] .gpu[data-gpu='3'] .gpu-health")
    assert gpu.inner_text() == "degraded"
    title = gpu.get_attribute("title") or ""
    assert "71 °C" in title and "2 uncorrected ECC" in title and "XID 48" in title and payload in title
    assert page.locator(".node[data-node='node0'] .gpu-health").count() == 1  # only the GPU in trouble
    assert page.locator(".node[data-node='node0'] .gpu.unhealthy").count() == 1
    stale = page.wait_for_selector(".node[data-node='node1'] .node-health-stale")
    assert "health stale" in stale.inner_text()
    page.wait_for_function("document.querySelector(\".node[data-node='node1'] .node-health[data-health='ok']\")"
                           ".textContent.trim() === 'last: GPUs ok'")  # its last word, said as such
    for never in ("node2", "node3"):
        assert page.locator(f".node[data-node='{never}'] .node-health, "
                            f".node[data-node='{never}'] .node-health-stale").count() == 0
    assert page.evaluate("window.__pwned") is None and page.locator(".node img").count() == 0
    shoot(page, service, "map-health")


def test_the_map_shows_drained_nodes_and_closed_gpus_and_leaves_them_out_of_its_totals(page: Any,
                                                                                      service: Service) -> None:
    """Issue 26: a drained node is badged with its reason, every GPU the controller closes (drained, down, faulty) is
    shown as closed rather than free, and the header counts usable GPUs only, as the API's totals do."""
    put_health(service, "node0", 60.0, {5: {"status": "degraded", "xid_errors": [79]}})
    assert service.post("/nodes/node2/drain", {"reason": "firmware <b>update</b>"}).status_code == 200
    try:
        sign_in(page, service)
        page.goto(f"{service.base}/#/map")
        badge = page.wait_for_selector(".node.drained[data-node='node2'] .node-drain")
        assert badge.inner_text() == "drained: firmware <b>update</b>"  # the admin's words, as text
        assert page.locator(".node[data-node='node2'] .gpu.closed").count() == GPUS
        faulty = page.locator(".node[data-node='node0'] .gpu.closed[data-gpu='5']")
        assert faulty.count() == 1 and faulty.get_attribute("data-closed") == "GPU 5 of node0 is faulty: XID 79"
        assert page.locator(".node[data-node='node2'] .free").count() == 0  # idle, but not free: closed
        totals = service.get("/cluster")["totals"]
        assert totals["gpus_usable"] == totals["gpus"] - GPUS - 1
        page.wait_for_function(f"document.querySelector('#map-free').textContent.replace(/\\s+/g, ' ').trim() === "
                               f"'{totals['gpus_free']} free of {totals['gpus_usable']} usable GPUs'")
        assert page.locator("#map-closed").inner_text().split()[0] == str(GPUS + 1)
        shoot(page, service, "map-drained")
    finally:
        service.post("/nodes/node2/resume")
        put_health(service, "node0", 60.0, {})


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
    shoot(page, service, "submit-422")
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
    shoot(page, service, "job")


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
    path = shoot(page, service, "map-32gpu-50jobs")
    assert path.stat().st_size > 20_000

    page.goto(f"{service.base}/#/queue")
    pending = [j for j in settled().values() if j["state"] == "pending"]  # type: ignore[union-attr]
    if pending:
        page.wait_for_selector("#queue-table tbody tr")
        assert page.locator("#queue-table tbody tr").count() == len(pending)
        assert pending[0]["pending_reason"] in page.inner_text("#queue-table") or page.locator(".reason").count()
    shoot(page, service, "queue")


def test_metrics_and_policies_pages(page: Any, service: Service) -> None:
    sign_in(page, service)  # (not only when an earlier test of the module did)
    page.goto(f"{service.base}/#/metrics")
    page.wait_for_selector("#charts svg.chart")
    assert page.locator("#charts svg.chart").count() == 4
    page.wait_for_function("document.querySelector('#metrics-summary').textContent.includes('running')")
    page.click("#windows button:has-text('15 min')")
    page.wait_for_timeout(500)
    shoot(page, service, "metrics")

    page.goto(f"{service.base}/#/policies/rl:default")
    page.wait_for_selector("#policies tr.active")
    page.wait_for_selector("#report-table")
    page.wait_for_selector("#curve img.curve")
    assert page.eval_on_selector("#curve img.curve", "img => img.complete && img.naturalWidth > 0")
    assert "tiresias" in page.inner_text("#report-table")
    shoot(page, service, "policies")
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
    shoot(page, service, "whatif")


# ---- issue 10 item 8: the jobs page, errors, the chart's axis, phones, SLOs, explanation timing --------------------


def fresh_page(browser: Any, service: Service, **context: Any) -> tuple[Any, Any, list[str]]:
    """A signed-in page in a context of its own (viewport etc.), and the list its JavaScript errors land in."""
    ctx = browser.new_context(**({"viewport": {"width": 1600, "height": 1000}, "bypass_csp": True} | context))
    ctx.add_init_script(f"localStorage.setItem('corral.token', {service.token!r})")
    pg = ctx.new_page()
    pg.set_default_timeout(30_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    return ctx, pg, errors


def test_the_submit_form_sets_time_limit_dependencies_array_retries_and_class(page: Any, service: Service) -> None:
    """The form's further options reach the API as the CLI would send them; an entry it cannot read is said next
    to its field and nothing is submitted (issue 51: the form had none of these)."""
    sign_in(page, service)
    assert service.post("/priority-classes", {"name": "form-batch", "value": 0, "preemptible": True}).status_code in (
        200, 201)
    head = service.submit(name="form-head", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=600)
    before = service.get("/jobs?limit=1")["total"]
    page.goto(f"{service.base}/#/submit")
    page.wait_for_selector("#f-priority_class option[value='form-batch']", state="attached")
    page.fill("#f-name", "form-sweep")
    page.select_option("#f-kind", "command")
    page.fill("#f-entrypoint", "echo $CORRAL_ARRAY_INDEX")
    page.fill("#f-num_gpus", "1")
    page.click("#f-more summary")
    page.fill("#f-time_limit_s", "900")
    page.fill("#f-depends_on", f"afterany:{head['id']}, x1")
    page.fill("#f-array", "3")
    page.fill("#f-array_max_running", "1")
    page.fill("#f-max_retries", "2")
    page.fill("#f-retry_on", "1, 137")
    page.select_option("#f-priority_class", "form-batch")
    page.click("#submit-form button[type=submit]")
    page.wait_for_function("document.querySelector('[data-error-for=depends_on]').textContent.length > 0")
    assert '"x1"' in page.inner_text("[data-error-for=depends_on]")
    assert service.get("/jobs?limit=1")["total"] == before  # nothing was sent
    page.fill("#f-depends_on", f"afterany:{head['id']}")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r".*#/job/\d+$"))
    job = service.get(f"/jobs/{int(page.url.rsplit('/', 1)[1])}")
    assert (job["name"], job["time_limit_s"], job["max_retries"], job["retry_on"], job["priority_class"]) == (
        "form-sweep", 900, 2, [1, 137], "form-batch")
    assert job["depends_on"] == [{"job": head["id"], "condition": "afterany"}]
    assert job["array"]["count"] == 3 and job["array"]["max_running"] == 1
    service.cancel_all()


def test_jobs_page_filters_pages_and_shows_failure_reasons(page: Any, service: Service) -> None:
    sign_in(page, service)
    service.cancel_all()  # frees the cluster so the failing job runs at once; cancelled jobs are listed too
    failing = service.submit(name="exits-3", kind="command", model="ResNet-50-bs64", num_gpus=1,
                             entrypoint="echo about to fail; exit 3")
    failed = wait_until("the command job to fail", lambda: (j := service.get(f"/jobs/{failing['id']}"))["state"]
                        == "failed" and j, timeout=60)
    assert failed["error"], "a failed job carries a reason"
    total = service.get("/jobs?limit=1")["total"]
    assert total > 50, "the tests above submitted over 50 jobs: enough for a second page"

    page.goto(f"{service.base}/#/jobs")
    page.wait_for_selector("#jobs-table tbody tr")
    assert page.locator("#jobs-table tbody tr").count() == 50
    assert page.inner_text("#jobs-page") == f"1–50 of {total}"
    assert page.locator("#nav a.on").inner_text() == "Jobs"
    # Older jobs are on the next page: the ids continue where the first page stopped (newest first).
    first_ids = page.eval_on_selector_all("#jobs-table tbody tr", "rows => rows.map(r => +r.dataset.jobId)")
    page.click("#jobs-next")
    page.wait_for_function("document.querySelector('#jobs-page').textContent.startsWith('51–')")
    page.wait_for_selector("#jobs-table tbody tr")
    second_ids = page.eval_on_selector_all("#jobs-table tbody tr", "rows => rows.map(r => +r.dataset.jobId)")
    assert second_ids and max(second_ids) < min(first_ids), (first_ids[-3:], second_ids[:3])
    assert page.url.endswith("#/jobs?page=2")

    # Filter by state: the failed job's row gives its reason and links to its page.
    page.select_option("#jobs-state", "failed")
    page.wait_for_url(re.compile(r".*#/jobs\?state=failed$"))
    row = page.wait_for_selector(f"#jobs-table tr[data-job-id='{failing['id']}']")
    assert failed["error"] in row.inner_text()
    assert page.eval_on_selector_all("#jobs-table tbody tr", "rows => rows.map(r => r.dataset.state)") == \
        ["failed"] * page.locator("#jobs-table tbody tr").count()
    # Filter by user: alice owns them all; nobody owns none.
    page.fill("#jobs-user", "alice")
    page.click("#jobs-filter button")
    page.wait_for_url(re.compile(r".*#/jobs\?state=failed&user=alice$"))
    page.wait_for_selector(f"#jobs-table tr[data-job-id='{failing['id']}']")
    page.goto(f"{service.base}/#/jobs?user=nobody")
    page.wait_for_function("document.querySelector('#jobs-body').textContent.includes('No job of nobody')")
    shoot(page, service, "jobs")

    # The job page says why it failed, and so does the queue for a requeued job's earlier failure (same cell).
    page.goto(f"{service.base}/#/job/{failing['id']}")
    page.wait_for_selector("#job-failure")
    assert f"Failed: {failed['error']}" in " ".join(page.inner_text("#job-failure").split())


def test_a_missing_job_says_404_instead_of_loading(page: Any, service: Service) -> None:
    sign_in(page, service)
    page.goto(f"{service.base}/#/job/9999")
    page.wait_for_selector("#job-error")
    text = page.inner_text("#job-error")
    assert "No job 9999" in text and "HTTP 404" in text and "job 9999 not found" in text, text
    assert "Loading" not in page.inner_text("#view")
    page.goto(f"{service.base}/#/job/abc")
    page.wait_for_selector("#job-error")
    assert "No job abc" in page.inner_text("#job-error")


TICKS_INSIDE = """svg => {
  const box = svg.getBoundingClientRect();
  return [...svg.querySelectorAll('text.tick')].map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, inside: r.left >= box.left - 0.5 && r.right <= box.right + 0.5};
  });
}"""


def test_chart_axis_labels_lie_inside_the_chart(page: Any, service: Service) -> None:
    sign_in(page, service)
    page.goto(f"{service.base}/#/metrics")
    page.wait_for_selector("#charts svg.chart")
    # Durations up to 6,100 s give the longest labels ("2 h 13 min"): drawn by the page's own chart code.
    labels = page.evaluate("""() => {
      const now = Date.now() / 1000, box = document.createElement('div');
      box.style.width = '400px';
      document.querySelector('#view').appendChild(box);
      Corral.mount(box, Charts.line({t0: now - 3600, t1: now, yFormat: Corral.duration,
        series: [{name: 'jct', colour: '#000', points: [[now - 3000, 5000], [now - 100, 6100]]}]}));
      return box.querySelectorAll('svg text.tick').length;
    }""")
    assert labels == 5 + 6, labels
    svg = page.locator("#view > div:last-child svg.chart")
    ticks = svg.evaluate(TICKS_INSIDE)
    assert any("h" in t["text"] for t in ticks), ticks
    assert all(t["inside"] for t in ticks), [t for t in ticks if not t["inside"]]
    for chart in page.locator("#charts svg.chart").all():  # and the page's own charts
        ticks = chart.evaluate(TICKS_INSIDE)
        assert ticks and all(t["inside"] for t in ticks), ticks


def test_navigation_fits_a_phone(browser: Any, service: Service) -> None:
    ctx, pg, errors = fresh_page(browser, service, viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        loaded = ":not(:has-text('Loading'))"  # the table, or the sentence saying there is none
        for route, ready in [("map", ".node .gpu"), ("queue", f"#queue-table, #queue-body p{loaded}"),
                             ("jobs", f"#jobs-table, #jobs-body p{loaded}"), ("teams", "#teams-table"),
                             ("metrics", "#charts svg.chart"), ("accounting", "#accounting-table"),
                             ("policies", "#policies"), ("submit", "#submit-form"), ("whatif", "#whatif-form")]:
            pg.goto(f"{service.base}/#/{route}")
            pg.wait_for_selector(ready)
            width = pg.evaluate("document.documentElement.scrollWidth")
            outside = pg.eval_on_selector_all("#nav a, .topbar .brand", """els => els.filter(e => {
                const r = e.getBoundingClientRect(); return r.left < 0 || r.right > innerWidth; })
              .map(e => e.textContent)""")
            assert width <= 390 and not outside, (route, width, outside)
        shoot(pg, service, "phone-whatif")
    finally:
        ctx.close()
    assert not errors, errors


def test_inference_jobs_show_their_slo_and_whether_it_is_at_risk(page: Any, service: Service) -> None:
    sign_in(page, service)
    model = next(m for m in service.get("/models")["models"] if m["kind"] == "inference")
    tight = service.submit(name="tight-slo", kind="emulated", model=model["name"], num_gpus=0.25, duration_s=600,
                           slo_ms=model["latency_ms"] * 0.5)  # slower than its SLO even alone
    loose = service.submit(name="loose-slo", kind="emulated", model=model["name"], num_gpus=0.25, duration_s=600,
                           slo_ms=model["latency_ms"] * 100)
    try:
        page.goto(f"{service.base}/#/job/{tight['id']}")
        line = page.wait_for_selector("#job-slo")
        text = line.inner_text()
        assert f"SLO {tight['slo_ms']:.0f} ms" in text and "at risk" in text, text
        assert f"{model['latency_ms']:.1f} ms alone" in text, text
        page.goto(f"{service.base}/#/job/{loose['id']}")
        page.wait_for_function("document.querySelector('#job-slo') && "
                               "document.querySelector('#job-slo').textContent.includes('within')")
        assert "at risk" not in page.inner_text("#job-slo")
        page.goto(f"{service.base}/#/jobs")
        page.wait_for_selector(f"#jobs-table tr[data-job-id='{tight['id']}'] .slo.at-risk")
        assert page.locator(f"#jobs-table tr[data-job-id='{loose['id']}'] .slo.ok").count() == 1
        assert page.locator("#jobs-table .slo").count() == 2  # training jobs have none
    finally:
        service.cancel_all()


def test_only_a_job_that_may_still_run_offers_cancel(page: Any, service: Service) -> None:
    """The page asks the job's `terminal` (the server's JobState rule), not a list of its own."""
    sign_in(page, service)
    job = service.submit(name="to-cancel", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=600)
    try:
        page.goto(f"{service.base}/#/job/{job['id']}")
        page.wait_for_selector("#job-head #cancel")
        assert service.post(f"/jobs/{job['id']}/cancel").status_code == 200
        page.wait_for_selector("#job-head .badge.state-cancelled")
        assert page.locator("#job-head #cancel").count() == 0
    finally:
        service.cancel_all()


def test_explanation_says_when_and_beside_whom(page: Any, service: Service) -> None:
    sign_in(page, service)
    placed = service.submit(name="explained", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=600)
    wait_until("the job to run", lambda: service.get(f"/jobs/{placed['id']}")["state"] == "running", timeout=60)
    ex = service.get(f"/jobs/{placed['id']}/explain")
    page.goto(f"{service.base}/#/job/{placed['id']}")
    page.wait_for_selector("#explain-timing")
    clock = page.evaluate("at => Corral.clock(at)", ex["decision"]["at"])
    text = page.inner_text("#explain-timing")
    assert f"at decision time {clock}" in text and "; now" in text, text

    # The figures as the server records them (`computed_at`, neighbour job ids on the candidates and on the present
    # prediction) are shown as given: the page never puts a decision-time figure next to a present one unlabelled.
    def with_timing(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        decision = body["decision"]
        decision |= {"computed_at": decision["at"], "neighbour_job_ids": [4, 7]}
        for c in decision["candidates"]:
            c |= {"computed_at": decision["at"], "neighbour_job_ids": [4, 7] if c["chosen"] else []}
        body["placement"] |= {"computed_at": decision["at"] + 61, "neighbour_job_ids": []}
        route.fulfill(response=response, json=body)

    page.route(re.compile(rf".*/api/v1/jobs/{placed['id']}/explain$"), with_timing)
    try:
        page.reload()
        page.wait_for_function("document.querySelector('#explain-timing') && "
                               "document.querySelector('#explain-timing').textContent.includes('beside jobs')")
        text = " ".join(page.inner_text("#explain-timing").split())
        now_clock = page.evaluate("at => Corral.clock(at)", ex["decision"]["at"] + 61)
        assert f"at decision time {clock}, beside jobs #4, #7:" in text, text
        assert f"now (computed {now_clock}), alone:" in text, text
        if page.locator("#candidates").count():
            assert "#4, #7" in page.inner_text("#candidates tr.chosen")
    finally:
        page.unroute(re.compile(rf".*/api/v1/jobs/{placed['id']}/explain$"))
        service.cancel_all()


# ---- issue 10 security 7: data is text, never markup -------------------------------------------------------------

PAYLOADS = ["<img src=x onerror=alert(1)>", "<script>alert(1)</script>", '"><svg onload=alert(1)>',
            "javascript:alert(1)"]
PAYLOAD = " ".join(PAYLOADS)


def test_payloads_in_job_fields_render_as_text_on_every_page(browser: Any, service: Service) -> None:
    service.cancel_all()
    # Fields that are not free text refuse the payload, naming the field: the catalog's models, the user filter.
    r = service.post("/jobs", {"name": "x", "kind": "emulated", "model": PAYLOADS[0], "num_gpus": 1, "duration_s": 9})
    assert r.status_code == 422 and "model" in r.json()["errors"]["json"], r.text
    store = Store.open(f"sqlite:///{service.home / 'corral.db'}")
    try:
        for payload in PAYLOADS:  # a job's user is its token's, and no user (hence no token) may be named so
            with pytest.raises(ValueError, match="letters, digits"), store.session() as s:
                queries.create_token(s, payload)
    finally:
        store.close()
    # Free text holds them: the name of a running and of two queued jobs, a command job's entrypoint and env.
    running = service.submit(name=f"run {PAYLOAD}", kind="emulated", model="ResNet-50-bs64", num_gpus=0.5,
                             duration_s=3600)
    queued = [service.submit(name=f"q{i} {PAYLOAD}", kind="emulated", model="ResNet-50-bs64", num_gpus=NODES * GPUS,
                             duration_s=60) for i in range(2)]
    command = service.submit(name=f"cmd {PAYLOAD}", kind="command", model="ResNet-50-bs64", num_gpus=1,
                             entrypoint=f"true # {PAYLOAD}", env={"PAYLOAD": PAYLOAD})
    wait_until("the payload jobs to settle", lambda: service.get(f"/jobs/{running['id']}")["state"] == "running"
               and service.get(f"/jobs/{command['id']}")["state"] == "succeeded", timeout=60)

    ctx, pg, errors = fresh_page(browser, service)
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    requested: list[str] = []
    pg.on("request", lambda req: requested.append(req.url))
    try:
        pages = [("map", ".node .gpu", f"run {PAYLOAD}"),
                 ("queue", "#queue-table", f"q0 {PAYLOAD}"),
                 ("jobs", "#jobs-table", f"cmd {PAYLOAD}"),
                 (f"job/{running['id']}", "#job-head h1", f"run {PAYLOAD}"),
                 (f"job/{queued[0]['id']}", "#job-head h1", f"q0 {PAYLOAD}"),
                 (f"job/{command['id']}", "#job-command", f"true # {PAYLOAD}"),
                 (f"job/{command['id']}", "#job-env", f"PAYLOAD={PAYLOAD}"),
                 # a user filter is free text in the URL: the API finds no such user and the page says so, as text
                 (f"jobs?user={requests.utils.quote(PAYLOADS[0])}", "#jobs-body p", f"No job of {PAYLOADS[0]}"),
                 ("metrics", "#charts svg.chart", None), ("policies", "#policies", None),
                 ("whatif", "#whatif-form", None), ("submit", "#submit-form", None)]
        for route, ready, literal in pages:
            pg.goto(f"{service.base}/#/{route}")
            pg.wait_for_selector(ready)
            if literal is not None:
                pg.wait_for_function("t => document.querySelector('#view').innerText.includes(t)", arg=literal)
            pg.wait_for_timeout(300)  # a poll's worth for any onerror/onload to fire
            injected = pg.evaluate("""() => ({
              elements: document.querySelectorAll('#view img:not(.curve), #view script, #view svg:not(.chart), ' +
                '#view [onerror], #view [onload]').length,
              links: [...document.querySelectorAll('a[href]')]
                .filter(a => /^\\s*javascript:/i.test(a.href)).length})""")
            assert injected == {"elements": 0, "links": 0}, (route, injected)
        # The submit form: a payload name goes in and comes back on the job's page as the same text.
        pg.fill("#f-name", PAYLOAD)
        pg.fill("#f-duration_s", "5")
        pg.click("#submit-form button[type=submit]")
        pg.wait_for_url(re.compile(r".*#/job/\d+$"))
        pg.wait_for_function("t => document.querySelector('#job-head h1') && "
                             "document.querySelector('#job-head h1').innerText.includes(t)", arg=PAYLOAD)
        pg.goto(f"{service.base}/#/map")
        pg.wait_for_selector(f".tenant[data-job-id='{running['id']}']")
        assert PAYLOAD in pg.get_attribute(f".tenant[data-job-id='{running['id']}']", "title")
        shoot(pg, service, "payloads-map")
    finally:
        ctx.close()
        service.cancel_all()
    assert not dialogs, dialogs
    assert not errors, errors
    assert not [u for u in requested if u.rstrip("/").endswith("/x")], "an injected <img src=x> was fetched"


def test_every_page_runs_under_the_content_security_policy(browser: Any, service: Service) -> None:
    """The headers' policy enforced (issue 25): every view of the dashboard, a job's page and Swagger UI render, and
    the browser reports no violation of the policy and no script error."""
    job = service.submit(name="csp", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=30)
    ctx, pg, errors = fresh_page(browser, service, bypass_csp=False)
    violations: list[str] = []
    pg.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    try:
        for view, ready in (("map", "#nav a.on[data-view=map]"), ("queue", "#nav a.on[data-view=queue]"),
                            ("jobs", "#nav a.on[data-view=jobs]"), (f"job/{job['id']}", "#nav a.on[data-view=jobs]"),
                            ("teams", "#nav a.on[data-view=teams]"), ("metrics", "#charts svg.chart"),
                            ("accounting", "#accounting-table"),
                            ("policies", "#nav a.on[data-view=policies]"), ("submit", "#nav a.on[data-view=submit]"),
                            ("whatif", "#nav a.on[data-view=whatif]")):
            pg.goto(f"{service.base}/#/{view}")
            pg.wait_for_selector(ready, state="attached")
            pg.locator("#view > p.muted", has_text="Loading").wait_for(state="detached")  # the view rendered
            assert pg.locator("#view").inner_text().strip(), f"#/{view} rendered nothing"
        # An agent's report: its learning curve is an image the page fetched with the token (issue 51: shown from a
        # blob: URL, which the policy refused, it never appeared).
        pg.goto(f"{service.base}/#/policies/rl:default")
        pg.wait_for_selector("#curve img.curve")
        pg.wait_for_function("document.querySelector('#curve img.curve').complete")
        assert pg.eval_on_selector("#curve img.curve", "img => img.naturalWidth > 0"), "the learning curve is blank"
        pg.goto(f"{service.base}/api/docs")
        pg.wait_for_selector(".swagger-ui .info", state="attached")
    finally:
        ctx.close()
    assert not violations and not errors, (violations, errors)


def test_job_page_lists_dependencies_and_array_tasks(page: Any, service: Service) -> None:
    """A job waiting on another shows it, with its state and "not yet", and the queue's reason says for what; a task
    of an array lists every task of the array with its state."""
    sign_in(page, service)
    head = service.submit(name="dep-head", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=600)
    after = service.submit(name="dep-after", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=60,
                           depends_on=[{"job": head["id"], "condition": "afterok"}])
    task0 = service.submit(name="dep-sweep", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=600,
                           array={"count": 3, "max_running": 1})
    wait_until("the dependent job's reason", lambda: service.get(f"/jobs/{after['id']}")["pending_reason"] ==
               f"waiting for job {head['id']} to succeed", timeout=30)
    page.goto(f"{service.base}/#/job/{after['id']}")
    page.wait_for_selector("#job-deps li")
    deps = page.inner_text("#job-deps")
    assert f"afterok #{head['id']} dep-head" in deps and "not yet" in deps, deps
    assert f"waiting for job {head['id']} to succeed" in page.inner_text("#job-head")
    page.goto(f"{service.base}/#/job/{task0['id']}")
    page.wait_for_selector("#array-tasks tbody tr")
    assert page.locator("#array-tasks tbody tr").count() == 3
    assert "at most 1 running at once" in page.inner_text("#job-array")
    shoot(page, service, "job-array")
    service.cancel_all()


def test_a_pending_job_is_held_and_released_from_its_page(page: Any, service: Service) -> None:
    """The job page's Hold button holds a pending job (it says who holds it, and the reason does too); Release lets it
    wait for what it waited for before."""
    sign_in(page, service)
    head = service.submit(name="hold-head", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=600)
    after = service.submit(name="hold-after", kind="emulated", model="ResNet-50-bs64", num_gpus=1, duration_s=60,
                           depends_on=[{"job": head["id"], "condition": "afterok"}])
    waiting = f"waiting for job {head['id']} to succeed"
    wait_until("the dependent job's reason", lambda: service.get(f"/jobs/{after['id']}")["pending_reason"] == waiting,
               timeout=30)
    page.goto(f"{service.base}/#/job/{after['id']}")
    page.wait_for_selector("#hold[data-action=hold]")
    page.click("#hold")
    page.wait_for_selector("#hold[data-action=release]")
    assert page.inner_text("#job-held").startswith("held by alice")
    assert f"held by alice: it starts only once released (`corral release {after['id']}`)" in \
        page.inner_text("#job-head")
    assert service.get(f"/jobs/{after['id']}")["held_by"] == "alice"
    page.click("#hold")
    page.wait_for_selector("#hold[data-action=hold]")
    assert service.get(f"/jobs/{after['id']}")["held_at"] is None
    wait_until("the reason it had before", lambda: service.get(f"/jobs/{after['id']}")["pending_reason"] == waiting,
               timeout=30)
    page.wait_for_function(f"document.querySelector('#job-head').innerText.includes({waiting!r})")
    assert page.locator("#job-held").count() == 0
    service.cancel_all()


def test_an_elastic_job_shows_its_bounds_on_its_page_and_in_the_jobs_list(page: Any, service: Service) -> None:
    """Issue 49: an elastic job's page says so under its facts ("elastic: 2-8 GPUs (sizes 2, 4, 8); ..."), and the
    Jobs list's GPU column gives its bounds; a job of one size shows neither."""
    sign_in(page, service)
    elastic = service.submit(name="grows", kind="emulated", model="ResNet-50-bs64", num_gpus=2, duration_s=600,
                             min_gpus=2, max_gpus=8, sizes=[2, 4, 8], resize_pause_s=45)
    rigid = service.submit(name="fixed", kind="emulated", model="ResNet-50-bs64", num_gpus=3, duration_s=600)
    page.goto(f"{service.base}/#/job/{elastic['id']}")
    page.wait_for_selector("#job-elastic")
    assert page.inner_text("#job-elastic") == ("elastic: 2-8 GPUs (sizes 2, 4, 8); duration measured at 2 GPUs; "
                                               "resize pause 45 s")
    # Larger than the cluster: stored at the most it can hold, its page says the size it asked for.
    wide = service.submit(name="wide", kind="emulated", model="ResNet-50-bs64", num_gpus=4 * NODES * GPUS,
                          duration_s=600, min_gpus=1, max_gpus=4 * NODES * GPUS)
    assert wide["requested_gpus"] == 4 * NODES * GPUS and wide["num_gpus"] == NODES * GPUS
    page.goto(f"{service.base}/#/job/{wide['id']}")
    page.wait_for_function(f"document.querySelector('#job-head h1')?.innerText.includes('#{wide['id']} wide')")
    assert page.inner_text("#job-elastic").endswith(
        f"; submitted at {4 * NODES * GPUS} GPUs, which the cluster can never hold")
    page.goto(f"{service.base}/#/job/{rigid['id']}")
    page.wait_for_function(f"document.querySelector('#job-head h1')?.innerText.includes('#{rigid['id']} fixed')")
    assert page.locator("#job-elastic").count() == 0
    page.goto(f"{service.base}/#/jobs")
    for job, gpus in ((elastic, "2-8"), (rigid, "3")):
        cell = page.wait_for_selector(f"#jobs-table tr[data-job-id='{job['id']}'] td[data-label=GPUs]")
        assert cell.inner_text().split("\n")[0] == gpus
    shoot(page, service, "job-elastic")
    service.cancel_all()


def test_an_elastic_jobs_page_shows_the_sizes_it_ran_at_and_why(page: Any, service: Service) -> None:
    """Issue 49: under its bounds, the sizes an elastic job ran at: its start, then each resize with the policy's
    reason, from its events (the controller writes them: tests/test_live_elastic.py sees it do so). A rigid job holds
    every GPU but 2 first, so that whatever the active policy (`rl:default` sizes jobs itself) the elastic one starts
    on 2 and cannot grow: the sizes on the page are the ones written here."""
    sign_in(page, service)
    blocker = service.submit(name="blocker", kind="emulated", model="ResNet-50-bs64", num_gpus=NODES * GPUS - 2,
                             duration_s=3600)
    wait_until("the blocker to start", lambda: service.get(f"/jobs/{blocker['id']}")["state"] == "running",
               timeout=60)
    job = service.submit(name="sized", kind="emulated", model="ResNet-50-bs64", num_gpus=2, duration_s=600,
                         min_gpus=2, max_gpus=4)
    wait_until("the job to start", lambda: service.get(f"/jobs/{job['id']}")["state"] == "running", timeout=60)
    start = service.get(f"/jobs/{job['id']}")["first_started_at"] or time.time()
    store = Store.open(f"sqlite:///{service.home / 'corral.db'}")
    with store.session() as s:  # what the controller's resizes write (scheduler.live.control.placing)
        queries.add_event(s, job["id"], "resized", "2 -> 4 GPUs: grown to 4 GPUs: the idle GPUs save it most time "
                          "(checkpointed; no restart spent)", at=start + 60, gpus=[0, 1, 2, 3], from_gpus=2, attempt=2)
        queries.add_event(s, job["id"], "resized", "4 -> 2 GPUs: shrunk to 2 GPUs to start short (checkpointed; no "
                          "restart spent)", at=start + 120, gpus=[0, 1], from_gpus=4, attempt=3)
    store.close()
    page.goto(f"{service.base}/#/job/{job['id']}")
    page.wait_for_function("document.querySelectorAll('#job-sizes tbody tr').length === 3")
    assert page.inner_text("#job-gpus-now") == "on 2 GPUs now"  # (the allocation: the events above are written)
    rows = [[c.inner_text() for c in r.query_selector_all("td")[1:]]
            for r in page.query_selector_all("#job-sizes tbody tr")]
    assert rows == [["2", "started"],
                    ["4", "2 -> 4 GPUs: grown to 4 GPUs: the idle GPUs save it most time (checkpointed; no restart "
                          "spent)"],
                    ["2", "4 -> 2 GPUs: shrunk to 2 GPUs to start short (checkpointed; no restart spent)"]]
    shoot(page, service, "job-sizes")
    service.cancel_all()


def open_submit_form(page: Any, service: Service, name: str) -> int:
    """The submit form, signed in, its models loaded and `name` filled in; how many jobs the store held before."""
    sign_in(page, service)
    before: int = service.get("/jobs?limit=1")["total"]
    page.goto(f"{service.base}/#/submit")
    page.wait_for_selector("#f-model option[value='ResNet-50-bs64']", state="attached")
    page.fill("#f-name", name)
    return before


def test_the_submit_form_takes_an_elastic_range(page: Any, service: Service) -> None:
    """Issue 49: the form submits an elastic job's range, its accepted sizes and its resize pause; sizes it cannot
    read are marked next to their field and nothing is sent, and so is a range the API refuses."""
    before = open_submit_form(page, service, "form-elastic")
    page.fill("#f-num_gpus", "2")
    page.fill("#f-duration_s", "600")
    page.click("#f-elastic summary")
    page.fill("#f-min_gpus", "1")
    page.fill("#f-max_gpus", "4")
    page.fill("#f-sizes", "1, 2, four")
    page.click("#submit-form button[type=submit]")
    page.wait_for_function("document.querySelector('[data-error-for=sizes]').textContent.length > 0")
    assert "whole GPU counts" in page.inner_text("[data-error-for=sizes]")
    page.fill("#f-sizes", "1, 2, 4")
    page.fill("#f-max_gpus", "")  # min_gpus without max_gpus: the API names the missing one
    page.click("#submit-form button[type=submit]")
    page.wait_for_function("document.querySelector('[data-error-for=max_gpus]').textContent.length > 0")
    assert page.locator("#f-max_gpus.invalid").count() == 1
    assert service.get("/jobs?limit=1")["total"] == before  # nothing was accepted
    page.fill("#f-max_gpus", "4")
    page.fill("#f-resize_pause_s", "45")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r".*#/job/\d+$"))
    job = service.get(f"/jobs/{int(page.url.rsplit('/', 1)[1])}")
    assert (job["name"], job["num_gpus"], job["min_gpus"], job["max_gpus"], job["sizes"], job["resize_pause_s"]) == (
        "form-elastic", 2, 1, 4, [1, 2, 4], 45)
    service.cancel_all()


def test_a_command_job_without_a_duration_says_what_it_was_estimated_from(page: Any, service: Service) -> None:
    """Issue 50: the job page says a duration was estimated and from what (scheduler/live/durations.py)."""
    sign_in(page, service)
    job = service.submit(name="no-duration", kind="command", model="ResNet-50-bs64", num_gpus=1, entrypoint="true")
    given = service.submit(name="a-duration", kind="command", model="ResNet-50-bs64", num_gpus=1, entrypoint="true",
                           duration_s=90)
    estimate = service.get(f"/jobs/{job['id']}")["duration_estimate"]
    assert estimate["text"]
    page.goto(f"{service.base}/#/job/{job['id']}")
    assert page.wait_for_selector("#job-duration-estimate").inner_text() == f"No duration given; {estimate['text']}."
    page.goto(f"{service.base}/#/job/{given['id']}")
    page.wait_for_selector("#timeline li")
    assert page.locator("#job-duration-estimate").count() == 0  # given: nothing to explain
    service.cancel_all()


def test_the_policies_page_shows_what_the_guard_decided(page: Any, service: Service) -> None:
    """Issue 50: an active guarded policy's guard on the policies page (what the controller writes on the policy's
    row: tests/test_guard_live.py sees it do so)."""
    sign_in(page, service)
    active = service.get("/policies")["active"]
    store = Store.open(f"sqlite:///{service.home / 'corral.db'}")
    guard = {"learned": "rl:default", "acting": "tiresias", "fallback": "tiresias", "best": "tiresias",
             "ratio": 1.061, "low": 1.031, "high": 1.092, "windows": 6, "verdicts": 6, "at": time.time(),
             "text": "guard switched to tiresias: rl:default ran 1.061x the JCT of tiresias [1.031, 1.092] over the "
                     "last 6 windows", "switches": [{"at": time.time() - 60, "to": "tiresias", "text": "..."}]}
    with store.session(write=True) as s:
        row = s.scalars(select(PolicyVersion).where(PolicyVersion.name == active)).one()
        kept = row.info
        row.info = {**(kept or {}), "guard": guard}
    try:
        page.goto(f"{service.base}/#/policies")
        page.wait_for_selector("#policy-guard")
        assert page.inner_text("#guard-acting") == "tiresias"
        assert page.inner_text("#guard-text") == guard["text"]
        assert page.locator("#guard-switches li").count() == 1
        assert "guarded:rl:default" in page.inner_text("#policies")
    finally:
        with store.session(write=True) as s:
            s.scalars(select(PolicyVersion).where(PolicyVersion.name == active)).one().info = kept
        store.close()


def test_the_submit_form_takes_constraints_and_an_environment(page: Any, service: Service) -> None:
    """Issue 51: where a job may run and its environment, from the form: a malformed label is refused next to its
    field and nothing is sent; the server's refusal of an environment for an emulated job shows next to the
    environment; a valid submission stores the constraints as given."""
    before = open_submit_form(page, service, "ui-constrained")
    page.select_option("#f-model", "ResNet-50-bs64")
    page.fill("#f-num_gpus", "1")
    page.click("#f-where summary")
    page.fill("#f-gpu_type", "a100")
    page.fill("#f-labels", "gpu=a100, zone")
    page.fill("#f-exclude", "node1")
    page.click("#submit-form button[type=submit]")
    page.wait_for_function("document.querySelector('[data-error-for=labels]').textContent.length > 0")
    assert "key=value" in page.inner_text("[data-error-for=labels]")
    assert service.get("/jobs?limit=1")["total"] == before  # refused in the page: nothing sent
    page.fill("#f-labels", "gpu=a100")
    page.fill("#f-venv", "torch")  # an emulated job runs no command: the server refuses it an environment
    page.click("#submit-form button[type=submit]")
    page.wait_for_function("document.querySelector('[data-error-for=environment]').textContent.length > 0")
    assert service.get("/jobs?limit=1")["total"] == before
    page.fill("#f-venv", "")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r".*#/job/\d+$"))
    job = service.get(f"/jobs/{int(page.url.rsplit('/', 1)[1])}")
    assert job["name"] == "ui-constrained" and job["environment"] is None
    assert job["constraints"] == {"gpu_type": "a100", "labels": {"gpu": "a100"}, "exclude": ["node1"]}
    service.cancel_all()

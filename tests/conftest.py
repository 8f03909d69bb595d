"""Shared fixtures: small clusters built inline, job factories, and the path to ../shared (skip when absent)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
import tiers
from sqlalchemy import update
from tiers import tiered

from scheduler.core.contention import ContentionModel
from scheduler.core.jobs import Job, JobPhase, Placement
from scheduler.core.model import Cluster, ClusterSpec, JobKind, JobSpec, NodeGroupSpec, NodeTypeSpec, build_cluster
from scheduler.core.state import ClusterState
from scheduler.live.runs import JobStatus, Launch, NodeInfo
from scheduler.live.store import Store
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import StoreIdentity

SHARED = Path(__file__).resolve().parents[1].parent / "shared"

# ---- tiers: tests/tiers.py gives each test the tiers of the fixtures it uses (`@tiered` on those fixtures) ------


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("tiers"):
        config.pluginmanager.register(tiers, "tiers")


def shared_file(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: these tests need the shared traces/calibration data beside the repo")
    return path


def small_cluster(
    nodes: int = 2, gpus: int = 4, interconnect: str = "nvlink", nodes_per_rack: int = 16, gpu: str = "V100-32GB",
    switches: int = 1,
) -> Cluster:
    node = NodeTypeSpec(gpu=gpu, gpus_per_node=gpus, interconnect=interconnect, pcie_switches=switches,  # type: ignore[arg-type]
                        nic_gbps=100.0)
    return build_cluster(ClusterSpec(name=f"test-{nodes}x{gpus}", nodes_per_rack=nodes_per_rack,
                                     groups=[NodeGroupSpec(count=nodes, node=node)]))


def job(name: str, submit: float, gpus: float, duration: float, model: str = "ResNet-50-bs64",
        kind: JobKind = JobKind.TRAINING) -> JobSpec:
    return JobSpec(name=name, submit_s=submit, num_gpus=gpus, duration_s=duration, model=model, kind=kind)


def two_gpu_sizes() -> Cluster:
    """Two DGX-like nodes of 16 GB V100s and two of 32 GB: a model only the larger hold keeps its memory in a fit key
    (`policies.queue_scan.whole_fit_key`)."""
    return build_cluster(ClusterSpec(name="mixed", nodes_per_rack=8, groups=[
        NodeGroupSpec(count=2, node=NodeTypeSpec(gpu=gpu, gpus_per_node=8, interconnect="nvlink", nic_gbps=100.0))
        for gpu in ("V100-16GB", "V100-32GB")]))


def start_run(state: ClusterState, model: ContentionModel, jobs: dict[int, Job], gpus: tuple[int, ...],
              share: float) -> Job:
    """A ResNet-50 job (ids from 100) running on `gpus` at `share` of each, allocated in `state` and `model` and kept
    in `jobs`: the busy clusters the victim-search tests build."""
    s = JobSpec(name=f"j{len(jobs)}", submit_s=0.0, num_gpus=share if share < 1 else float(len(gpus)), duration_s=1e6,
                model="ResNet-50-bs64")
    p = Placement(gpus, share)
    j = Job(100 + len(jobs), s, s.duration_s)
    state.allocate(j.id, s, p)
    model.add(j.id, s, p)
    j.state, j.placement, j.start_s = JobPhase.RUNNING, p, 0.0
    jobs[j.id] = j
    return j


def many_models(count: int, gap_s: float) -> list[JobSpec]:
    """Jobs of 0.25 to 16 GPUs and four models, one every `gap_s`: BERT-large (20 GB) fits only 32 GB GPUs, MoE's
    (10 GB) half share only their MPS cap."""
    sizes, models = [1, 2, 0.5, 4, 1, 8, 0.25, 2, 16, 6, 1], ["ResNet-50-bs64", "MoE", "BERT-large", "ResNet-18-bs32"]
    return [JobSpec(name=f"j{i}", submit_s=i * gap_s, num_gpus=sizes[i % len(sizes)], model=models[i % len(models)],
                    duration_s=120.0 + (i * 677) % 4000) for i in range(count)]


def record_calls(policy: Any) -> list[list[Any]]:
    """Keep each call's decisions of `policy`, in order (its `schedule` wrapped): the list returned fills as it is
    asked. For tests that compare a policy's every call with another's."""
    calls: list[list[Any]] = []
    schedule = policy.schedule

    def recorded(view: Any, queue: Any, now: float) -> list[Any]:
        out = schedule(view, queue, now)
        calls.append(list(out))
        return out

    policy.schedule = recorded
    return calls


@pytest.fixture
def tiny_cluster() -> Cluster:
    """One node of four GPUs: small enough to compute schedules by hand."""
    return small_cluster(nodes=1, gpus=4)


# ---- Ray clusters a test starts itself ----------------------------------------------------------------------------


@contextmanager
def ray_token_env(folder: Path) -> Iterator[Path]:
    """Token authentication for a Ray cluster a test starts by hand (`ray.cluster_utils.Cluster`), as every cluster
    Corral starts or joins has it (scheduler.live.ray_auth): a token file in `folder`, and RAY_AUTH_MODE=token with
    its path in this process's environment, which Ray's processes and `corral serve` subprocesses inherit, until the
    block ends. Without it `corral serve --ray-address` refuses the cluster."""
    from scheduler.live import ray_auth
    from scheduler.live.ray_backend import _reload_auth

    saved = ray_auth.saved_env()
    path = ray_auth.ensure_token(folder)
    ray_auth.use_token(path)
    _reload_auth()
    try:
        yield path
    finally:
        ray_auth.restore_env(saved)
        _reload_auth()


@contextmanager
def virtual_ray_cluster(folder: Path, nodes: dict[str, int], racks: dict[str, str] | None = None,
                        connect: bool = True) -> Iterator[Any]:
    """A real Ray cluster for one test module, with the token of `ray_token_env`: a head with no Corral resources and
    one Corral node per entry of `nodes` (name: virtual GPUs), in the rack `racks` names for it (if any); this process
    is connected to it unless `connect` is false (a caller that joins and leaves by itself, as a sweep does).
    `corral_nodes` maps each name to Ray's handle of its node (to remove it)."""
    import ray
    from ray.cluster_utils import Cluster

    from scheduler.live.runs import node_resources

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    with ray_token_env(folder):
        cluster = Cluster(initialize_head=True, connect=connect,
                          head_node_args={"num_cpus": 1, "include_dashboard": False})
        cluster.corral_nodes = {name: cluster.add_node(num_cpus=1, num_gpus=gpus,
                                                       resources=node_resources(name, gpus, rack=(racks or {}).get(name)))
                                for name, gpus in nodes.items()}
        cluster.wait_for_nodes()
        try:
            yield cluster
        finally:
            ray.shutdown()
            cluster.shutdown()


# ---- the live service's store: every store test runs on SQLite and on PostgreSQL ----------------------------------

POSTGRES_URL = os.environ.get("CORRAL_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def postgres_schema_url(schema: str) -> str:
    """A URL whose connections live in their own schema of the test database (created here, dropped by the caller),
    or a skip with the reason when PostgreSQL is not reachable."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    try:
        engine = create_engine(POSTGRES_URL, connect_args={"connect_timeout": 3})
        with engine.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        engine.dispose()
    except OperationalError as exc:
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_URL} ({str(exc).splitlines()[0]}); CI has it")
    return f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"


def drop_postgres_schema(schema: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(POSTGRES_URL)
    with engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    engine.dispose()


@pytest.fixture
@tiered("postgres")
def pg_store() -> Iterator[Store]:
    """A store on a PostgreSQL schema of its own, dropped after the test (a skip where PostgreSQL is not reachable)."""
    schema = f"corral_pg_{uuid.uuid4().hex[:8]}"
    store = Store.open(postgres_schema_url(schema))
    yield store
    store.close()
    drop_postgres_schema(schema)


def in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run `fn` in a thread; its result or the exception it raised lands in the list."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:  # noqa: BLE001  # whatever it raised, the test reads it
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def waits_for(holder: Callable[[threading.Event, threading.Event], object], waiter: Callable[[], object],
              what: str) -> tuple[object, object]:
    """A race held open on purpose: `holder(opened, go)` runs in a thread until it sets `opened` (its transaction holds
    what it locked), then waits for `go`; `waiter` starts then, and must still be waiting half a second later (it is
    blocked: there is no event to wait for); then the holder goes on. Returns both results (or what each raised)."""
    opened, go = threading.Event(), threading.Event()
    a, a_out = in_thread(lambda: holder(opened, go))
    assert opened.wait(10)
    b, b_out = in_thread(waiter)
    b.join(0.5)
    assert b.is_alive(), f"{what} did not wait"
    go.set()
    a.join(10)
    b.join(10)
    assert not a.is_alive() and not b.is_alive()
    return a_out[0], b_out[0]


@pytest.fixture(params=["sqlite", "postgresql"])
@tiered("postgres", param="postgresql")
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL: a SQLite file, or a schema of its own in PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'corral.db'}"
        return
    schema = f"corral_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    url = postgres_schema_url(schema)
    yield url
    drop_postgres_schema(schema)


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite store at the newest migration, made once per test process for `new_store` to copy: running
    every migration for each test was most of the unit tier's time."""
    path = tmp_path_factory.mktemp("migrated") / "corral.db"
    Store.open(f"sqlite:///{path}").close()
    return path


def new_store(url: str, migrated: Path) -> Store:
    """A new store at `url`: on SQLite a copy of `migrated` (the `migrated_sqlite` fixture) with an id of its own, as
    every new store has; elsewhere made by its migrations."""
    if url.startswith("sqlite:///"):
        shutil.copyfile(migrated, url.removeprefix("sqlite:///"))
        copy = Store.open(url, migrate=False)
        with copy.session(write=True) as s:
            s.execute(update(StoreIdentity).values(store_id=str(uuid.uuid4()), created_at=time.time()))
        copy.close()
    return Store.open(url)


@pytest.fixture
def store(db_url: str, migrated_sqlite: Path) -> Iterator[Store]:
    st = new_store(db_url, migrated_sqlite)
    yield st
    st.close()


@pytest.fixture
def corral_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """CORRAL_HOME in a temporary folder, so logs and the embedded database never touch ~/.corral."""
    home = tmp_path / "corral-home"
    monkeypatch.setenv("CORRAL_HOME", str(home))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return home


# ---- a real `corral serve` process, for the end-to-end and browser tests -------------------------------------------

CORRAL = Path(sys.executable).with_name("corral")


def job_row(store: Store, job_id: int) -> JobRow:
    """A job's stored row, with its events loaded (the session closes on return)."""
    with store.session() as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        _ = row.events
        return row


class ApiCalls:
    """`call` and `ok` for a test's API site: the app's test client (`self.client`) with one user's token
    (`self.tokens[who]`), and `ok` asserting the status."""

    client: Any
    tokens: dict[str, str]

    def call(self, method: str, path: str, body: Any = None, who: str = "root") -> Any:
        return self.client.open("/api/v1" + path, method=method, json=body,
                                headers={"Authorization": f"Bearer {self.tokens[who]}"})

    def ok(self, method: str, path: str, body: Any = None, who: str = "root", status: int = 200) -> Any:
        resp = self.call(method, path, body, who)
        assert resp.status_code == status, resp.json
        return resp.json


# How long a test's own HTTP call waits for a served Corral's answer. Not 10 s: CI once saw GET /jobs unanswered for
# 10 s while the service's Ray started an actor process per rank of the running jobs, on 2 cores shared with another
# test worker and a browser. A bound on a failure, not a speed target (those are benchmarks).
HTTP_TIMEOUT_S = 60
# How long a test waits for Ray to start or reap a job's workers (each rank an actor, a process of its own): seconds on
# a quiet machine, and CI saw 18-21 s for four of them on a loaded one. Also a bound on a failure.
RAY_WORKERS_S = 120


def wait_until(what: str, pred: Callable[[], Any], timeout: float = 90.0, every: float = 0.2) -> Any:
    """Poll `pred` until it returns something truthy (and return that), or fail saying what never happened."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    """`corral serve ARGS --port P` in the background, its output in HOME/serve.log."""

    def __init__(self, home: Path, args: list[str], env: dict[str, str]) -> None:
        self.home = home
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}/api/v1"
        self._log = (home / "serve.log").open("ab")
        self.proc = subprocess.Popen([str(CORRAL), "serve", *args, "--port", str(self.port)], env=env,
                                     stdout=self._log, stderr=self._log)

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"corral serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                return requests.get(f"{self.api}/health", timeout=2).status_code == 200
            except requests.RequestException:  # refused, or not answered yet (API processes starting)
                return False

        wait_until("corral serve to answer /health", healthy, timeout=180)

    def log_tail(self) -> str:
        return (self.home / "serve.log").read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._log.close()


# ---- a Flask app served from a thread, for the CLI and the browser tests that need no controller ----------------


@contextmanager
def served(app: Any) -> Iterator[str]:
    """`app` on a free loopback port, served by werkzeug from a thread (no access log: the tests read stderr); yields
    its base URL, and shuts it down after."""
    import threading

    from werkzeug.serving import WSGIRequestHandler, make_server

    class QuietHandler(WSGIRequestHandler):
        def log_request(self, *args: object, **kwargs: object) -> None:
            pass

    http = make_server("127.0.0.1", 0, app, threaded=True, request_handler=QuietHandler)
    thread = threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{http.server_port}"
    finally:
        http.shutdown()
        thread.join(5)


@contextmanager
def signed_in_page(browser: Any, token: str) -> Iterator[Any]:
    """A page whose dashboard is signed in with `token`; fails the test if the page raised a JavaScript error.
    (bypass_csp: Playwright evaluates string predicates with eval, which the dashboard's policy forbids.)"""
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000}, bypass_csp=True)
    ctx.add_init_script(f"localStorage.setItem('corral.token', {token!r})")
    pg = ctx.new_page()
    pg.set_default_timeout(30_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    ctx.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


# ---- a headless Chromium, for the browser tests -------------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")


def browser_or_skip() -> Any:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent: install Debian's chromium (`apt-get install chromium`; `make test` does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: pip install -e '.[test]' (do not run `playwright install`)")
    return sync_playwright


@pytest.fixture(scope="module")
@tiered("browser")
def browser() -> Iterator[Any]:
    sync_playwright = browser_or_skip()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        yield b
        b.close()


# ---- a backend without Ray, for the controller's bookkeeping paths ------------------------------------------------


class InMemoryBackend:
    """The `Backend` protocol with nothing behind it: `launch` records the run, `stop` drops it (and remembers it was
    stopped), nothing is ever adopted. Subclasses say what `poll` reports."""

    def __init__(self, names: list[str], gpus: int) -> None:
        self.names, self.gpus = names, gpus
        self.launches: dict[int, Launch] = {}
        self.stopped: list[int] = []

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(name=n, gpus=self.gpus, alive=True, ray_node_id=n, address="127.0.0.1") for n in self.names]

    def launch(self, launch: Launch) -> None:
        self.launches[launch.job_id] = launch

    def adopt(self, launch: Launch) -> bool:
        return False

    def reap_orphans(self, keep: set[str]) -> list[str]:
        return []

    def set_rate(self, job_id: int, rate: float) -> None:
        pass

    def stop(self, job_id: int) -> None:
        self.stopped.append(job_id)
        self.launches.pop(job_id, None)

    def forget(self, job_id: int) -> None:
        self.launches.pop(job_id, None)

    def disown(self) -> None:
        self.launches.clear()

    def poll(self) -> list[JobStatus]:
        raise NotImplementedError


class StartingBackend(InMemoryBackend):
    """Every launched run's workers are up at the next poll and run until stopped."""

    def poll(self) -> list[JobStatus]:
        now = time.time()
        return [JobStatus(job_id=j, attempt=r.attempt, phase="running", started_at=[now] * len(r.ranks),
                          ended_at=[None] * len(r.ranks), exit_codes=[None] * len(r.ranks), done_s=0.0, error="")
                for j, r in self.launches.items()]

"""Two controllers, one store: the lease that says which `corral serve` replica leads (scheduler.live.leader), its
fence, and a real failover.

The lease tests run two `Lease`/`Controller` objects against one PostgreSQL schema with a fake Ray they share (no Ray
needed): acquire, renew, expiry and takeover with a higher epoch, and a deposed leader whose pass the fence refuses,
touching no worker. The end-to-end test runs two `corral serve` processes on PostgreSQL and one local Ray cluster,
SIGKILLs the leader mid-run and checks that the standby takes over within 15 s, adopts the running workers, and that
every job succeeds exactly once. PostgreSQL is required (a SQLite store has one process, which always leads): every
test here skips, saying why, when it is not reachable.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import (
    HTTP_TIMEOUT_S,
    RAY_WORKERS_S,
    InMemoryBackend,
    ServeProcess,
    drop_postgres_schema,
    postgres_schema_url,
    virtual_ray_cluster,
    wait_until,
)
from sqlalchemy import select
from tiers import tiered

from policies import make_policy
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.job_files import store_dir
from scheduler.live.leader import Lease, NotLeader, SoleLeader, timings
from scheduler.live.runs import NAMESPACE, JobStatus, Launch, actor_name
from scheduler.live.store import Store, queries
from scheduler.live.store.models import Allocation, ControllerLease, JobEvent
from scheduler.live.store.models import Job as JobRow

GPUS = 2
NAMES = ["n0", "n1"]
TERMINAL = {"succeeded", "failed", "cancelled"}


@pytest.fixture
@tiered("postgres")
def pg_url() -> Iterator[str]:
    schema = f"corral_standby_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    url = postgres_schema_url(schema)  # skips, saying why, without PostgreSQL
    yield url
    drop_postgres_schema(schema)


@pytest.fixture
def pg_store(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "home"))
    st = Store.open(pg_url)
    yield st
    st.close()


def short_lease(store: Store, name: str) -> Lease:
    """A lease of 1.5 s (renewed every 0.3 s, 0.5 s margin): expiry in test time."""
    return Lease(store, name, ttl_s=1.5, renew_s=0.3, poll_s=0.1, margin_s=0.5)


def lease_row(store: Store) -> ControllerLease:
    with store.session() as s:
        row = s.get(ControllerLease, 1)
        assert row is not None
        return row


# ---- the lease ----------------------------------------------------------------------------------------------------


def test_lease_acquire_renew_expire_and_take_over_with_a_higher_epoch(pg_store: Store) -> None:
    a, b = short_lease(pg_store, "a"), short_lease(pg_store, "b")
    assert a.try_acquire() and a.leading and a.epoch == 1
    assert not b.try_acquire() and not b.leading and b.epoch is None  # held: the standby waits
    assert lease_row(pg_store).holder == "a"
    time.sleep(1.0)
    assert a.renew() and a.leading  # renewed before it lapsed: still epoch 1, a full term again
    with pg_store.session() as s:
        a.fence(s)  # the holder's pass may commit
    time.sleep(1.1)
    assert not b.try_acquire(), "renewed 1.1 s ago, a 1.5 s lease must still hold"
    with pg_store.session() as s, pytest.raises(NotLeader, match="left of the lease"):
        a.fence(s)  # but with less than the margin left, a pass may not commit: it could not launch in time
    time.sleep(0.6)  # no renewal: it lapses
    assert not a.leading, "the holder must know its lease lapsed without asking the database"
    assert b.try_acquire() and b.epoch == 2
    row = lease_row(pg_store)
    assert (row.holder, row.epoch) == ("b", 2)
    assert not a.renew() and a.epoch is None  # deposed: it cannot renew epoch 1 back
    with pg_store.session() as s, pytest.raises(NotLeader, match="epoch 2"):
        a.fence(s)
    b.release()
    assert lease_row(pg_store).expires_at == 0.0
    assert a.try_acquire() and a.epoch == 3  # released: taken at once, and the epoch still only grows


def test_of_replicas_racing_for_a_free_lease_exactly_one_wins(pg_store: Store) -> None:
    leases = [short_lease(pg_store, f"r{i}") for i in range(6)]
    go = threading.Barrier(len(leases))
    won: list[str] = []

    def race(lease: Lease) -> None:
        go.wait()
        if lease.try_acquire():
            won.append(lease.replica)

    threads = [threading.Thread(target=race, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(won) == 1 and lease_row(pg_store).holder == won[0] and lease_row(pg_store).epoch == 1


def test_the_lease_thread_renews_and_a_standby_takes_over_when_it_stops(pg_store: Store) -> None:
    a, b = short_lease(pg_store, "a"), short_lease(pg_store, "b")
    changed = threading.Event()
    a.start(lambda: None)
    b.start(changed.set)
    try:
        time.sleep(2.5)  # more than a term: only renewals keep it
        assert a.leading and not b.leading and lease_row(pg_store).epoch == 1
        t0 = time.monotonic()
        a.stop()  # a clean stop releases the lease
        assert changed.wait(5), "the standby's thread never reported the takeover"
        assert b.leading and b.epoch == 2 and time.monotonic() - t0 < 1.0
    finally:
        b.stop()


def test_a_lease_needs_a_shared_database(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        with pytest.raises(ValueError, match="PostgreSQL"):
            Lease(store)
        assert SoleLeader("me").leading and SoleLeader().epoch is None
        assert "SQLite" in str(SoleLeader().status()["lease"])
    finally:
        store.close()


def test_the_lease_flags_give_the_poll_and_the_margin_and_refuse_a_renewal_slower_than_the_lease() -> None:
    from click.testing import CliRunner

    from scheduler.cli.commands import main

    assert timings() == {"ttl_s": 4.0, "renew_s": 1.0, "poll_s": 0.25, "margin_s": 1.5}
    assert timings(10.0, 2.5) == {"ttl_s": 10.0, "renew_s": 2.5, "poll_s": 0.625, "margin_s": 3.75}
    assert timings(60.0)["poll_s"] == 1.0  # a standby polls at least every second
    with pytest.raises(ValueError, match="more often than it lasts"):
        timings(4.0, 4.0)
    result = CliRunner().invoke(main, ["serve", "--lease", "2", "--lease-renew", "3"])
    assert result.exit_code == 2 and "--lease-renew" in result.output and "more often" in result.output


class Idle(InMemoryBackend):
    def poll(self) -> list[JobStatus]:
        return []


def test_on_sqlite_the_controller_always_leads_and_health_says_so(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """No PostgreSQL needed: SQLite has no lease, its one controller leads, and /health reports that with no epoch."""
    from web import create_app

    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "home"))
    store = Store.open(f"sqlite:///{tmp_path / 'c.db'}")
    ctl = Controller(store, Idle(NAMES, GPUS), build_live_cluster("dgx-a100", [GPUS] * len(NAMES)), NAMES,
                     make_policy, default_policy="fifo", tick_s=0.1, preset="dgx-a100")
    ctl.start()
    try:
        assert isinstance(ctl.leadership, SoleLeader)
        body = create_app(store, controller_status=ctl.status).test_client().get("/api/v1/health").get_json()
        assert body["controller"] == "leader" and body["epoch"] is None and "SQLite" in body["lease"]
        assert body["leader"] == body["replica"]
        bare = create_app(store).test_client().get("/api/v1/health").get_json()  # an app without a controller
        assert "controller" not in bare and bare["database"] == "ok"
    finally:
        ctl.stop()
        store.close()


# ---- two controllers, one fake Ray ----------------------------------------------------------------------------------


class FakeRay:
    """The Ray cluster both replicas share: workers by actor name, each run's phase as a test sets it."""

    def __init__(self) -> None:
        self.runs: dict[str, Launch] = {}
        self.phase: dict[int, str] = {}
        self.killed: list[str] = []

    def names(self, launch: Launch) -> list[str]:
        return [actor_name(launch.job_id, launch.attempt, r.rank) for r in launch.ranks]

    def kill(self, name: str) -> None:
        if self.runs.pop(name, None) is not None:
            self.killed.append(name)


class Replica(InMemoryBackend):
    """One replica's view of the fake Ray: it launches, adopts by name, stops and forgets (both kill)."""

    def __init__(self, ray: FakeRay) -> None:
        super().__init__(NAMES, GPUS)
        self.ray = ray

    def launch(self, launch: Launch) -> None:
        super().launch(launch)
        for name in self.ray.names(launch):
            self.ray.runs[name] = launch
        self.ray.phase[launch.job_id] = "running"

    def adopt(self, launch: Launch) -> bool:
        if not all(n in self.ray.runs for n in self.ray.names(launch)):
            return False
        self.launches[launch.job_id] = launch
        return True

    def reap_orphans(self, keep: set[str]) -> list[str]:
        gone = [n for n in self.ray.runs if n not in keep]
        for n in gone:
            self.ray.kill(n)
        return gone

    def stop(self, job_id: int) -> None:
        launch = self.launches.get(job_id)
        super().stop(job_id)
        for name in self.ray.names(launch) if launch else []:
            self.ray.kill(name)

    def forget(self, job_id: int) -> None:
        launch = self.launches.get(job_id)
        super().forget(job_id)
        for name in self.ray.names(launch) if launch else []:
            self.ray.kill(name)

    def poll(self) -> list[JobStatus]:
        out = []
        for job_id, launch in self.launches.items():
            n = len(launch.ranks)
            phase = self.ray.phase.get(job_id, "running")
            out.append(JobStatus(job_id, launch.attempt, phase, [time.time()] * n,
                                 [time.time()] * n if phase == "succeeded" else [None] * n,
                                 [0] * n if phase == "succeeded" else [None] * n, 0.0))
        return out


def make_controller(store: Store, ray: FakeRay, lease: Lease) -> Controller:
    return Controller(store, Replica(ray), build_live_cluster("dgx-a100", [GPUS] * len(NAMES)), NAMES, make_policy,
                      default_policy="fifo", tick_s=0.1, preset="dgx-a100", leadership=lease)


def submit(store: Store, name: str, gpus: float = 1) -> int:
    with store.session() as s:
        job, _ = queries.submit(s, queries.ensure_user(s, "alice"), {
            "name": name, "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": gpus, "duration_s": 60.0})
        return job.id


def events(store: Store, job_id: int) -> list[str]:
    with store.session() as s:
        return list(s.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))


def state(store: Store, job_id: int) -> str:
    with store.session() as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        return row.state


def test_a_deposed_leaders_pass_is_refused_by_the_fence_and_touches_no_worker(pg_store: Store) -> None:
    ray = FakeRay()
    # A's lease lapses while it pauses; B's need not, and a long one spares its recovery and passes the race with its
    # 1-s window (seen once under CI load: B's recovery took longer than that, and its own fence refused it). A's is
    # 4 s, not short_lease's 1.5: under CI load one of its passes took 1.2 s, and its own check refused it.
    lease_a = Lease(pg_store, "a", ttl_s=4.0, renew_s=0.8, poll_s=0.1, margin_s=0.5)
    lease_b = Lease(pg_store, "b", ttl_s=60.0, renew_s=10.0, poll_s=0.1, margin_s=0.5)
    a, b = make_controller(pg_store, ray, lease_a), make_controller(pg_store, ray, lease_b)
    assert lease_a.try_acquire()
    a.recover()
    a.leading = True
    first = submit(pg_store, "first")
    for _ in range(2):
        assert lease_a.renew()  # (its renewing thread is not running: the test drives it)
        a.step()
    assert state(pg_store, first) == "running" and len(ray.runs) == 1
    assert a.status()["controller"] == "leader" and b.status()["controller"] == "standby"

    # A pauses past its lease; B takes over with epoch 2 and adopts the running worker (no requeue, no kill).
    wait_until("A's lease to lapse and B to take it", lease_b.try_acquire, timeout=30)
    assert lease_b.epoch == 2
    b.recover()
    b.leading = True
    assert events(pg_store, first).count("adopted") == 1 and "lost" not in events(pg_store, first)
    assert ray.killed == [] and first in b.running

    # A wakes up believing it still leads (its local deadline checked before the pause): the run it tracks has
    # finished and a new job waits. Its pass decides to finish one and place the other; the fence refuses the commit.
    lease_a._valid_until = float("inf")
    second = submit(pg_store, "second")
    ray.phase[first] = "succeeded"
    launched_before = dict(a.backend.launches)  # type: ignore[attr-defined]
    with pytest.raises(NotLeader, match="epoch 2"):
        a.step()
    assert state(pg_store, first) == "running", "a deposed leader finished a job"
    assert state(pg_store, second) == "pending", "a deposed leader committed a placement"
    assert ray.killed == [], "a deposed leader ended workers the new leader adopted"
    assert a.backend.launches.keys() == launched_before.keys()  # type: ignore[attr-defined]  # launched nothing
    a._step_down("the fence refused its pass")
    assert not a.leading and not a.running and not a.backend.launches  # type: ignore[attr-defined]
    assert ray.killed == []

    # The new leader finishes the first job once and places the second under its own epoch.
    b.step()
    b.step()
    assert state(pg_store, first) == "succeeded" and events(pg_store, first).count("succeeded") == 1
    assert state(pg_store, second) == "running"
    with pg_store.session() as s:
        epochs = {(al.job_id, al.epoch) for al in s.scalars(select(Allocation))}
    assert epochs == {(first, 1), (second, 2)}


# ---- end to end: two `corral serve` processes, one Ray cluster, SIGKILL the leader --------------------------------

E2E_NODES = 2
E2E_GPUS = 4


@pytest.fixture(scope="module")
@tiered("ray")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("ray")
    with virtual_ray_cluster(tmp_path_factory.mktemp("ray"), {f"node{i}": E2E_GPUS for i in range(E2E_NODES)}) as c:
        yield c


def corral_actors() -> list[str]:
    import ray

    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == NAMESPACE and a["name"].startswith("corral-")]


def health(server: ServeProcess) -> dict[str, Any]:
    r = requests.get(f"{server.api}/health", timeout=5)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


class Replicas:
    """`corral serve` replicas on one database, one Ray cluster and one CORRAL_HOME (job logs and checkpoints are
    shared, as the docs ask); each writes its own log."""

    def __init__(self, address: str, db_url: str, home: Path) -> None:
        self.address, self.db_url, self.home = address, db_url, home
        self.count = 0

    def start(self) -> ServeProcess:
        self.count += 1
        own = self.home / f"replica-{self.count}"
        own.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DATABASE_URL": self.db_url, "CORRAL_HOME": str(self.home / "corral-home")}
        return ServeProcess(own, ["--ray-address", self.address, "--tick", "0.2", "--policy", "fifo"], env)


def test_sigkill_the_leader_and_the_standby_takes_over(ray_cluster: Any, pg_url: str, tmp_path: Path) -> None:
    store = Store.open(pg_url)
    with store.session() as s:
        token = queries.create_token(s, "alice")
    store.close()
    auth = {"Authorization": f"Bearer {token}"}
    replicas = Replicas(ray_cluster.address, pg_url, tmp_path)
    first = replicas.start()
    second: ServeProcess | None = None
    again: ServeProcess | None = None
    try:
        wait_until("the first replica to lead", lambda: health(first)["controller"] == "leader", timeout=60)
        second = replicas.start()
        h1, h2 = health(first), health(second)
        assert (h1["controller"], h2["controller"]) == ("leader", "standby"), (h1, h2)
        assert h1["epoch"] == h2["epoch"] == 1 and h2["leader"] == h1["replica"] != h2["replica"]

        # Submitted through the standby's API: the leader picks them up from the database.
        shape = [(1, 12.0), (2, 14.0), (0.5, 12.0), (4, 13.0), (1, 14.0), (0.25, 12.0), (2, 12.0), (1, 30.0)]
        ids = []
        for i, (g, d) in enumerate(shape):
            r = requests.post(f"{second.api}/jobs", headers=auth, timeout=HTTP_TIMEOUT_S, json={
                "name": f"failover-{i}", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": g,
                "duration_s": d})
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])

        def job(i: int) -> dict[str, Any]:
            assert second is not None
            r = requests.get(f"{second.api}/jobs/{i}", headers=auth, timeout=HTTP_TIMEOUT_S)
            assert r.status_code == 200, r.text
            return r.json()  # type: ignore[no-any-return]

        running = wait_until("jobs to run on the first leader", lambda: [
            j["id"] for j in map(job, ids) if j["state"] == "running" and j["started_at"]], timeout=60)
        first.kill()
        killed_at = time.monotonic()
        assert any(n.startswith(f"corral-{running[0]}-") for n in corral_actors()), "the workers died with it"
        wait_until("the standby to lead", lambda: health(second)["controller"] == "leader", timeout=30, every=0.1)
        takeover = time.monotonic() - killed_at
        print(f"takeover: {takeover:.2f} s after SIGKILL")
        assert takeover < 15.0, f"takeover took {takeover:.1f} s"
        assert health(second)["epoch"] == 2

        # The killed replica comes back as the standby.
        again = replicas.start()
        assert health(again)["controller"] == "standby" and health(again)["leader"] == health(second)["replica"]

        def done() -> list[dict[str, Any]] | None:
            jobs = [job(i) for i in ids]
            return jobs if all(j["state"] in TERMINAL for j in jobs) else None

        try:
            jobs = wait_until("every job to finish", done, timeout=150, every=0.5)
        except AssertionError:
            raise AssertionError(f"{[(i, job(i)['state']) for i in ids]}\n{second.log_tail()}") from None
        assert [j["state"] for j in jobs] == ["succeeded"] * len(ids), [(j["id"], j["state"], j["error"]) for j in jobs]

        store = Store.open(pg_url, migrate=False)
        logs = store_dir(store.id, tmp_path / "corral-home") / "logs"
        with store.session() as s:
            for job_id in ids:
                kinds = list(s.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))
                assert kinds.count("succeeded") == 1, (job_id, kinds)
                if job_id in running:  # adopted by the new leader, not rerun
                    assert "adopted" in kinds and "lost" not in kinds, (job_id, kinds)
                    assert kinds.count("placed") == 1 and kinds.count("started") == 1, (job_id, kinds)
            epochs = {a.epoch for a in s.scalars(select(Allocation).where(Allocation.job_id.in_(ids)))}
        store.close()
        assert epochs <= {1, 2} and 1 in epochs
        # By the workers' own logs too: no job has two runs that worked to the end.
        for job_id in ids:
            done = [p for p in (logs / f"job-{job_id}").glob("attempt-*/rank-0.log")
                    if "[corral] done at 100.0%" in p.read_text(errors="replace")]
            assert len(done) == 1, (job_id, done)
        wait_until("finished jobs' workers to be reaped", lambda: not corral_actors(), timeout=RAY_WORKERS_S)
    finally:
        for server in (again, second, first):
            if server is not None:
                server.stop()


def test_a_pass_slower_than_the_lease_keeps_it_and_commits(pg_store: Store) -> None:
    """Renewal runs on the lease's own thread, not between passes: a pass that thinks for longer than two whole terms
    (its policy blocks) keeps the lease, the standby never takes it, and the pass then commits under its epoch."""
    ray = FakeRay()
    thinking, done_thinking = threading.Event(), threading.Event()

    class Slow:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def schedule(self, *args: Any, **kwargs: Any) -> Any:
            thinking.set()
            assert done_thinking.wait(30)
            return self.inner.schedule(*args, **kwargs)

    lease_a, lease_b = short_lease(pg_store, "a"), short_lease(pg_store, "b")
    ctl = Controller(pg_store, Replica(ray), build_live_cluster("dgx-a100", [GPUS] * len(NAMES)), NAMES,
                     lambda name: Slow(make_policy(name)), default_policy="fifo", tick_s=0.1, preset="dgx-a100",
                     leadership=lease_a)
    ctl.start()
    lease_b.start(lambda: None)
    try:
        job = submit(pg_store, "slow")
        ctl.wake()
        assert thinking.wait(20), "the pass never asked the policy"
        since = lease_row(pg_store).renewed_at
        wait_until("two terms of renewals during the pass",
                   lambda: lease_row(pg_store).renewed_at > since + 2 * lease_a.ttl_s, timeout=20, every=0.05)
        assert not lease_b.leading and lease_row(pg_store).holder == "a" and lease_row(pg_store).epoch == 1
        done_thinking.set()
        wait_until("the slow pass to place the job", lambda: state(pg_store, job) == "running", timeout=20, every=0.05)
        with pg_store.session() as s:
            assert set(s.scalars(select(Allocation.epoch).where(Allocation.job_id == job))) == {1}
        assert ctl.status()["controller"] == "leader" and not lease_b.leading
    finally:
        done_thinking.set()
        lease_b.stop()
        ctl.stop()


def test_a_running_controller_that_loses_its_lease_stands_by_and_leaves_the_workers(pg_store: Store) -> None:
    """The loop's own path: another replica takes the lease (written here straight into the row, as a takeover
    after a pause would); the renewal fails, the controller steps down, ends no worker, and schedules no more."""
    from sqlalchemy import update

    ray = FakeRay()
    lease = short_lease(pg_store, "a")
    ctl = make_controller(pg_store, ray, lease)
    ctl.start()
    try:
        assert ctl.status()["controller"] == "leader"
        running = submit(pg_store, "running")
        ctl.wake()
        wait_until("the job to run", lambda: state(pg_store, running) == "running", timeout=20, every=0.05)
        with pg_store.session() as s:
            s.execute(update(ControllerLease).where(ControllerLease.id == 1).values(
                holder="intruder", epoch=ControllerLease.epoch + 1, expires_at=ControllerLease.expires_at + 3600))
        wait_until("the controller to stand by", lambda: ctl.status()["controller"] == "standby", timeout=10,
                   every=0.05)
        assert not ctl.running and not ctl.backend.launches  # type: ignore[attr-defined]
        assert ray.killed == [] and len(ray.runs) == 1, "stepping down must not end the workers"
        waiting = submit(pg_store, "waiting")
        ctl.wake()
        time.sleep(1.0)
        assert state(pg_store, waiting) == "pending", "a standby scheduled"
        assert ctl.status()["leader"] == "intruder" and ctl.status()["epoch"] == 2
    finally:
        ctl.stop()


def test_a_change_through_another_replica_wakes_the_leader_through_the_doorbell(pg_store: Store) -> None:
    """The leader's tick is 30 s; a job submitted through another replica (its row written, then the doorbell rung,
    as that replica's API does) is placed within a few seconds, because the NOTIFY wakes the leader."""
    from conftest import StartingBackend

    from scheduler.live import doorbell

    ctl = Controller(pg_store, StartingBackend(NAMES, GPUS), build_live_cluster("dgx-a100", [GPUS] * len(NAMES)),
                     NAMES, make_policy, default_policy="fifo", tick_s=30.0, preset="dgx-a100")
    listener = doorbell.Listener(pg_store, ctl.wake).start()
    ctl.start()
    try:
        time.sleep(1.0)  # its first pass, then it waits for the tick
        job_id = submit(pg_store, "rung")
        t0 = time.time()
        doorbell.ring(pg_store)
        wait_until("the leader to place the job", lambda: state(pg_store, job_id) == "running", timeout=10)
        assert time.time() - t0 < 5.0 and listener.heard >= 1
    finally:
        ctl.stop()
        listener.stop()

"""The controller in-process on a real local Ray cluster, stepped by hand: preemption with checkpoint and resume,
a lost Ray node (requeue or fail by restart policy), and recovery after a crash (lost workers requeued, orphans
killed). Ray starts once for the module."""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import virtual_ray_cluster
from sqlalchemy import select
from tiers import tiered

from policies import make_policy
from policies.tiresias import Tiresias
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.job_files import log_path
from scheduler.live.runs import NAMESPACE, node_resources
from scheduler.live.store import Store, queries
from scheduler.live.store.models import Job, Node

ray = pytest.importorskip("ray")

GPUS = 2
NAMES = ["n0", "n1"]


@pytest.fixture(scope="module")
@tiered("ray")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with virtual_ray_cluster(tmp_path_factory.mktemp("ray"), {n: GPUS for n in NAMES}) as c:
        yield c


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "home"))
    st = Store.open(f"sqlite:///{tmp_path / 'c.db'}")
    yield st
    st.close()


def controller(store: Store, policy: Any = None) -> Controller:
    from scheduler.live.ray_backend import RayBackend

    def factory(name: str) -> Any:
        return policy if policy is not None else make_policy(name)

    ctl = Controller(store, RayBackend(), build_live_cluster("dgx-a100", [GPUS] * len(NAMES)), NAMES, factory,
                     default_policy="tiresias", tick_s=0.2, preset="dgx-a100")
    ctl.recover()
    return ctl


def submit(store: Store, **fields: Any) -> int:
    base = {"kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 2.0}
    with store.session() as s:
        job, _ = queries.submit(s, queries.ensure_user(s, "alice"), base | fields)
        return job.id


def job(store: Store, job_id: int) -> Job:
    with store.session() as s:
        row = s.get(Job, job_id)
        assert row is not None
        row.events, row.allocations  # noqa: B018  # load them before the session closes
        return row


def run_until(ctl: Controller, store: Store, ids: list[int], states: set[str], timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        ctl.step()
        if all(job(store, i).state in states for i in ids):
            return
        time.sleep(0.05)
    raise AssertionError(f"jobs {[(i, job(store, i).state) for i in ids]} did not reach {states}")


def kinds(row: Job) -> list[str]:
    return [e.kind for e in row.events]


def test_preempted_job_resumes_from_its_checkpoint(cluster: Any, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with the leader's reap of stray workers at every pass: it kills a worker no run owns, not the running
    job's (the preempted one's, while it checkpoints: `test_reaping_strays_spares_workers_being_stopped`)."""
    import scheduler.live.controller as controller_module
    from scheduler.live.ray_backend import RemoteWorker
    from scheduler.live.runs import Launch, RankSpec

    monkeypatch.setattr(controller_module, "REAP_EVERY_S", 0.0)
    # Tiresias with a 2 GPU-second first queue: the running job drops a queue within a second and a new arrival
    # (queue 0) preempts it.
    ctl = controller(store, Tiresias(thresholds=[2.0]))
    big = submit(store, name="big", num_gpus=4, duration_s=6.0)
    run_until(ctl, store, [big], {"running"})
    run_until(ctl, store, [big], {"running"}, timeout=5)  # let it start
    deadline = time.time() + 30
    while job(store, big).started_at is None and time.time() < deadline:
        ctl.step()
    # A stray: a worker of a run no controller tracks (as a deposed leader's late launch would leave), on no GPU.
    stray = Launch(9998, 3, "emulated", (RankSpec(0, "n0", (), 1.0, 80.0),), 100.0, 1.0, "/tmp", "/tmp")
    RemoteWorker.options(name="corral-9998-3-0", namespace=NAMESPACE, lifetime="detached").remote(  # type: ignore[attr-defined]
        stray, 0)
    time.sleep(1.5)  # 4 GPUs x 1.5 s: past the 2 GPU-second threshold
    ctl.step()
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    assert "corral-9998-3-0" not in names and f"corral-{big}-1-0" in names
    small = submit(store, name="small", num_gpus=4, duration_s=1.0)
    run_until(ctl, store, [big, small], {"succeeded"}, timeout=90)
    b, s = job(store, big), job(store, small)
    assert "preempted" in kinds(b) and b.preemptions == 1 and b.attempt == 2
    preempted_at = next(e.at for e in b.events if e.kind == "preempted")
    assert s.first_started_at is not None and s.first_started_at >= preempted_at  # never on the GPUs together
    # The second run picked up the checkpoint the first one wrote when stopped.
    first = log_path(store.id, big, 1, 0).read_text()
    second = log_path(store.id, big, 2, 0).read_text()
    assert "stopped at" in first
    left = float(re.search(r"([\d.]+) s of isolated work left", second).group(1))  # type: ignore[union-attr]
    assert 0.5 < left < 6.0 - 0.5, left


def test_reaping_strays_spares_workers_being_stopped(cluster: Any, tmp_path: Path) -> None:
    """A worker being stopped checkpoints within its grace period: a reap of strays in the meantime leaves it, and
    the backend's own poll ends it once its stop returned."""
    from scheduler.live.ray_backend import RayBackend
    from scheduler.live.runs import Launch, RankSpec

    def names() -> set[str]:
        return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}

    backend = RayBackend()
    backend.launch(Launch(9997, 1, "emulated", (RankSpec(0, "n0", (), 1.0, 80.0),), 100.0, 1.0, str(tmp_path),
                          str(tmp_path)))
    deadline = time.time() + 60
    while not any(st.phase == "running" for st in backend.poll()) and time.time() < deadline:
        time.sleep(0.1)
    backend.stop(9997)
    assert backend.reap_orphans(set()) == []
    time.sleep(1.0)
    assert "corral-9997-1-0" in names()
    deadline = time.time() + 30
    while "corral-9997-1-0" in names() and time.time() < deadline:
        backend.poll()
        time.sleep(0.1)
    assert "corral-9997-1-0" not in names()


def test_lost_node_requeues_or_fails_by_restart_policy(cluster: Any, store: Store) -> None:
    ctl = controller(store)
    keep = submit(store, name="keep", num_gpus=2, duration_s=30.0)
    drop = submit(store, name="drop", num_gpus=2, duration_s=30.0, restart_policy="fail")
    run_until(ctl, store, [keep, drop], {"running"})
    deadline = time.time() + 30
    while any(job(store, i).started_at is None for i in (keep, drop)) and time.time() < deadline:
        ctl.step()
    node_of = {i: job(store, i).allocations[0].node for i in (keep, drop)}
    assert node_of[keep] != node_of[drop]  # 2 GPUs each on 2-GPU nodes
    # Lose the node under `keep`; to see both policies, make `drop` live there instead if needed.
    victim_node = node_of[keep]
    cluster.remove_node(cluster.corral_nodes[victim_node])
    try:
        deadline = time.time() + 60
        while job(store, keep).state == "running" and job(store, keep).attempt == 1 and time.time() < deadline:
            ctl.step()
            time.sleep(0.1)
        k = job(store, keep)
        assert "lost" in kinds(k) and "requeued" in kinds(k), kinds(k)
        with store.session() as s:
            assert s.scalars(select(Node).where(Node.name == victim_node)).one().alive is False
        # Its node's GPUs are out of the model: `keep` waits (the other node is busy) rather than being placed there.
        ctl.step()
        assert job(store, keep).state == "pending"
    finally:
        cluster.corral_nodes[victim_node] = cluster.add_node(num_cpus=1, num_gpus=GPUS,
                                                             resources=node_resources(victim_node, GPUS))
        cluster.wait_for_nodes()
    # The node is back: `keep` runs again. Now lose `drop`'s node: it fails, as its restart policy says.
    run_until(ctl, store, [keep], {"running"})
    cluster.remove_node(cluster.corral_nodes[node_of[drop]])
    try:
        run_until(ctl, store, [drop], {"failed"})
        assert "lost" in (job(store, drop).error or "")
    finally:
        cluster.corral_nodes[node_of[drop]] = cluster.add_node(num_cpus=1, num_gpus=GPUS,
                                                               resources=node_resources(node_of[drop], GPUS))
        cluster.wait_for_nodes()
    with store.session() as s:
        queries.cancel(s, s.get(Job, keep))  # type: ignore[arg-type]
    run_until(ctl, store, [keep], {"cancelled"})


def test_recovery_requeues_lost_runs_and_kills_orphans(cluster: Any, store: Store) -> None:
    ctl = controller(store)
    victim = submit(store, name="victim", num_gpus=1, duration_s=3.0)
    run_until(ctl, store, [victim], {"running"})
    # The controller "crashes" (it is simply dropped), and the run's worker dies with it.
    del ctl
    ray.kill(ray.get_actor(f"corral-{victim}-1-0", namespace=NAMESPACE))
    from scheduler.live.ray_backend import RemoteWorker
    from scheduler.live.runs import Launch, RankSpec

    orphan = Launch(9999, 1, "emulated", (RankSpec(0, "n0", (1,), 1.0, 80.0),), 100.0, 1.0, "/tmp", "/tmp")
    RemoteWorker.options(name="corral-9999-1-0", namespace=NAMESPACE, lifetime="detached",  # type: ignore[attr-defined]
                         resources={"corral_gpu_n0_1": 1.0}).remote(orphan, 0)
    time.sleep(1.0)
    restarted = controller(store)  # recover() runs here
    v = job(store, victim)
    assert "lost" in kinds(v) and "requeued" in kinds(v) and v.state in ("pending", "running")
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    assert "corral-9999-1-0" not in names
    run_until(restarted, store, [victim], {"succeeded"})
    assert job(store, victim).attempt == 2


def test_decisions_are_stored_with_their_candidates(cluster: Any, store: Store) -> None:
    from scheduler.live.store.models import Decision

    ctl = controller(store, make_policy("contention-greedy"))
    first = submit(store, name="first", num_gpus=1, duration_s=1.0)
    second = submit(store, name="second", num_gpus=0.5, duration_s=1.0)
    run_until(ctl, store, [first, second], {"succeeded"})
    with store.session() as s:
        rows = s.scalars(select(Decision).where(Decision.action == "place").order_by(Decision.id)).all()
        assert [r.job_id for r in rows] == [first, second]
        for r in rows:
            assert r.candidates, "contention-greedy says what it weighed"
            chosen = [c for c in r.candidates if c["gpus"] == r.gpus and c["share"] == r.share]
            assert chosen and abs(chosen[0]["slowdown"] - r.predicted_slowdown) < 1e-9
            assert all(c["slowdown"] >= 1.0 - 1e-9 for c in r.candidates)
            assert r.latency_ms > 0
            # when and against whom each figure was computed (issue 10 item 6)
            assert all(abs(c["computed_at"] - r.at) < 5.0 and c["computed_at"] <= r.at for c in r.candidates)
            assert all(isinstance(c["neighbour_job_ids"], list) for c in r.candidates)
        first_gpus = set(rows[0].gpus)
        beside_first = [c for c in rows[1].candidates if set(c["gpus"]) & first_gpus]
        assert all(first in c["neighbour_job_ids"] for c in beside_first)
        assert all(c["neighbour_job_ids"] == [] for c in rows[0].candidates)  # the first one found the cluster empty


class FailsOnce:
    """Tiresias, except that its first call raises: a pass that fails half-way."""

    name = "fails-once"
    oracle = False

    def __init__(self) -> None:
        self.inner = Tiresias()
        self.failed = False

    def schedule(self, view: Any, queue: Any, now: float) -> Any:
        if not self.failed:
            self.failed = True
            raise RuntimeError("the policy broke")
        return self.inner.schedule(view, queue, now)


def test_a_failed_pass_is_logged_and_the_loop_carries_on(cluster: Any, store: Store) -> None:
    policy = FailsOnce()
    ctl = controller(store, policy)
    ctl.start()
    try:
        job_id = submit(store, name="survivor", num_gpus=1, duration_s=1.0)
        ctl.wake()
        deadline = time.time() + 60
        while job(store, job_id).state != "succeeded" and time.time() < deadline:
            time.sleep(0.1)
    finally:
        ctl.stop()
    assert policy.failed and job(store, job_id).state == "succeeded"


def test_an_in_process_rebuild_is_not_reported_as_a_restart(cluster: Any, store: Store) -> None:
    """After a failed pass the controller rebuilds its state from the store; a job it was running and still runs
    gets no "adopted ... restarted" event (nothing restarted), and the job carries on to the end."""
    ctl = controller(store)
    job_id = submit(store, name="steady", num_gpus=1, duration_s=3.0)
    run_until(ctl, store, [job_id], {"running"})
    before = kinds(job(store, job_id))
    ctl.recover(after_failure=True)
    assert kinds(job(store, job_id)) == before and "adopted" not in before
    assert job_id in ctl.running
    run_until(ctl, store, [job_id], {"succeeded"})
    assert kinds(job(store, job_id)).count("started") == 1


def test_a_writer_holding_the_database_delays_a_pass_instead_of_failing_it(cluster: Any, store: Store) -> None:
    """SQLite admits one writer: a pass that meets another connection's write transaction waits for it (busy
    timeout, and the pass takes the write lock first) rather than failing with "database is locked"."""
    ctl = controller(store)
    job_id = submit(store, name="patient", num_gpus=1, duration_s=1.0)
    blocker = sqlite3.connect(store.url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    released = threading.Timer(1.0, lambda: blocker.execute("COMMIT"))
    released.start()
    t0 = time.time()
    try:
        ctl.step()  # waits for the lock, then takes the job in
    finally:
        released.join()
        blocker.close()
    assert time.time() - t0 >= 0.9
    run_until(ctl, store, [job_id], {"succeeded"})


def test_finished_jobs_record_run_time_and_slowdowns(cluster: Any, store: Store) -> None:
    """What `corral calibrate` and `corral train --from-history` read: the wall time a job's workers ran, the
    slowdown the model predicted over it, and the slowdown observed (run time over isolated duration)."""
    ctl = controller(store, make_policy("contention-greedy"))
    # Long enough that both run together even when a busy machine starts one's worker process seconds after the
    # other's.
    a = submit(store, name="a", num_gpus=0.5, duration_s=4.0, model="Transformer-XL")
    b = submit(store, name="b", num_gpus=0.5, duration_s=4.0, model="Transformer-XL")
    deadline = time.time() + 60
    # Each has started at some pass (the controller forgets that a run started once it ends: the first may be done
    # before the second's workers are up).
    seen: set[int] = set()
    while seen != {a, b}:
        assert time.time() < deadline, "the workers did not start"
        ctl.step()
        seen |= {j for j in (a, b) if ctl.m.started.get(j)}
        time.sleep(0.05)
    # A late pass (a busy controller) reads the ends well after the workers stopped: that delay is not run time.
    while {st.job_id for st in ctl.workers.poll() if st.phase == "succeeded"} != {a, b}:
        assert time.time() < deadline, "the workers did not finish"
        time.sleep(0.05)
    ended = time.time()
    while time.time() < ended + 1.5:
        time.sleep(0.05)
    run_until(ctl, store, [a, b], {"succeeded"})
    for job_id in (a, b):
        row = job(store, job_id)
        assert row.run_s >= 4.0 and row.predicted_slowdown_avg is not None and row.observed_slowdown is not None
        assert abs(row.observed_slowdown - row.run_s / row.duration_s) < 1e-9
        # An emulated job runs at the predicted rate, so what it observed is what was predicted, up to polling.
        assert row.observed_slowdown == pytest.approx(row.predicted_slowdown_avg, rel=0.35)
        # Placed in one pass onto one GPU, each ran slowed from its start, the first too (its launch carries the rate
        # its neighbour's placement set, not the one it was placed with).
        assert row.observed_slowdown > 1.15


def test_the_shipped_agent_schedules_the_live_cluster(cluster: Any, store: Store) -> None:
    """rl:default (encoding 3) runs in the live controller: it picks which job starts and where, never a dominated
    placement, and every decision is stored with what it weighed."""
    from scheduler.live.store.models import Decision

    ctl = controller(store, make_policy("rl:default"))
    ids = [submit(store, name=f"j{i}", num_gpus=n, duration_s=1.0) for i, n in enumerate((1, 0.5, 2, 0.25))]
    run_until(ctl, store, ids, {"succeeded"})
    with store.session() as s:
        rows = s.scalars(select(Decision).where(Decision.action == "place").order_by(Decision.id)).all()
        assert sorted(r.job_id for r in rows) == sorted(ids)
        for r in rows:
            assert "rl:default chose" in r.reason
            assert r.candidates and any(c["gpus"] == r.gpus for c in r.candidates)
            # No candidate it weighed is beaten on both its own slowdown and what it adds to its neighbours.
            for c in r.candidates:
                assert not any(o["slowdown"] < c["slowdown"] - 1e-6 and o["others_added"] < c["others_added"] - 1e-6
                               for o in r.candidates)


def test_a_node_that_joins_is_used_without_a_restart(cluster: Any, store: Store) -> None:
    """Issue 14 item 1: a Ray node with Corral's resources that joins at run time enters the model (appended, so the
    GPUs already numbered keep their indices) and gets work, while the runs already going are neither lost nor
    restarted. It advertises its own preset (pcie-t4, where the service's is dgx-a100): Ray carries the marker, and
    the node is modelled and recorded as T4s. Last in the module: it removes its node at the end, and a controller
    made later would take it in."""
    ctl = controller(store)
    fill = [submit(store, name=f"fill{i}", num_gpus=2, duration_s=60.0) for i in range(len(NAMES))]
    run_until(ctl, store, fill, {"running"})
    before = {i: [(a.node, a.gpu) for a in job(store, i).allocations] for i in fill}
    waiting = submit(store, name="waiting", num_gpus=2, duration_s=1.0)
    ctl.step()
    assert job(store, waiting).state == "pending"  # both nodes are full
    node = cluster.add_node(num_cpus=1, num_gpus=GPUS, resources=node_resources("n2", GPUS, "pcie-t4"))
    try:
        cluster.wait_for_nodes()
        presets = {n.name: n.preset for n in ctl.backend.nodes() if n.alive}
        assert presets == {"n0": None, "n1": None, "n2": "pcie-t4"}  # the marker, through Ray's node table
        run_until(ctl, store, [waiting], {"succeeded"}, timeout=90)
        w = job(store, waiting)
        assert {a.node for a in w.allocations} == {"n2"}
        assert sorted(a.gpu for a in w.allocations) == [len(NAMES) * GPUS, len(NAMES) * GPUS + 1]
        assert ctl.node_names == [*NAMES, "n2"] and ctl.cluster.num_gpus == (len(NAMES) + 1) * GPUS
        assert ctl.node_presets == ["dgx-a100", "dgx-a100", "pcie-t4"]
        assert [ctl.cluster.gpu_types[int(t)].name for t in ctl.cluster.gpu_type] == ["A100-80GB"] * 4 + ["T4"] * 2
        for i in fill:  # taken over where they ran: no loss, no second attempt, same GPUs
            f = job(store, i)
            assert f.state == "running" and f.attempt == 1 and "lost" not in kinds(f), kinds(f)
            assert [(a.node, a.gpu) for a in f.allocations] == before[i]
        with store.session() as s:
            n2 = s.scalars(select(Node).where(Node.name == "n2")).one()
            assert n2.alive and n2.index == len(NAMES) and [g.index for g in n2.gpus] == [4, 5]
            assert n2.preset == "pcie-t4" and {g.gpu_type for g in n2.gpus} == {"T4"}
    finally:
        cluster.remove_node(node)
        with store.session() as s:
            for i in fill:
                queries.cancel(s, s.get(Job, i))  # type: ignore[arg-type]
    run_until(ctl, store, fill, {"cancelled"})
    deadline = time.time() + 60
    while time.time() < deadline and "n2" not in [ctl.node_names[i] for i in ctl.health.down]:
        ctl.step()
        time.sleep(0.2)
    with store.session() as s:  # it left: down in the model and in the store, since when it left
        n2 = s.scalars(select(Node).where(Node.name == "n2")).one()
        assert not n2.alive and n2.updated_at >= w.allocations[0].allocated_at


def test_discovery_keeps_the_numbering_of_nodes_the_store_knows() -> None:
    """Allocations record GPUs by cluster-wide index, so a restarted controller joining a Ray cluster must number
    the nodes as before: known ones in the store's order (even one Ray does not have now, whose GPUs stay in the
    model, down), then new ones by name."""
    from scheduler.cli.serve import ServeConfig, discover
    from scheduler.live.cluster import ModelNode
    from scheduler.live.runs import NodeInfo

    class Nodes:
        def nodes(self) -> list[NodeInfo]:
            return [NodeInfo("a", 4, True, "ra", ""), NodeInfo("c", 2, True, "rc", ""), NodeInfo("z", 8, False, "", ""),
                    NodeInfo("b", 2, True, "rb", "")]

    cfg = ServeConfig(ray_address="127.0.0.1:1", preset="dgx-a100")
    known = [ModelNode("b", 2, "dgx-a100"), ModelNode("gone", 8, "dgx-a100"), ModelNode("a", 4, "dgx-a100")]
    nodes, cl = discover(Nodes(), cfg, known=known)  # type: ignore[arg-type]
    assert [n.name for n in nodes] == ["b", "gone", "a", "c"]  # z is dead and unknown: not taken in
    assert [int(cl.node_num_gpus[i]) for i in range(cl.num_nodes)] == [2, 8, 4, 2]
    nodes, _ = discover(Nodes(), cfg)  # a new store: by name
    assert [n.name for n in nodes] == ["a", "b", "c"]


def test_a_replica_taking_over_takes_the_store_s_node_numbering(store: Store) -> None:
    """Nodes n3 then n2 joined while another replica led, which numbered them in that order: this replica, built
    when only n0 and n1 existed, takes the store's numbering when it recovers (allocations were written in it), not
    its own by-name order, and keeps it in the store."""
    from conftest import InMemoryBackend

    from scheduler.live.nodes import register_nodes

    order = ["n0", "n1", "n3", "n2"]
    backend = InMemoryBackend(sorted(order), GPUS)
    with store.session() as s:
        register_nodes(s, backend.nodes(), build_live_cluster("dgx-a100", [GPUS] * 4), order, ["dgx-a100"] * 4,
                       time.time())
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [GPUS] * 2), ["n0", "n1"], make_policy,
                     default_policy="fifo", preset="dgx-a100", nodes_from_store=True)
    ctl.recover()
    assert ctl.node_names == order and ctl.cluster.num_gpus == 4 * GPUS
    with store.session() as s:
        assert [(n.name, [g.index for g in n.gpus]) for n in s.scalars(select(Node).order_by(Node.index))] == [
            (name, [i * GPUS + k for k in range(GPUS)]) for i, name in enumerate(order)]
    own = Controller(store, InMemoryBackend(["n0", "n1"], GPUS), build_live_cluster("dgx-a100", [GPUS] * 2),
                     ["n0", "n1"], make_policy, default_policy="fifo", preset="dgx-a100")
    own.recover()  # a local cluster of its own (no --ray-address): its own nodes, whatever the store held
    assert own.node_names == ["n0", "n1"]

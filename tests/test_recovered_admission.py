"""The jobs a controller finds pending when it starts, or when a standby takes over, are admitted as new submissions
are (`Intake.admit`, by `scheduler.core.admission`): the cluster may have shrunk while no controller ran, or a job was
accepted while no node was recorded alive. One the cluster can never run fails with a `rejected` event saying why, an
elastic one whose size it cannot hold is brought down (`sized_down`) and then runs, one that fits is left as it is, and
a node that is down (recorded, not alive) fails none. Without Ray (a backend whose workers start at once), on SQLite
and PostgreSQL."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import StartingBackend
from sqlalchemy import select

from policies import make_policy
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.leader import SoleLeader
from scheduler.live.runs import NodeInfo
from scheduler.live.store import Store, queries
from scheduler.live.store.models import Allocation
from scheduler.live.store.models import Job as JobRow

GPUS = 4  # per node
MODEL = "ResNet-50-bs64"


class Nodes(StartingBackend):
    """Ray's node table as a shared cluster may show it: the nodes in `dead` are down (a restart, say)."""

    def __init__(self, names: list[str], dead: tuple[str, ...] = ()) -> None:
        super().__init__(names, GPUS)
        self.dead = set(dead)

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(name=n, gpus=self.gpus, alive=n not in self.dead, ray_node_id=n, address="127.0.0.1")
                for n in self.names]


class TakingOver(SoleLeader):
    """A standby that has just taken the lease (epoch 2): what `Controller._take_over` recovers under."""

    @property
    def epoch(self) -> int | None:
        return 2


def controller(store: Store, backend: Nodes, names: list[str] | None = None, **more: Any) -> Controller:
    """A controller modelling `names` (default: the backend's nodes)."""
    names = names or backend.names
    cluster = build_live_cluster([("dgx-a100", GPUS)] * len(names), names=names)  # (constraints name nodes)
    return Controller(store, backend, cluster, list(names),
                      lambda name: make_policy("fifo"), default_policy="fifo", tick_s=0.1, preset="dgx-a100", **more)


def submit(store: Store, **fields: Any) -> int:
    """Stored as the API stores what it accepted (with no node recorded alive it checks nothing)."""
    base = {"name": "train", "kind": "emulated", "model": MODEL, "num_gpus": 1, "duration_s": 120.0}
    with store.session() as s:
        job, _ = queries.submit(s, queries.ensure_user(s, "alice"), base | fields)
        return job.id


def step(ctl: Controller) -> None:
    ctl._last_poll = 0.0  # poll the workers,
    ctl.health.last_nodes = -math.inf  # and read the node table, at this pass
    ctl.step()


def look(store: Store, job_id: int, read: Callable[[JobRow], Any]) -> Any:
    with store.session() as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        return read(row)


def kinds(row: JobRow) -> list[str]:
    return [e.kind for e in row.events]


def held(store: Store, job_id: int) -> int:
    with store.session() as s:
        return len(s.scalars(select(Allocation).where(Allocation.job_id == job_id,
                                                      Allocation.released_at.is_(None))).all())


def test_a_restart_on_a_smaller_cluster_rejects_what_it_can_never_run_and_brings_elastic_jobs_down(
        store: Store, corral_home: Path) -> None:
    # The last server ran 4 nodes (16 GPUs) and held these jobs pending when it stopped.
    controller(store, Nodes(["n0", "n1", "n2", "n3"]))._register_nodes(0.0)
    wide = submit(store, num_gpus=16, min_gpus=2, max_gpus=16)
    rigid = submit(store, num_gpus=16)
    never = submit(store, num_gpus=16, min_gpus=12, max_gpus=16)
    gone = submit(store, num_gpus=2, constraints={"nodes": ["n3"]})
    fits = submit(store, num_gpus=2)
    # It restarts with 2 nodes (8 GPUs): its model has n0 and n1 only.
    ctl = controller(store, Nodes(["n0", "n1"]))
    ctl.recover()

    assert look(store, rigid, lambda r: (r.state, r.error, kinds(r))) == (
        "failed", "needs 16 GPUs, the cluster has 8", ["submitted", "rejected"])
    with store.session() as s:
        row = s.get(JobRow, rigid)
        assert row is not None
        [event] = [e for e in row.events if e.kind == "rejected"]
        assert event.message == "needs 16 GPUs, the cluster has 8"
        assert (row.end_code, row.end_params) == ("rejected", {"text": "needs 16 GPUs, the cluster has 8"})
    assert look(store, never, lambda r: r.state) == "failed"
    assert "the smallest size it accepts, 12 GPUs, can never run here" in look(store, never, lambda r: r.error)
    assert look(store, gone, lambda r: r.state) == "failed"
    assert "n3" in look(store, gone, lambda r: r.error)
    assert set(ctl.pending) == {wide, fits}

    with store.session() as s:
        row = s.get(JobRow, wide)
        assert row is not None and row.state == "pending"
        assert (row.num_gpus, row.min_gpus, row.max_gpus) == (8, 2, 16) and row.duration_s >= 240.0
        [event] = [e for e in row.events if e.kind == "sized_down"]
        assert event.data["from"] == 16 and event.data["to"] == 8 and "needs 16 GPUs, the cluster has 8" in event.message
    assert ctl.pending[wide].spec.num_gpus == 8  # the queue has it at that size
    assert look(store, fits, lambda r: (r.state, r.num_gpus, r.duration_s, kinds(r))) == (
        "pending", 2, 120.0, ["submitted"])

    step(ctl)  # fifo: the brought-down job first, on the whole cluster
    assert look(store, wide, lambda r: r.state) == "running" and held(store, wide) == 8
    assert look(store, fits, lambda r: r.state) == "pending"
    assert look(store, rigid, lambda r: kinds(r)).count("rejected") == 1  # the intake's first pass adds nothing


def test_a_node_that_is_down_fails_no_pending_job(store: Store, corral_home: Path) -> None:
    """A shared Ray cluster whose node n1 is down for a restart: the model keeps it (its GPUs closed), so the jobs
    that need it wait for it, as they are, and run when it is back."""
    backend = Nodes(["n0", "n1"], dead=("n1",))
    ctl = controller(store, backend)
    ctl._register_nodes(0.0)  # the store records n1, not alive
    whole = submit(store, num_gpus=8)
    pinned = submit(store, num_gpus=4, constraints={"nodes": ["n1"]})
    elastic = submit(store, num_gpus=8, min_gpus=2, max_gpus=8)
    ctl.recover()
    step(ctl)
    for job_id in (whole, pinned, elastic):
        assert look(store, job_id, lambda r: (r.state, kinds(r), r.error)) == ("pending", ["submitted"], None)
    assert look(store, elastic, lambda r: r.num_gpus) == 8
    backend.dead.clear()  # n1 is back
    step(ctl)
    assert look(store, whole, lambda r: r.state) == "running" and held(store, whole) == 8


def test_a_standby_taking_over_admits_the_queue_on_the_recorded_nodes(store: Store, corral_home: Path) -> None:
    """The failover path (`_take_over`, then `recover`): a standby that saw only n0 alive when it started takes the
    store's nodes, n1 (down now) included, so what needs n1 waits; what no recorded node can hold is rejected."""
    controller(store, Nodes(["n0", "n1"]))._register_nodes(0.0)  # the old leader recorded both
    both = submit(store, num_gpus=8)
    huge = submit(store, num_gpus=12)
    standby = controller(store, Nodes(["n0", "n1"], dead=("n1",)), ["n0"], leadership=TakingOver(),
                         nodes_from_store=True)
    standby._take_over()
    assert standby.node_names == ["n0", "n1"]
    assert look(store, both, lambda r: (r.state, kinds(r))) == ("pending", ["submitted"])
    assert look(store, huge, lambda r: (r.state, r.error)) == ("failed", "needs 12 GPUs, the cluster has 8")
    assert set(standby.pending) == {both}


def test_a_recovered_job_brought_down_keeps_the_share_of_its_work_done(store: Store, corral_home: Path) -> None:
    controller(store, Nodes(["n0", "n1", "n2", "n3"]))._register_nodes(0.0)
    wide = submit(store, num_gpus=16, min_gpus=2, max_gpus=16, duration_s=1200.0)
    with store.session() as s:
        row = s.get(JobRow, wide)
        assert row is not None
        row.work_done_s = 300.0  # a quarter of its work, done in runs before the restart
    ctl = controller(store, Nodes(["n0", "n1"]))
    ctl.recover()
    duration, done = look(store, wide, lambda r: (r.duration_s, r.work_done_s))
    assert duration > 1200.0 and math.isclose(done / duration, 0.25)
    assert math.isclose(ctl.pending[wide].work_left, duration * 0.75)


def test_a_recovery_in_the_running_process_fails_no_accepted_job(store: Store, corral_home: Path) -> None:
    """After a node joined or was relabelled (`recover(after_failure=True)`: an operator's change, perhaps undone
    soon), a pending job the cluster can no longer run stays queued, as it was: only a start or a takeover fails
    one."""
    controller(store, Nodes(["n0", "n1", "n2", "n3"]))._register_nodes(0.0)
    rigid = submit(store, num_gpus=16)
    ctl = controller(store, Nodes(["n0", "n1"]))
    ctl.recover(after_failure=True)
    assert look(store, rigid, lambda r: (r.state, kinds(r))) == ("pending", ["submitted"])
    assert rigid in ctl.pending
    ctl.recover()  # a start on the same cluster: now it is told
    assert look(store, rigid, lambda r: (r.state, r.error)) == ("failed", "needs 16 GPUs, the cluster has 8")

"""Reading the node table off the pass: a backend whose `nodes()` is a round trip (Ray's, a call to its GCS) is read
on another thread, so a pass never waits for it; a later pass takes what it read. Without Ray (a backend whose node
read blocks until the test lets it answer), on SQLite."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from conftest import StartingBackend

from policies.heuristics import Fifo
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import NODES_EVERY_S, Controller
from scheduler.live.runs import JobStatus, NodeInfo
from scheduler.live.store import Store

NAMES = ["n0", "n1"]
GPUS = 2
WAIT_S = 10.0  # bound on every wait for the reader thread


class SlowNodes(StartingBackend):
    """A backend whose node read waits until the test opens `gate` (or WAIT_S passes), and reports the nodes in
    `down` as dead."""

    nodes_in_background = True

    def __init__(self) -> None:
        super().__init__(NAMES, GPUS)
        self.gate = threading.Event()
        self.gate.set()
        self.reading = threading.Event()  # a read has started
        self.reads = 0
        self.down: set[str] = set()
        self.lost: set[int] = set()  # runs whose workers report lost at the next poll

    def nodes(self) -> list[NodeInfo]:
        self.reads += 1
        down = set(self.down)  # the table as it is when the read starts
        self.reading.set()
        self.gate.wait(WAIT_S)
        return [NodeInfo(name=n, gpus=GPUS, alive=n not in down, ray_node_id=n, address="127.0.0.1")
                for n in self.names]

    def poll(self) -> list[JobStatus]:
        out = super().poll()
        return [JobStatus(st.job_id, st.attempt, "lost", st.started_at, st.ended_at, st.exit_codes, 0.0, "lost")
                if st.job_id in self.lost else st for st in out]


def controller(store: Store, backend: SlowNodes) -> Controller:
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [GPUS] * len(NAMES)), NAMES, lambda name: Fifo(),
                     default_policy="fifo", tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    return ctl


def step(ctl: Controller, nodes_due: bool = False) -> None:
    ctl._last_poll = 0.0  # poll every pass
    if nodes_due:
        ctl.health.last_nodes = time.time() - NODES_EVERY_S  # a read of the node table is due
    ctl.step()


def settle(ctl: Controller) -> None:
    """A pass, then, if a read is under way, its answer and a pass that takes it in."""
    step(ctl)
    read = ctl.health.reading
    if read is not None:
        read.result(timeout=WAIT_S)
        step(ctl)


def test_a_pass_does_not_wait_for_the_node_read_and_a_later_pass_takes_it(store: Store, corral_home: Path) -> None:
    backend = SlowNodes()
    ctl = controller(store, backend)
    try:
        settle(ctl)
        backend.gate.clear()  # the next read hangs until the gate opens
        backend.reading.clear()
        backend.down = {"n1"}
        before = backend.reads
        step(ctl, nodes_due=True)  # starts the read and returns without its answer
        assert backend.reading.wait(WAIT_S), "the pass started no read of the node table"
        assert ctl.health.down == set(), "the pass saw a node table whose read had not answered"
        step(ctl)  # the read still hangs: this pass goes on with what it knew
        assert ctl.health.down == set() and backend.reads == before + 1, "a second read started while one was under way"
        backend.gate.set()
        settle(ctl)
        assert ctl.health.down == {1}, "the answered read was never taken in"
        backend.down = set()  # the node comes back, seen at the next read
        step(ctl, nodes_due=True)
        settle(ctl)
        assert ctl.health.down == set()
    finally:
        backend.gate.set()
        ctl.stop()


def test_a_read_forced_by_a_lost_worker_drops_the_older_read_under_way(store: Store, corral_home: Path) -> None:
    """A worker is lost while a background read, started before its node died, is under way: the pass reads the table
    at once (so the policy cannot place on the dead node again), and the older read's answer, which still shows the
    node alive, is dropped rather than bringing the node back."""
    from scheduler.live.store import queries as q

    backend = SlowNodes()
    ctl = controller(store, backend)
    try:
        with store.session(write=True) as s:
            user = q.ensure_user(s, "ann")
            job = q.submit(s, user, {"name": "j", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 2,
                                     "duration_s": 600.0})[0].id
        step(ctl)
        step(ctl)
        assert job in ctl.running
        node = ctl.running[job].placement.gpus[0] // GPUS  # type: ignore[union-attr]
        name = NAMES[node]
        settle(ctl)
        backend.gate.clear()
        backend.reading.clear()
        step(ctl, nodes_due=True)  # a read starts while the node is alive, and hangs
        assert backend.reading.wait(WAIT_S)
        stale = ctl.health.reading
        assert stale is not None
        backend.down = {name}
        backend.lost = {job}
        backend.gate.set()  # the forced read answers at once; the stale one too, with the node alive
        step(ctl)
        assert node in ctl.health.down, "a lost worker did not make the pass read the node table"
        assert ctl.health.reading is None
        stale.result(timeout=WAIT_S)
        backend.lost = set()
        step(ctl)
        assert node in ctl.health.down, "the older read, which saw the node alive, brought it back"
    finally:
        backend.gate.set()
        ctl.stop()

"""The nodes' health as the controller sees it: Ray's node table (read off the pass), nodes lost and back, the
admins' drains and the agents' GPU reports, nodes held out after a run was lost there (suspects), and nodes drained
after the workers of several jobs did not start there (start strikes). What it closes, it closes by the one rule of
`scheduler.core.outages`, as the simulator does."""

from __future__ import annotations

import logging
import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from scheduler.core.model import Job
from scheduler.core.outages import Drain, OnFault, closed_gpus, eviction_reasons, spans
from scheduler.core.progress import runs_on_node
from scheduler.live.control.membership import Membership
from scheduler.live.control.memory import Memory
from scheduler.live.control.workers import Workers
from scheduler.live.lifecycle import LifeCycle
from scheduler.live.nodes import CONDITION_COLUMNS, DRAIN_COLUMNS, conditions, drains
from scheduler.live.rows import rank_specs
from scheduler.live.runs import START_STRIKES_WINDOW_S, NodeInfo
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import Node

log = logging.getLogger("scheduler.live.controller")

# Ray's node table is read at most this often (a read costs about as much as the rest of a settled pass): a node
# that joins or leaves is seen up to 1 s later, well inside issue 14's 10 s, and Ray's own death detection is longer.
NODES_EVERY_S = 1.0
# A node where a run's workers were just lost takes no new job for this long: a partitioned or dying node loses its
# workers (seconds) well before Ray declares it dead (tens of seconds), and a job requeued onto it would be lost again,
# spending a second restart. Ray declaring the node dead ends the hold sooner (it is then down, closed as such).
SUSPECT_S = 60.0


class NodeHealth:
    def __init__(self, nodes: Membership, workers: Workers, *, on_fault: OnFault, start_timeout_s: float,
                 drain_after: int) -> None:
        self.nodes = nodes
        self.workers = workers
        self.on_fault = on_fault  # what a faulty GPU's runs do (`corral serve --on-gpu-fault`)
        self.start_timeout_s = start_timeout_s
        self.drain_after = drain_after  # `corral serve --drain-after` (`strike`; 0: never)
        # node name -> (when, job) of the recent runs whose workers did not start there (`strike`). Names, not model
        # positions: a node joining renumbers the model. In memory only: a new leader starts counting afresh.
        self.start_strikes: dict[str, list[tuple[float, int]]] = {}
        self.reader: ThreadPoolExecutor | None = None  # reads Ray's node table off the pass (`read_nodes`)
        self.forget()

    def forget(self) -> None:
        """What is rebuilt from the store and Ray with the rest of memory."""
        self.down: set[int] = set()  # nodes whose Ray node is gone
        self.drained: dict[int, Drain] = {}  # nodes an admin drained (the store's `nodes.drained_at`)
        self.suspect: dict[int, tuple[float, str]] = {}  # node -> (held out until, why): a run was lost there
        self.suspects_added = False  # `suspect` gained a node since the outages were last applied
        self.faults: dict[int, str] = {}  # cluster-wide GPU -> why its agent reports it faulty
        self.last_conditions = 0.0  # when the drains and the agents' reports were last read
        self.last_nodes = 0.0  # when Ray's node table was last read
        self.reading: Future[list[NodeInfo]] | None = None  # a read of the node table under way (`read_nodes`)
        # node name -> the virtual environments it advertised when the store last heard (`seen_venvs`): an agent
        # restarted with another CORRAL_VENVS is written to the store (`check_nodes`), which submissions are checked by
        self.venvs: dict[str, tuple[str, ...]] = {}

    def scene(self) -> tuple[object, ...]:
        return (frozenset(self.down),)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.shutdown(wait=False, cancel_futures=True)

    def read_nodes(self, now: float) -> list[NodeInfo] | None:
        """The node table, every NODES_EVERY_S (None in between). A backend whose read is a round trip (Ray's: a call
        to its GCS, 1-4 ms here, in a pass of 3-5 ms) is read on another thread: a pass starts a read and a later pass
        takes its answer, so the node table is up to one pass older and no pass waits for it."""
        if not getattr(self.workers.backend, "nodes_in_background", False):
            if now - self.last_nodes < NODES_EVERY_S:
                return None
            self.last_nodes = now
            return self.workers.nodes()
        nodes = None
        if self.reading is not None and self.reading.done():
            read, self.reading = self.reading, None
            nodes = read.result()  # a read that failed fails this pass, as a read in it would have
        if self.reading is None and now - self.last_nodes >= NODES_EVERY_S:
            if self.reader is None:
                self.reader = ThreadPoolExecutor(1, thread_name_prefix="corral-nodes")
            self.reading = self.reader.submit(self.workers.nodes)
            self.last_nodes = now
        return nodes

    def read_now(self, now: float) -> list[NodeInfo]:
        """The node table at once (workers were lost: if their node is gone, know it before the policy can place a job
        there again). A read under way in the background started before this one: what it says is older, dropped."""
        self.last_nodes, self.reading = now, None
        return self.workers.nodes()

    def seen_venvs(self, nodes: list[NodeInfo]) -> None:
        """What the nodes advertised when they were registered (`register_nodes` wrote it)."""
        self.venvs = {n.name: n.venvs for n in nodes}

    def check_nodes(self, s: Session, m: Memory, lifecycle: LifeCycle, nodes: list[NodeInfo], now: float) -> bool:
        """A Ray node that died takes its GPUs out of the model until it comes back. True if the nodes down changed.
        A node that advertises other virtual environments than the store has (its agent restarted with another
        CORRAL_VENVS) has them written: nothing of the model changes."""
        for n in nodes:
            if n.alive and self.venvs.get(n.name) != n.venvs:
                s.execute(update(Node).where(Node.name == n.name).values(venvs=list(n.venvs) or None))
                self.venvs[n.name] = n.venvs
        before = set(self.down)
        alive = {n.name: n.alive for n in nodes}
        advertised = {n.name: n.preset for n in nodes}
        for i, name in enumerate(self.nodes.node_names):
            up = alive.get(name, False)
            if up and i in self.down:
                if advertised.get(name) not in (None, self.nodes.node_presets[i]):
                    # Its GPUs keep their numbering and type: allocations and the store's GPU rows name them.
                    log.warning("node %s came back as preset %s; it stays modelled as %s (give it a new name to "
                                "model it as the new preset)", name, advertised[name], self.nodes.node_presets[i])
                self.down.discard(i)
                s.execute(update(Node).where(Node.name == name).values(alive=True, updated_at=now))
            elif not up and i not in self.down:
                self.lose_node(s, m, lifecycle, i, f"node {name} was lost", now)
                self.down.add(i)
                s.execute(update(Node).where(Node.name == name).values(alive=False, updated_at=now))
        return before != self.down

    def lose_node(self, s: Session, m: Memory, lifecycle: LifeCycle, node: int, why: str, now: float) -> None:
        """Node `node` is gone: every run with a GPU there is stopped and lost (requeued or failed by its policy)."""
        for job_id in runs_on_node(m.running, self.nodes.cluster, node):
            self.workers.stop(job_id)
            row = s.get(JobRow, job_id)
            assert row is not None
            lifecycle.lose(s, row, why, now)

    def read_conditions(self, s: Session, now: float) -> bool:
        """Read the admins' drains and the node agents' GPU reports from the store; True if what they close changed.
        A stale report closes nothing (`gpu_faults`)."""
        self.last_conditions = now
        drained, faults = conditions(s.execute(select(*CONDITION_COLUMNS)),
                                     spans(self.nodes.cluster, self.nodes.node_names), now)
        if drained == self.drained and faults == self.faults:
            return False
        for g in faults.keys() - self.faults.keys():
            log.warning("GPU %d is faulty: %s", g, faults[g])
        for g in self.faults.keys() - faults.keys():
            log.info("GPU %d is healthy again", g)
        self.drained, self.faults = drained, faults
        return True

    def read_drains(self, s: Session) -> bool:
        """The admins' drains, at every pass that may place (the GPU reports wait for `read_conditions`): a drain the
        API acknowledged binds this pass's placements. FOR SHARE (`nodes.DRAIN_COLUMNS`) makes a drain committing
        meanwhile wait for this pass on PostgreSQL (SQLite's write transactions are serial already). True if the
        drains changed."""
        drained = drains(s.execute(select(*DRAIN_COLUMNS).with_for_update(read=True)), self.nodes.node_index)
        if drained == self.drained:
            return False
        self.drained = drained
        return True

    def suspect_nodes(self, job: Job, now: float, what: str = "were lost") -> None:
        """A run of `job` was lost (or its workers never started, `what`): hold its nodes out of placement for
        SUSPECT_S (those Ray still calls alive)."""
        if job.placement is None:
            return
        at = time.strftime("%H:%M:%S", time.localtime(now))
        for i in job.placement.nodes(self.nodes.cluster):
            if i not in self.down:
                self.suspect[i] = (now + SUSPECT_S, (f"job {job.id}'s workers {what} there at {at}; it takes "
                                                     f"no new job for {SUSPECT_S:g} s unless Ray declares it dead "
                                                     "sooner"))
                self.suspects_added = True

    def suspects_changed(self, now: float) -> bool:
        """Whether the held-out nodes changed since the outages were last applied: one was added, or its hold ended
        (its time is up, or Ray has declared it dead: it is down, which closes it anyway)."""
        over = [i for i, (until, _) in self.suspect.items() if until <= now or i in self.down]
        for i in over:
            del self.suspect[i]
        changed, self.suspects_added = self.suspects_added or bool(over), False
        return changed

    def apply_outages(self, s: Session, m: Memory, lifecycle: LifeCycle, now: float) -> None:
        """The one rule (`scheduler.core.outages`), as the simulator applies it: checkpoint and requeue the runs a
        drain `--now` or a faulty GPU evicts (spending no restart), then close exactly the GPUs no new job may use."""
        placements = {j: job.placement for j, job in m.running.items() if job.placement is not None}
        nodes = spans(self.nodes.cluster, self.nodes.node_names)
        for job_id, why in eviction_reasons(nodes, placements, drained=self.drained, faults=self.faults,
                                            on_fault=self.on_fault, requeued=True).items():
            row = s.get(JobRow, job_id)
            assert row is not None
            self.workers.stop(job_id)
            lifecycle.to_pending(s, row, now, event="evicted", reason=why, attempt=row.attempt)
        m.state.set_closed(closed_gpus(nodes, down=self.down, drained=self.drained, faults=self.faults,
                                       held={i: why for i, (_, why) in self.suspect.items()}))

    def strike(self, s: Session, job: Job, ranks_up: tuple[bool, ...], now: float) -> None:
        """`job`'s workers did not start: count it against the nodes where they are not up (all its nodes if the
        backend does not say), and drain a node where the runs of `drain_after` different jobs did not start within
        START_STRIKES_WINDOW_S, as an admin's drain (by `controller`, with why; `corral node resume` ends it). Its
        running jobs may finish. Each run placed on such a node costs its job a start timeout, and a hold of
        SUSPECT_S only spaces them out."""
        if not self.drain_after or job.placement is None:
            return
        ranks = rank_specs(self.nodes.cluster, self.nodes.node_names, job.placement)
        # A gang's healthy nodes have their ranks up, waiting for the others: only the others' nodes are to blame.
        blamed = ([r.node for r, ok in zip(ranks, ranks_up, strict=True) if not ok] if len(ranks_up) == len(ranks)
                  else [])
        for name in blamed or [r.node for r in ranks]:
            recent = [(t, j) for t, j in self.start_strikes.get(name, ())
                      if t > now - START_STRIKES_WINDOW_S and j != job.id]  # one job counts once
            recent.append((now, job.id))
            self.start_strikes[name] = recent
            if len(recent) < self.drain_after:
                continue
            del self.start_strikes[name]
            jobs = ", ".join(str(j) for _, j in recent)
            reason = (f"the workers of {len(recent)} jobs ({jobs}) did not start here within "
                      f"{self.start_timeout_s:g} s, all in the last {START_STRIKES_WINDOW_S / 60:g} min: check Ray "
                      "on this node, then `corral node resume`")
            drained = cast("CursorResult[Any]", s.execute(update(Node).where(
                Node.name == name, Node.drained_at.is_(None)).values(
                drained_at=now, drained_by="controller", drain_reason=reason, drain_evict=False)))
            if drained.rowcount:  # an admin's drain already there stays as it is
                log.warning("node %s drained: %s", name, reason)
                self.last_conditions = -math.inf  # read at this pass, so the drain closes its GPUs at once

    def update(self, s: Session, m: Memory, lifecycle: LifeCycle, nodes: list[NodeInfo] | None, now: float,
               placing: bool) -> None:
        """The pass's node step: nodes lost or back (when the node table was read), drains and GPU reports (every
        NODES_EVERY_S; drains at every pass that may place), suspects whose hold ended; then, if any of it changed
        what is closed, the outages applied."""
        changed = False
        if nodes is not None:
            changed = self.check_nodes(s, m, lifecycle, nodes, now)
        if now - self.last_conditions >= NODES_EVERY_S:
            changed = self.read_conditions(s, now) or changed
        if m.pending and placing:
            changed = self.read_drains(s) or changed
        changed = self.suspects_changed(now) or changed
        if changed:
            self.apply_outages(s, m, lifecycle, now)

"""The live scheduling loop: the simulator's loop with real I/O.

The same `ClusterState`, `ContentionModel` and `Policy` interface as `scheduler.core.simulator`; what differs is where
events come from (the store: submissions and cancel requests; the backend: workers starting, exiting, lost) and what
decisions do (rows in the store, workers on Ray). The controller is the only writer of placements.

Crash safety rests on one ordering: a placement is committed to the store *before* its workers are launched, and
workers have deterministic names (job, attempt, rank). So after a crash at any point, `recover()` finds every job
the store says is running and either adopts its workers (still alive: keep) or treats the run as lost (requeue or
fail by the job's restart policy); workers the store does not know are killed. No job is lost, none runs twice.

Events wake the loop at once (`wake()`, called by the API); a periodic tick polls the workers and catches writes
from other processes. As in the simulator, the policy is asked only when something it sees changed (the queue, the
runs, a worker start, a node, the policy or the teams) or at a time it asked to be woken (`WakeAt`): a pass where
nothing changed polls and reads but leaves the policy's last answer standing.

Several `corral serve` replicas may share one PostgreSQL store and one Ray cluster (`scheduler.live.leader`): the
controller schedules only while its replica holds the lease. Taking over is `recover()` (the same as a restart: adopt,
requeue what cannot be adopted, reap the rest); every pass ends with the lease's fence inside its transaction, so a
deposed leader's pass rolls back; and the pass stops or forgets workers only after its commit (`_AfterCommit`), so
a deposed leader never touches the workers its successor adopted. It then stands by, its memory emptied.

The controller is the loop, the leadership and recovery; each concern of a pass is a room of `scheduler.live.control`
(what users asked, the nodes' health, what the workers did, the policy), run as the ordered, named steps of
`Controller._steps`. A job's state changes only through `scheduler.live.lifecycle`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from scheduler.core.contention import ContentionModel, ContentionParams
from scheduler.core.decisions import Policy
from scheduler.core.elastic import RESIZE_INTERVAL_S
from scheduler.core.generic import ProfileBook, known_profiles
from scheduler.core.model import Cluster, Job
from scheduler.core.outages import OnFault
from scheduler.core.progress import runs_on_node
from scheduler.core.reasons import Code, Reason
from scheduler.core.reservations import ReservationRule
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.tenancy import DEFAULT_HALF_LIFE_S
from scheduler.core.workloads import ModelProfile
from scheduler.live.control.health import NODES_EVERY_S, SUSPECT_S, NodeHealth
from scheduler.live.control.intake import CHANGES_REREAD_S, FULL_SYNC_S, Intake
from scheduler.live.control.membership import Membership
from scheduler.live.control.memory import Memory
from scheduler.live.control.placing import PassContext, Placing, StepStats
from scheduler.live.control.recovery import adopt_runs
from scheduler.live.control.reports import Reports
from scheduler.live.control.workers import Workers
from scheduler.live.job_accounts import JobAccounts
from scheduler.live.leader import Leadership, NotLeader, SoleLeader
from scheduler.live.lifecycle import LifeCycle
from scheduler.live.nodes import register_nodes
from scheduler.live.rows import launch_of, rank_specs
from scheduler.live.runs import (
    DEFAULT_LOG_LIMIT_BYTES,
    START_STRIKES,
    START_TIMEOUT_S,
    Backend,
    JobStatus,
    Launch,
    NodeInfo,
    RankSpec,
    actor_name,
)
from scheduler.live.store.db import Store
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import JobState as S

log = logging.getLogger(__name__)

__all__ = ["CHANGES_REREAD_S", "FULL_SYNC_S", "NODES_EVERY_S", "SUSPECT_S", "Controller", "StepStats"]

STARTING_TICK_S = 0.02  # the loop's period while a launched gang waits for its workers
MIN_PASS_INTERVAL_S = 0.05  # under a burst of events, one pass per 50 ms takes them all
REAP_EVERY_S = 30.0  # how often the leader kills workers no run of its own has (see `_reap_strays`)
STANDBY_TICK_S = 1.0  # a standby's loop looks at the lease this often (the lease's thread also wakes it)

Step = Callable[[Session, PassContext], None]


class Controller:
    def __init__(
        self,
        store: Store,
        backend: Backend,
        cluster: Cluster,
        node_names: list[str],
        make_policy: Callable[[str], Policy],
        *,
        default_policy: str = "rl:default",
        tick_s: float = 0.5,
        profiles: Mapping[str, ModelProfile] | None = None,
        params: ContentionParams | None = None,
        preset: str = "",
        node_presets: Sequence[str] | None = None,
        accounts: JobAccounts | None = None,
        log_limit_bytes: int = DEFAULT_LOG_LIMIT_BYTES,
        half_life_s: float = DEFAULT_HALF_LIFE_S,
        nodes_from_store: bool = False,
        leadership: Leadership | None = None,
        on_fault: OnFault = OnFault.REQUEUE,
        reservations: ReservationRule | None = None,
        fabric: str | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        drain_after: int = START_STRIKES,
        resize_interval_s: float = RESIZE_INTERVAL_S,
    ) -> None:
        """The controller of `store`'s jobs on `backend`'s workers, over `cluster` (its nodes named `node_names`, in
        the model's order; each modelled as `node_presets` says, else `preset`, on `fabric`). `make_policy` builds a
        policy by name (the store's active one, else `default_policy`); `reservations` and `half_life_s` are the
        scheduling rules' settings (`corral serve --reserve-*`, the teams' fair-share half-life). `tick_s`: the loop's
        period when nothing wakes it. `accounts`: the OS accounts command jobs run as; `log_limit_bytes` caps a rank's
        log. `leadership`: the lease replicas share (default: this one alone). `on_fault`, `start_timeout_s`,
        `drain_after`: what a faulty GPU's runs do, how long workers may take to start, after how many start
        failures a node is drained. `resize_interval_s`: the least time between two resizes of an elastic job
        (`scheduler.core.resizing`). `nodes_from_store`: take the store's node numbering when recovering (a Ray
        cluster shared with other replicas)."""
        self.store = store
        self.backend = backend
        self.workers = Workers(backend)
        self.nodes = Membership(cluster, node_names, node_presets, preset, fabric)
        # A book the refined profiles of jobs that named no model join (`scheduler.live.generic_profiles`).
        self.profiles = ProfileBook(profiles if profiles is not None else known_profiles())
        self.params = params
        self.tick_s = tick_s
        self.accounts = accounts or JobAccounts()  # the OS accounts command jobs run as (docs/security.md)
        self.log_limit_bytes = log_limit_bytes
        # A Ray cluster that outlives this process (or is shared with a standby replica): the store's node numbering
        # is the truth, and recovering takes it (`Membership.take_store_numbering`).
        self.nodes_from_store = nodes_from_store
        # Whether this replica may schedule (default: it alone writes the store, e.g. SQLite; see scheduler.live.leader)
        self.leadership: Leadership = leadership if leadership is not None else SoleLeader()
        self.leading = False  # this controller has taken over (recovered) and schedules; False: it stands by
        self.health = NodeHealth(self.nodes, self.workers, on_fault=on_fault, start_timeout_s=start_timeout_s,
                                 drain_after=drain_after)
        self.placer = Placing(make_policy, default_policy, reservations, half_life_s)
        self.resize_interval_s = resize_interval_s
        self._forget_memory()
        self._in_sync = True  # memory matches the store (false after a failed pass, until rebuilt)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error = ""
        self.placing = True  # False while the server shuts down: runs end and are recorded, nothing new starts

    def _forget_memory(self) -> None:
        """Empty in-memory state: `recover()` rebuilds it from the store (at start, and after a failed pass)."""
        self.m = Memory(self.cluster, self.profiles, self.params, self.workers, mps_one_user=self.accounts.per_user)
        self.m.view.resize_interval_s = self.resize_interval_s
        self.lifecycle = LifeCycle(self.m, self.profiles)
        self.intake = Intake(self.m, self.lifecycle, self.workers, self.cluster, self.profiles, time.time())
        self.reports = Reports(self.m, self.lifecycle, self.workers, self.health)
        self.health.forget()
        self.placer.forget()
        self._starting = True  # some launched run's workers may not all be up yet
        self._last_poll = 0.0
        self._last_reap = time.time()  # `recover()` has just reaped

    # ---- what the rest of the service and the tests read of the model and the policy ----------------------------

    @property
    def cluster(self) -> Cluster:
        return self.nodes.cluster

    @property
    def node_names(self) -> list[str]:
        return self.nodes.node_names

    @property
    def node_presets(self) -> list[str]:
        return self.nodes.node_presets

    @property
    def running(self) -> dict[int, Job]:
        return self.m.running

    @property
    def pending(self) -> dict[int, Job]:
        return self.m.pending

    @property
    def state(self) -> ClusterState:
        return self.m.state

    @property
    def view(self) -> ClusterView:
        return self.m.view

    @property
    def contention(self) -> ContentionModel:
        return self.m.contention

    @property
    def policy(self) -> Policy | None:
        return self.placer.policy

    @property
    def policy_name(self) -> str:
        return self.placer.policy_name

    @property
    def preset(self) -> str:
        return self.nodes.preset

    @property
    def fabric(self) -> str | None:
        return self.nodes.fabric

    # `corral serve --start-timeout` and `--drain-after`, held by the rooms that apply them (settable, for tests).
    @property
    def start_timeout_s(self) -> float:
        return self.health.start_timeout_s

    @start_timeout_s.setter
    def start_timeout_s(self, value: float) -> None:
        self.health.start_timeout_s = value

    @property
    def drain_after(self) -> int:
        return self.health.drain_after

    @drain_after.setter
    def drain_after(self, value: int) -> None:
        self.health.drain_after = value

    def _scene(self) -> tuple[object, ...]:
        """What the policy's answer depends on besides the clock, each room's part of it: which view and policy, the
        changes of live jobs taken in, the nodes down, the queue and its gates, the runs and whether their workers are
        up, the GPUs closed. The policy is asked again only when this changed (or at a time it asked to be woken)."""
        return (*self.placer.scene(), *self.intake.scene(), *self.health.scene(), *self.m.scene())

    def _ranks(self, job: Job) -> list[RankSpec]:
        assert job.placement is not None
        return rank_specs(self.cluster, self.node_names, job.placement)

    def _launch_spec(self, row: JobRow, job: Job, attempt: int) -> Launch:
        return launch_of(row, job, attempt, self._ranks(job), self.accounts, self.store.id, self.log_limit_bytes)

    # ---- start-up ------------------------------------------------------------------------------------------------

    def recover(self, *, after_failure: bool = False) -> None:
        """Rebuild the state from the store and reconcile it with the workers Ray still runs: at start (`corral serve`
        restarted: its workers are adopted) or, `after_failure`, in this same process after a pass failed half-way
        (nothing restarted: a job this controller was already running and still is gets no event). The pending jobs
        are admitted on the model as new submissions are (`Intake.admit`): one the cluster can never run any more fails
        saying why (at start and on taking over only: `after_failure`, after a node joined or was relabelled, it stays
        queued), an elastic one is brought down to a size it holds; a node that is down fails none."""
        tracked = set(self.m.running) if after_failure else set()
        if self.nodes_from_store:
            self.nodes.take_store_numbering(self.store)
        self._forget_memory()
        now = time.time()
        self._register_nodes(now)
        epoch = self.leadership.epoch
        who = (f"the controller leading from epoch {epoch}" if epoch is not None else "the restarted controller")
        m = self.m
        with self.workers.after_commit(), self.store.session(write=True) as s:
            self.placer.load_policy(s, m)
            keep, lost = adopt_runs(s, m, self.workers, self.cluster.num_gpus, self.profiles, self._launch_spec, now,
                                    tracked=tracked, adopted_words="the controller, resynchronising after a failed "
                                    "pass, found its workers running" if after_failure else
                                    f"{who} found its workers running")
            for job_id in lost:
                row = s.get(JobRow, job_id)
                assert row is not None
                self.lifecycle.lose(s, row, "its workers were gone when the controller resynchronised after a "
                                    "failed pass" if after_failure else f"its workers were gone when {who} started",
                                    now)
            # Nodes Ray reports dead leave the model; a run adopted there a moment ago cannot be alive either.
            for i in self.health.down:
                for job_id in runs_on_node(m.running, self.cluster, i):
                    keep.difference_update(actor_name(job_id, m.attempt[job_id], r.rank)
                                           for r in self._ranks(m.running[job_id]))
                self.health.lose_node(s, m, self.lifecycle, i, f"node {self.node_names[i]} is down", now)
            self.health.read_conditions(s, now)
            self.health.apply_outages(s, m, self.lifecycle, now)
            # The queue, each job admitted as a new submission is (`Intake.admit`): the cluster may have shrunk while
            # no controller ran, or a job was accepted while no node was recorded alive.
            rejected = 0
            for row in s.scalars(select(JobRow).where(JobRow.state == S.PENDING).options(joinedload(JobRow.user))
                                 .order_by(JobRow.id)).all():
                job = self.intake.admit(s, row, now, reject=not after_failure)
                if job is None:
                    rejected += 1
                    continue
                m.book.append(job)
                if row.not_before is not None and row.not_before > now:
                    m.gates.backoff[row.id] = row.not_before
            self.leadership.fence(s)  # a replica that lost the lease meanwhile must not requeue what another adopted
        self.workers.reap_orphans(keep)
        for job in m.running.values():
            m.set_rate(job)
        log.info("recovered: %d running (%d lost), %d pending (%d rejected: the cluster can never run them)",
                 len(m.running), len(lost), len(m.pending), rejected)

    def _register_nodes(self, now: float) -> None:
        reported = self.workers.nodes()
        with self.store.session(write=True) as s:
            self.health.down |= register_nodes(s, reported, self.cluster, self.node_names, self.node_presets, now)
        self.health.seen_venvs(reported)

    # ---- the loop ------------------------------------------------------------------------------------------------

    def wake(self) -> None:
        """Something happened (a submission, a cancel, a policy switch): run a pass now."""
        self._wake.set()

    def start(self) -> None:
        """Take part in the leadership (at once: a lone replica leads from its first pass, having recovered here, so a
        broken store fails `corral serve` at start) and run the loop in a thread; a standby's loop waits."""
        self.leadership.start(self.wake)
        if self.leadership.leading:
            self._take_over()
        else:
            log.warning("standing by: another replica's controller leads (%s)", self.leadership.status())
        self._thread = threading.Thread(target=self._run, name="corral-controller", daemon=True)
        self._thread.start()

    def stop(self, *, checkpoint: str | None = None) -> None:
        """End the loop. With `checkpoint` (why: the server shuts down and its local Ray cluster goes with it), every
        running job is then checkpointed and requeued (`checkpoint_all`) while this replica still leads."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.health.close()
        if checkpoint is not None:
            try:
                self.checkpoint_all(checkpoint)
            except NotLeader as exc:  # another replica leads now: the runs are its to adopt or requeue
                log.warning("not checkpointing the running jobs: %s", exc)
        self.leadership.stop()  # after the last pass: a standby takes over at once, with nothing in flight here

    def stop_placing(self) -> None:
        """The server is shutting down: keep collecting what the workers do, start nothing more (`corral serve
        --drain-timeout`: running jobs may end on their own before the rest are checkpointed)."""
        self.placing = False
        self.wake()

    def checkpoint_all(self, why: str, grace_s: float | None = None) -> list[int]:
        """Stop every run this controller leads (each worker gets SIGTERM and its grace period to checkpoint) and put
        its job back in the queue in its old place, spending none of its restarts: the server is shutting down and
        takes its local Ray cluster with it, which is no fault of the job's. Waits for the workers to finish their
        checkpoints (up to `grace_s`, default the backend's). Called by `stop(checkpoint=...)`, once no pass runs.
        Returns the jobs requeued."""
        if not self.leading or not self.m.running:
            return []
        now = time.time()
        reason = Reason(Code.CHECKPOINTED, {"detail": why})
        with self.workers.after_commit(), self.store.session(write=True) as s:
            requeued = list(self.m.running)
            for job_id in requeued:
                row = s.get(JobRow, job_id)
                assert row is not None
                self.workers.stop(job_id)
                self.lifecycle.to_pending(s, row, now, event="checkpointed", reason=reason, attempt=row.attempt)
            self.leadership.fence(s)
        wait_for_checkpoints = getattr(self.backend, "settle", None)
        if wait_for_checkpoints is not None:  # the workers write their checkpoints within their grace period
            wait_for_checkpoints(grace_s)
        log.info("checkpointed and requeued %d running job(s): %s", len(requeued), why)
        return requeued

    def _take_over(self) -> None:
        """Lead: rebuild from the store and adopt the running workers (what a restart does), then schedule."""
        if self.leadership.epoch is not None:
            log.warning("leading with epoch %d: adopting the running workers", self.leadership.epoch)
        self.recover()
        self.leading = True
        self._in_sync = True

    def _step_down(self, why: str) -> None:
        """Stop scheduling without ending a worker: the new leader adopts them (or has already). Memory is emptied;
        taking the lease again means recovering from the store again."""
        log.warning("not leading any more (%s): standing by", why)
        self.workers.disown()
        self._forget_memory()
        self.leading = False
        self._in_sync = True

    def status(self) -> dict[str, Any]:
        """This replica's role and the lease, for `GET /health` and the dashboard."""
        return {"controller": "leader" if self.leading and self.leadership.leading else "standby",
                "replica": self.leadership.replica, **self.leadership.status()}

    def _run(self) -> None:
        while not self._stop.is_set():
            # Poll fast while workers are coming up (a gang starts at the first poll that finds all of it up).
            tick = (STARTING_TICK_S if self._starting else self.tick_s) if self.leading else STANDBY_TICK_S
            self._wake.wait(min(tick, max(0.0, self.placer.wake_at - time.time())))
            self._wake.clear()
            try:
                if not self.leadership.leading:
                    if self.leading:
                        self._step_down("the lease lapsed or another replica took it")
                    continue
                if not self.leading:
                    self._take_over()
                elif not self._in_sync:  # a pass failed half-way: memory may disagree with the store, the truth
                    self.recover(after_failure=True)
                    self._in_sync = True
                self.step()
                self.last_error = ""
            except NotLeader as exc:  # the fence refused this pass: it rolled back, and no worker was touched
                self._step_down(str(exc))
            except Exception as exc:  # keep serving (e.g. the database restarting): log, rebuild, carry on
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._in_sync = False
                log.exception("controller pass failed; its state will be rebuilt from the store")
                time.sleep(self.tick_s)
            # Under a burst of submissions, let them gather for a moment: one pass then takes them all.
            time.sleep(MIN_PASS_INTERVAL_S)

    def ask_next_pass(self) -> None:
        """Have the next pass ask the policy even if nothing it sees changed (its last answer is otherwise kept): what
        a benchmark of the decision time, or an operator who changed something the scene does not cover, needs."""
        self.placer.asked = ()

    # ---- one pass ------------------------------------------------------------------------------------------------

    def step(self) -> StepStats:
        """One pass: poll the workers and the node table, then run `_steps` in one transaction, then launch what it
        placed (only after its commit: see the module docstring)."""
        if not self.leadership.leading:  # before the poll, which may start gangs: a deposed leader touches no worker
            raise NotLeader("the lease lapsed or another replica took it")
        stats = StepStats()
        now = time.time()
        statuses, nodes = self._poll(now, stats)
        self.m.view.now = now  # (after a node joined, the view is a new one)
        ctx = PassContext(now, self.m, self.lifecycle, self.workers, self.nodes, stats, accounts=self.accounts,
                          store_id=self.store.id, log_limit_bytes=self.log_limit_bytes,
                          epoch=self.leadership.epoch, arrays_pending=False)
        with self.workers.after_commit(), self.store.session(write=True) as s:  # stops only once it committed
            for _name, run in self._steps(statuses, nodes):
                run(s, ctx)
        if now - self._last_reap >= REAP_EVERY_S:
            self._last_reap = now
            self._reap_strays()
        for launch in ctx.launches.values():
            # At the rate the pass ended with: a neighbour placed after it in the same pass slowed it before its
            # workers existed to be told (the rate in the launch is the one it was placed with).
            job = self.m.running.get(launch.job_id)
            self.workers.launch(launch if job is None else dataclasses.replace(launch, rate=job.rate))
        if ctx.launches:
            self._starting = True
        return stats

    def _steps(self, statuses: list[JobStatus], nodes: list[NodeInfo] | None) -> list[tuple[str, Step]]:
        """One pass, in order: each step a room's (`scheduler.live.control`). Where the order matters, it says why."""
        m, intake, reports, placer = self.m, self.intake, self.reports, self.placer
        return [
            ("load the policy", lambda s, c: placer.load_policy(s, m)),
            ("take submissions", lambda s, c: intake.take_submissions(s, c.now)),
            ("take cancels", lambda s, c: intake.take_cancels(s, c.now)),
            ("take changes", lambda s, c: intake.take_changes(s, c.now)),  # before the limits: a new one counts
            ("enforce time limits", lambda s, c: reports.enforce_time_limits(s, c.now)),
            ("collect worker reports", lambda s, c: self._collect(s, c, statuses)),
            # After the reports: runs that started just now count as started.
            ("enforce start deadlines", lambda s, c: reports.enforce_start_deadline(s, c.now)),
            # After them too: a run that ended just now is not run again.
            ("take requeues", lambda s, c: intake.take_requeues(s, c.now)),
            ("read holds", lambda s, c: placer.reexplain(intake.read_holds(s))),
            ("resolve dependencies", lambda s, c: intake.resolve_dependencies(s, c.now)),
            ("node health", lambda s, c: self.health.update(s, m, self.lifecycle, nodes, c.now, self.placing)),
            ("place", self._place),
            ("write reasons", lambda s, c: m.reasons.write(s, m.pending)),
            # Last, in the same transaction: this pass's placements (and every other write) commit only if its
            # replica still holds the lease with the epoch they were made under.
            ("fence", lambda s, c: self.leadership.fence(s)),
        ]

    def _poll(self, now: float, stats: StepStats) -> tuple[list[JobStatus], list[NodeInfo] | None]:
        """The workers' statuses and (every NODES_EVERY_S) the node table, at most every half tick unless workers are
        coming up; nodes that joined or moved racks are taken into the model first (the state is rebuilt)."""
        if not (self._starting or now - self._last_poll >= self.tick_s * 0.5):
            return [], None
        t0 = time.perf_counter()
        nodes = self.health.read_nodes(now)
        stats.ray_s += time.perf_counter() - t0
        joined = [n for n in nodes or () if n.alive and n.name not in self.nodes.node_index]
        if joined:  # rare, so the simplest correct rebuild: it takes the policy's caches, built for the old cluster
            self.nodes.grow(joined)
            self.recover(after_failure=True)
        moved = self.nodes.moved(nodes or ())
        if moved:
            self.nodes.move(moved)
            self.recover(after_failure=True)
        t0 = time.perf_counter()
        statuses = self.workers.poll()
        if nodes is None and any(st.phase == "lost" for st in statuses):
            nodes = self.health.read_now(now)
        stats.ray_s += time.perf_counter() - t0
        self._last_poll = now
        self._starting = any(st.phase == "starting" for st in statuses)
        return statuses, nodes

    def _collect(self, s: Session, ctx: PassContext, statuses: list[JobStatus]) -> None:
        ctx.stats.finished += self.reports.collect(s, statuses, ctx.now)

    def _place(self, s: Session, ctx: PassContext) -> None:
        """As the simulator does, the policy is asked when something it sees changed (`_scene`) or at a time it asked
        to be woken (`WakeAt`), not at every tick: its last answer stands until then, and a pass with 1,000 queued
        stays cheap. Then every job still pending gets a reason. With none pending it is asked only while a running
        elastic job could grow (`scheduler.core.runner`)."""
        if not ((self.m.pending or self.m.view.growable) and self.placer.policy is not None and self.placing):
            return
        if self._scene() != self.placer.asked or ctx.now >= self.placer.wake_at:
            self.placer.wake_at = float("inf")
            ctx.arrays_pending = self.intake.arrays_pending
            self.placer.schedule(s, ctx)
            self.placer.asked = self._scene()
        self.placer.explain_waits(self.m)

    def _reap_strays(self) -> None:
        """Kill Corral workers that belong to no run of this leader: those a deposed leader launched after its
        successor had taken over (it paused between committing a placement and launching it; the successor found the
        run without workers and requeued it, so they run an attempt nobody tracks, holding GPUs). Only after this
        pass's commit, whose fence proved the lease, and before its own launches: every worker of a tracked run is
        named in `keep`."""
        keep = {actor_name(j, self.m.attempt[j], r.rank) for j, job in self.m.running.items()
                if job.placement is not None for r in self._ranks(job)}
        killed = self.workers.reap_orphans(keep)
        if killed:
            log.warning("killed %d stray worker(s) that no run of this controller owns: %s", len(killed),
                        ", ".join(sorted(killed)))

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
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, cast

from sqlalchemy import CursorResult, Table, and_, bindparam, or_, select, update
from sqlalchemy.orm import Session, joinedload

from scheduler.core.contention import ContentionModel, ContentionParams
from scheduler.core.decisions import Decision, Place, Policy, Preempt, Wait, WakeAt
from scheduler.core.dependencies import Outcome, array_waits, readiness
from scheduler.core.model import Cluster, Job, Placement
from scheduler.core.outages import Drain, OnFault, closed_gpus, eviction_reasons, spans
from scheduler.core.progress import in_queue_order, progress_rate, runs_on_node
from scheduler.core.reasons import Code, Reason
from scheduler.core.reservations import ReservationRule, frame_policy
from scheduler.core.runner import settle
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.tenancy import DEFAULT_HALF_LIFE_S, Team, Teams, TenancyFrame
from scheduler.core.workloads import ModelProfile, catalog
from scheduler.live import metrics
from scheduler.live.cluster import ModelNode, model_cluster, node_preset, node_rack, racks_of
from scheduler.live.explain import capacity_reason
from scheduler.live.job_accounts import JobAccounts
from scheduler.live.job_states import outcome as job_outcome
from scheduler.live.leader import Leadership, NotLeader, SoleLeader
from scheduler.live.nodes import CONDITION_COLUMNS, DRAIN_COLUMNS, conditions, drains, register_nodes
from scheduler.live.retries import retry_delay, retry_reason
from scheduler.live.rows import job_of, launch_of, rank_specs, reject_reason
from scheduler.live.runs import (
    DEFAULT_LOG_LIMIT_BYTES,
    START_STRIKES,
    START_STRIKES_WINDOW_S,
    START_TIMEOUT_S,
    Backend,
    JobStatus,
    Launch,
    NodeInfo,
    RankSpec,
    actor_name,
)
from scheduler.live.slowdown import SlowdownLedger
from scheduler.live.store import queries
from scheduler.live.store.db import Store
from scheduler.live.store.models import Allocation, JobType, Node, RestartPolicy
from scheduler.live.store.models import Decision as DecisionRow
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import JobState as S
from scheduler.live.team_usage import Held, history_start, usage_series
from scheduler.live.worker import STOP_GRACE_S

log = logging.getLogger(__name__)

STARTING_TICK_S = 0.02  # the loop's period while a launched gang waits for its workers
MIN_PASS_INTERVAL_S = 0.05  # under a burst of events, one pass per 50 ms takes them all
FULL_SYNC_S = 5.0  # a full scan of the pending jobs at least this often
# Ray's node table is read at most this often (a read costs about as much as the rest of a settled pass): a node
# that joins or leaves is seen up to 1 s later, well inside issue 14's 10 s, and Ray's own death detection is longer.
NODES_EVERY_S = 1.0
REAP_EVERY_S = 30.0  # how often the leader kills workers no run of its own has (see `_reap_strays`)
STANDBY_TICK_S = 1.0  # a standby's loop looks at the lease this often (the lease's thread also wakes it)
# A node where a run's workers were just lost takes no new job for this long: a partitioned or dying node loses its
# workers (seconds) well before Ray declares it dead (tens of seconds), and a job requeued onto it would be lost again,
# spending a second restart. Ray declaring the node dead ends the hold sooner (it is then down, closed as such).
SUSPECT_S = 60.0
# The API's changes of live jobs are read again for this long after they were made: the API stamps a change before its
# transaction ends (it also computes the job's answer, start estimate included), so on PostgreSQL a change can commit
# well after a pass read past its stamp. Reading one again changes nothing.
CHANGES_REREAD_S = 60.0


# The statements every pass runs, built once (building one costs as much as running it on SQLite).
_NEW_OR_CANCELLED = select(JobRow.id, JobRow.state).where(or_(
    and_(JobRow.state == S.PENDING, JobRow.id > bindparam("max_seen")),
    and_(JobRow.state == S.CANCELLED, JobRow.finished_at >= bindparam("since"))))
_CANCEL_REQUESTED = select(JobRow).where(JobRow.state == S.RUNNING, JobRow.cancel_requested.is_(True))
_ON_HOLD = select(JobRow.id, JobRow.held_by).where(JobRow.held_at.is_not(None), JobRow.state == S.PENDING)
_CHANGED = select(JobRow.id, JobRow.time_limit_s, JobRow.priority, JobRow.requeue_by).where(
    JobRow.changed_at >= bindparam("since"))
_JOBS_BY_ID = select(JobRow).where(JobRow.id.in_(bindparam("ids", expanding=True)))


class _AfterCommit:
    """The backend as one unit of work sees it: `stop` and `forget` (which end workers) wait until the unit's
    transaction has committed, and are dropped if it does not. So a pass the fence refuses (a deposed leader's) or that
    fails half-way leaves every worker as the store says it is: the new leader adopts them, or the rebuilt state
    does, instead of finding them killed by a decision that was never recorded."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._queued: list[tuple[Callable[[int], None], int]] = []

    def nodes(self) -> list[NodeInfo]:
        return self.backend.nodes()

    def launch(self, launch: Launch) -> None:
        self.backend.launch(launch)

    def adopt(self, launch: Launch) -> bool:
        return self.backend.adopt(launch)

    def reap_orphans(self, keep: set[str]) -> list[str]:
        return self.backend.reap_orphans(keep)

    def set_rate(self, job_id: int, rate: float) -> None:
        self.backend.set_rate(job_id, rate)  # only an emulated worker's pace: harmless if the pass rolls back

    def stop(self, job_id: int) -> None:
        self._queued.append((self.backend.stop, job_id))

    def forget(self, job_id: int) -> None:
        self._queued.append((self.backend.forget, job_id))

    def poll(self) -> list[JobStatus]:
        return self.backend.poll()

    def disown(self) -> None:
        self.backend.disown()

    def flush(self) -> None:
        """The transaction committed: carry the queued calls out, in order."""
        for call, job_id in self._queued:
            call(job_id)
        self._queued.clear()


@dataclass
class StepStats:
    """What one pass of the loop did (for tests, logs and the benchmark)."""

    placed: int = 0
    preempted: int = 0
    finished: int = 0
    policy_calls: int = 0
    policy_s: float = 0.0
    ray_s: float = 0.0  # waiting on Ray: the workers' statuses and the node table (when this pass polled)


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
    ) -> None:
        if len(node_names) != cluster.num_nodes:
            raise ValueError(f"{len(node_names)} node names for a cluster of {cluster.num_nodes} nodes")
        if node_presets is not None and len(node_presets) != cluster.num_nodes:
            raise ValueError(f"{len(node_presets)} node presets for a cluster of {cluster.num_nodes} nodes")
        self.store = store
        self.backend = backend
        self.cluster = cluster
        self.node_names = node_names
        # The preset each node is modelled with, in the model's order: its own (it travels with the node, see
        # `node_resources`), or `preset` (`corral serve --preset`) for a node that advertises none.
        self.node_presets = list(node_presets) if node_presets is not None else [preset] * len(node_names)
        self.node_index = {n: i for i, n in enumerate(node_names)}
        self.make_policy = make_policy
        self.default_policy = default_policy
        self.tick_s = tick_s
        self.preset = preset  # the fallback preset
        self.accounts = accounts or JobAccounts()  # the OS accounts command jobs run as (docs/security.md)
        self.log_limit_bytes = log_limit_bytes
        self.half_life_s = half_life_s  # of the teams' fair-share usage
        self.on_fault = on_fault  # what a faulty GPU's runs do (`corral serve --on-gpu-fault`)
        self.reservations = reservations  # `corral serve --reserve-after/--reserve-share` (None: no reservations)
        self.fabric = fabric  # the fabric preset `cluster` sits on (`corral serve --fabric`), kept as nodes join
        self.start_timeout_s = start_timeout_s  # `corral serve --start-timeout` (`_enforce_start_deadline`)
        self.drain_after = drain_after  # `corral serve --drain-after` (`_strike`; 0: never)
        # node name -> (when, job) of the recent runs whose workers did not start there (`_strike`). Names, not model
        # positions: a node joining renumbers the model. In memory only: a new leader starts counting afresh.
        self._start_strikes: dict[str, list[tuple[float, int]]] = {}
        # A Ray cluster that outlives this process (or is shared with a standby replica): the store's node numbering
        # is the truth, and recovering takes it (see `_take_store_numbering`).
        self.nodes_from_store = nodes_from_store
        self.profiles = profiles if profiles is not None else catalog()
        self.params = params
        # Whether this replica may schedule (default: it alone writes the store, e.g. SQLite; see scheduler.live.leader)
        self.leadership: Leadership = leadership if leadership is not None else SoleLeader()
        self.leading = False  # this controller has taken over (recovered) and schedules; False: it stands by
        self._forget_memory()
        self._in_sync = True  # memory matches the store (false after a failed pass, until rebuilt)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error = ""
        self._node_reader: ThreadPoolExecutor | None = None  # reads Ray's node table off the pass (`_read_nodes`)
        self.placing = True  # False while the server shuts down: runs end and are recorded, nothing new starts

    _generation = 0  # bumped whenever the view or the policy is replaced (see `_scene`)

    def _forget_memory(self) -> None:
        """Empty in-memory state: `recover()` rebuilds it from the store (at start, and after a failed pass)."""
        # Jobs of different users run as different OS accounts: one node's MPS daemon serves one of them at a time.
        self.state = ClusterState(self.cluster, self.profiles, mps_one_user=self.accounts.per_user)
        self.contention = ContentionModel(self.cluster, self.profiles, self.params)
        self.running: dict[int, Job] = {}
        self.pending: dict[int, Job] = {}  # submission order
        self.view = ClusterView(self.state, self.contention, self.running)
        self.policy: Policy | None = None  # what the loop asks: the active policy, inside the tenancy frame if any
        self.inner: Policy | None = None  # the active policy itself
        self.policy_name = ""
        self._teams_key: tuple[tuple[str, float, float | None], ...] | None = None
        self._attempt: dict[int, int] = {}  # running job -> its current attempt
        self._started: dict[int, bool] = {}  # running job -> its workers have started
        self.slowdowns = SlowdownLedger()
        # pending job -> the reason last written to the store, with the time the policy holds it until at the latest
        # (a `Wait`'s `until`; None: not bounded, or not the policy's reason), stored beside it as `pending_until`
        self._reasons: dict[int, tuple[Reason, float | None]] = {}
        # set this pass, written at its end (`_write_reasons`)
        self._unwritten: dict[int, tuple[Reason, float | None]] = {}
        self._policy_said: set[int] = set()  # pending jobs the policy gave a reason for since the last explanation
        self._reasons_key: tuple[object, ...] = ()
        # Pending jobs whose reason is what the cluster lacks for them, computed on the capacity `_capacity_key` says.
        self._capacity_said: set[int] = set()
        self._capacity_key: tuple[object, ...] = ()
        self._held: dict[int, float] = {}  # pending job -> the time a retry's backoff holds it until
        self._waiting: dict[int, Reason] = {}  # pending job -> what its dependencies wait for (`_resolve_dependencies`)
        self._on_hold: dict[int, Reason] = {}  # pending job its owner or an admin holds -> its reason (`_read_holds`)
        self._arrays_pending = False  # some pending job is a task of an array with max_running
        self._throttled: set[int] = set()  # an array's tasks beyond what it may run now (`_ready`)
        self._wake_at = float("inf")
        self._down: set[int] = set()  # nodes whose Ray node is gone
        self._drained: dict[int, Drain] = {}  # nodes an admin drained (the store's `nodes.drained_at`)
        self._suspect: dict[int, tuple[float, str]] = {}  # node -> (held out until, why): a run was lost there
        self._held_changed = False  # `_suspect` gained a node since the outages were last applied
        self._faults: dict[int, str] = {}  # cluster-wide GPU -> why its agent reports it faulty
        self._last_conditions = 0.0  # when the drains and the agents' reports were last read
        self._starting = True  # some launched run's workers may not all be up yet
        self._last_poll = 0.0
        self._last_nodes = 0.0
        self._nodes_read: Future[list[NodeInfo]] | None = None  # a read of the node table under way (`_read_nodes`)
        self._last_reap = time.time()  # `recover()` has just reaped
        self._last_sync = 0.0
        self._reported: dict[int, JobStatus] = {}  # running job -> the last status `_collect` took in
        self._last_full_sync = 0.0
        # The API's changes of live jobs (`PATCH /jobs/ID`) are read from this time on: the state rebuilt from the
        # store after it holds the earlier ones. `_changes` counts those taken in, for `_scene`.
        self._changes_read = time.time()
        self._changes = 0
        self._requeues: dict[int, str] = {}  # running job -> who asked to requeue it (`_take_requeues`)
        self._max_seen = 0  # highest job id taken in
        self._generation += 1  # a new view: what the policy was last asked about is gone
        self._asked: tuple[object, ...] = ()  # `_scene()` after the policy's last answer

    def _scene(self) -> tuple[object, ...]:
        """What the policy's answer depends on besides the clock: the queue in its order, the runs and whether their
        workers are up, the nodes down, and which view and policy (`_generation`)."""
        return (self._generation, self._changes, tuple(self.pending),
                tuple(self._started.get(j, False) for j in self.running),
                tuple(self.running), frozenset(self._down), frozenset(self.state.closed), frozenset(self._waiting),
                frozenset(self._on_hold))

    # ---- between rows and the model ---------------------------------------------------------------------------

    def _job(self, row: JobRow) -> Job:
        return job_of(row, self.profiles)

    def _placement(self, job: Job) -> list[RankSpec]:
        assert job.placement is not None
        return rank_specs(self.cluster, self.node_names, job.placement)

    def _launch_spec(self, row: JobRow, job: Job, attempt: int) -> Launch:
        return launch_of(row, job, attempt, self._placement(job), self.accounts, self.store.id, self.log_limit_bytes)

    def _ran_from(self, job_id: int) -> float | None:
        """When the job's current run's workers started (None: not running, or its workers are not up yet)."""
        job = self.running.get(job_id)
        return job.start_s if job is not None and self._started.get(job_id) else None

    # ---- start-up ------------------------------------------------------------------------------------------------

    def recover(self, *, after_failure: bool = False) -> None:
        """Rebuild the state from the store and reconcile it with the workers Ray still runs: at start (`corral serve`
        restarted: its workers are adopted) or, `after_failure`, in this same process after a pass failed half-way
        (nothing restarted: a job this controller was already running and still is gets no event)."""
        tracked = set(self.running) if after_failure else set()
        if self.nodes_from_store:
            self._take_store_numbering()
        self._forget_memory()
        now = time.time()
        self._register_nodes(now)
        keep: set[str] = set()
        lost: list[int] = []
        epoch = self.leadership.epoch
        who = (f"the controller leading from epoch {epoch}" if epoch is not None else "the restarted controller")
        backend, deferred = self.backend, _AfterCommit(self.backend)
        self.backend = deferred
        try:
            self._recover(tracked, after_failure, who, now, keep, lost)
        finally:
            self.backend = backend
        deferred.flush()
        self.backend.reap_orphans(keep)
        for job in self.running.values():
            self._set_rate(job)
        log.info("recovered: %d running (%d lost), %d pending", len(self.running), len(lost), len(self.pending))

    def _recover(self, tracked: set[int], after_failure: bool, who: str, now: float, keep: set[str],
                 lost: list[int]) -> None:
        with self.store.session(write=True) as s:
            self._load_policy(s)
            rows = s.scalars(select(JobRow).where(JobRow.state == S.RUNNING).order_by(JobRow.id)).all()
            for row in rows:
                allocs = [a for a in row.allocations if a.attempt == row.attempt and a.released_at is None]
                gpus = tuple(a.gpu for a in sorted(allocs, key=lambda a: a.gpu))
                job = self._job(row)
                if not gpus or gpus[-1] >= self.cluster.num_gpus:
                    # None recorded, or GPUs this cluster does not have (restarted with fewer local nodes): the
                    # workers went with the old cluster.
                    lost.append(row.id)
                    continue
                placement = Placement(gpus, allocs[0].share)
                self._start_in_memory(job, placement, row.attempt, now, adopt=True)
                if row.started_at is not None:
                    job.start_s = row.started_at
                    self._started[row.id] = True
                    # What ran before the crash is counted at the slowdown last recorded.
                    self.slowdowns.resume(row.id, row.predicted_slowdown or 1.0, row.started_at)
                if self.backend.adopt(self._launch_spec(row, job, row.attempt)):
                    keep.update(actor_name(row.id, row.attempt, r.rank) for r in self._placement(job))
                    if row.id not in tracked:
                        queries.add_event(s, row.id, "adopted", "the controller, resynchronising after a failed "
                                          "pass, found its workers running" if after_failure else
                                          f"{who} found its workers running")
                else:
                    lost.append(row.id)
            for job_id in lost:
                self._lose(s, job_id, "its workers were gone when the controller resynchronised after a failed pass"
                           if after_failure else f"its workers were gone when {who} started", now)
            # Nodes Ray reports dead leave the model; a run adopted there a moment ago cannot be alive either.
            for i in self._down:
                for job_id in runs_on_node(self.running, self.cluster, i):
                    keep.difference_update(actor_name(job_id, self._attempt[job_id], r.rank)
                                           for r in self._placement(self.running[job_id]))
                self._lose_node(s, i, f"node {self.node_names[i]} is down", now)
            self._read_conditions(s, now)
            self._apply_outages(s, now)
            for row in s.scalars(select(JobRow).where(JobRow.state == S.PENDING).options(joinedload(JobRow.user))
                                 .order_by(JobRow.id)):
                self.pending[row.id] = self._job(row)
                if row.not_before is not None and row.not_before > now:
                    self._held[row.id] = row.not_before
            self.leadership.fence(s)  # a replica that lost the lease meanwhile must not requeue what another adopted

    def _register_nodes(self, now: float) -> None:
        with self.store.session(write=True) as s:
            self._down |= register_nodes(s, self.backend.nodes(), self.cluster, self.node_names, self.node_presets,
                                         now)

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
        if self._node_reader is not None:
            self._node_reader.shutdown(wait=False, cancel_futures=True)
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
        if not self.leading or not self.running:
            return []
        now = time.time()
        backend, deferred = self.backend, _AfterCommit(self.backend)
        self.backend = deferred
        try:
            with self.store.session(write=True) as s:
                requeued = list(self.running)
                for job_id in requeued:
                    row = s.get(JobRow, job_id)
                    assert row is not None
                    self.backend.stop(job_id)
                    self._requeue(s, row, now, "checkpointed", Reason(Code.CHECKPOINTED, {"detail": why}))
                self.leadership.fence(s)
        finally:
            self.backend = backend
        deferred.flush()
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
        self.backend.disown()
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
            self._wake.wait(min(tick, max(0.0, self._wake_at - time.time())))
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
        self._asked = ()

    def step(self) -> StepStats:
        """One pass: read new submissions and cancel requests, collect what workers did, then let the policy act."""
        if not self.leadership.leading:  # before the poll, which may start gangs: a deposed leader touches no worker
            raise NotLeader("the lease lapsed or another replica took it")
        stats = StepStats()
        launches: list[Launch] = []
        now = time.time()
        statuses: list[JobStatus] = []
        polled = self._starting or now - self._last_poll >= self.tick_s * 0.5
        nodes: list[NodeInfo] | None = None
        if polled:
            t0 = time.perf_counter()
            nodes = self._read_nodes(now)
            stats.ray_s += time.perf_counter() - t0
            joined = [n for n in nodes or () if n.alive and n.name not in self.node_index]
            if joined:
                self._grow(joined)
            moved = self._moved(nodes or ())
            if moved:
                self._move(moved)
            t0 = time.perf_counter()
            statuses = self.backend.poll()
            if nodes is None and any(st.phase == "lost" for st in statuses):
                # Workers were lost: if their node is gone, know it before the policy can place a job there again.
                # A read under way in the background started before this one: what it says is older, and dropped.
                nodes = self.backend.nodes()
                self._last_nodes, self._nodes_read = now, None
            stats.ray_s += time.perf_counter() - t0
            self._last_poll = now
            self._starting = any(st.phase == "starting" for st in statuses)
        self.view.now = now  # (after a node joined, the view is a new one)
        backend, deferred = self.backend, _AfterCommit(self.backend)
        self.backend = deferred
        try:
            with self.store.session(write=True) as s:
                self._load_policy(s)
                self._sync_submissions(s, now)
                self._sync_cancels(s, now)
                self._sync_changes(s, now)
                self._enforce_time_limits(s, now)
                self._collect(s, statuses, now, stats)
                self._enforce_start_deadline(s, now)  # after what the workers said: runs that started just now count
                self._take_requeues(s, now)  # after them too: a run that ended just now is not run again
                self._read_holds(s)
                self._resolve_dependencies(s, now)
                changed = False
                if nodes is not None:
                    down = set(self._down)
                    self._check_nodes(s, nodes, now)
                    changed = down != self._down
                if now - self._last_conditions >= NODES_EVERY_S:
                    changed = self._read_conditions(s, now) or changed
                if self.pending and self.placing:
                    changed = self._read_drains(s) or changed
                changed = self._suspects_changed(now) or changed
                if changed:
                    self._apply_outages(s, now)
                if self.pending and self.policy is not None and self.placing:
                    # As the simulator does, the policy is asked when something it sees changed (a submission, an end,
                    # a start, a node, the policy or the teams) or at a time it asked to be woken (`WakeAt`), not at
                    # every tick: its last answer stands until then, and a pass with 1,000 queued stays cheap.
                    if self._scene() != self._asked or now >= self._wake_at:
                        self._wake_at = float("inf")
                        launches = self._schedule(s, now, stats)
                        self._asked = self._scene()
                    self._explain_waits()
                self._write_reasons(s)
                # Last, in the same transaction: this pass's placements (and every other write) commit only if its
                # replica still holds the lease with the epoch they were made under.
                self.leadership.fence(s)
        finally:
            self.backend = backend
        deferred.flush()  # stops and forgets, now that the decisions behind them are committed
        if now - self._last_reap >= REAP_EVERY_S:
            self._last_reap = now
            self._reap_strays()
        for launch in launches:  # only after the placements are committed (see the module docstring)
            self.backend.launch(launch)
        if launches:
            self._starting = True
        return stats

    def _read_nodes(self, now: float) -> list[NodeInfo] | None:
        """The node table, every NODES_EVERY_S (None in between). A backend whose read is a round trip (Ray's: a call
        to its GCS, 1-4 ms here, in a pass of 3-5 ms) is read on another thread: a pass starts a read and a later pass
        takes its answer, so the node table is up to one pass older and no pass waits for it."""
        if not getattr(self.backend, "nodes_in_background", False):
            if now - self._last_nodes < NODES_EVERY_S:
                return None
            self._last_nodes = now
            return self.backend.nodes()
        nodes = None
        if self._nodes_read is not None and self._nodes_read.done():
            read, self._nodes_read = self._nodes_read, None
            nodes = read.result()  # a read that failed fails this pass, as a read in it would have
        if self._nodes_read is None and now - self._last_nodes >= NODES_EVERY_S:
            if self._node_reader is None:
                self._node_reader = ThreadPoolExecutor(1, thread_name_prefix="corral-nodes")
            self._nodes_read = self._node_reader.submit(self.backend.nodes)
            self._last_nodes = now
        return nodes

    def _reap_strays(self) -> None:
        """Kill Corral workers that belong to no run of this leader: those a deposed leader launched after its
        successor had taken over (it paused between committing a placement and launching it; the successor found the
        run without workers and requeued it, so they run an attempt nobody tracks, holding GPUs). Only after this
        pass's commit, whose fence proved the lease, and before its own launches: every worker of a tracked run is
        named in `keep`."""
        keep = {actor_name(j, self._attempt[j], r.rank) for j, job in self.running.items()
                if job.placement is not None for r in self._placement(job)}
        killed = self.backend.reap_orphans(keep)
        if killed:
            log.warning("killed %d stray worker(s) that no run of this controller owns: %s", len(killed),
                        ", ".join(sorted(killed)))

    # ---- reading the store ---------------------------------------------------------------------------------------

    def _load_policy(self, s: Session) -> None:
        """The active policy, inside the tenancy frame when teams have quotas or limits; both re-read every pass (a
        switch or a quota change through the API takes effect at the next one)."""
        name = queries.active_policy(s)
        if name is None:
            name = self.default_policy
            queries.activate_policy(s, name, by="controller (default)")
        switched = name != self.policy_name
        if switched:
            # The scheduling rules every caller applies (priorities; reservations if configured), as the simulator does.
            self.inner = frame_policy(self.make_policy(name), self.reservations)
            self.policy_name = name
            log.info("active policy: %s", name)
        teams = queries.team_quotas(s)
        if switched or teams != self._teams_key:
            self._teams_key = teams
            self._generation += 1
            assert self.inner is not None
            self.policy = self._framed(s, self.inner, teams)
            self._reasons.clear()
            self._reasons_key = ()

    def _framed(self, s: Session, inner: Policy, teams: tuple[tuple[str, float, float | None], ...]) -> Policy:
        """`inner` inside the tenancy frame, with the teams' fair-share usage carried over from the previous frame
        or, on a fresh start, integrated from the store's allocation history (a restarted controller orders teams as
        the old one did); or `inner` alone while no team has a quota or a borrowing limit (every job borrows without
        limit: the frame would change nothing, so it costs nothing)."""
        if all(quota <= 0 and borrow is None for _, quota, borrow in teams):
            return inner
        frame = TenancyFrame(inner, Teams({n: Team(n, q, b) for n, q, b in teams}, self.half_life_s))
        if isinstance(self.policy, TenancyFrame):
            frame.share.inherit(self.policy.share)
        else:
            now = time.time()
            held = queries.held_intervals(s, history_start(now, 1.0, self.half_life_s), now)
            past = usage_series((Held(*h) for h in held), list(frame.share.usage), now=now, window_s=1.0, points=1,
                                half_life_s=self.half_life_s)
            frame.share.usage.update({name: t.usage_now for name, t in past.teams.items()})
            frame.share.now = now  # running jobs were counted up to now: from here on, observe() counts them
        log.info("tenancy frame: %s", ", ".join(f"{n} quota {q:g}" for n, q, _ in teams))
        return frame

    def _sync_submissions(self, s: Session, now: float) -> None:
        """Take in new submissions and drop jobs the API cancelled while pending.

        Each pass reads only jobs above the highest id seen, and recent cancellations; every few seconds a full scan
        catches what that can miss (on PostgreSQL a smaller id can commit after a larger one)."""
        full = now - self._last_full_sync >= FULL_SYNC_S
        if full:
            self._last_full_sync = now
            ids = set(s.scalars(select(JobRow.id).where(JobRow.state == S.PENDING)))
            gone = [j for j in self.pending if j not in ids]
            self._max_seen = max(self._max_seen, *ids) if ids else self._max_seen
        else:  # one query for both: new submissions, and recent cancellations
            rows = s.execute(_NEW_OR_CANCELLED, {"max_seen": self._max_seen, "since": self._last_sync - 1.0}).all()
            gone = [i for i, st in rows if st == S.CANCELLED]
            ids = {i for i, st in rows if st == S.PENDING}
        new = ids - self.pending.keys()
        self._last_sync = now
        for job_id in gone:
            self.pending.pop(job_id, None)
            self._reasons.pop(job_id, None)
        if not new:
            return
        fresh = s.scalars(select(JobRow).where(JobRow.id.in_(new)).options(joinedload(JobRow.user))
                          .order_by(JobRow.id)).all()
        in_order = True
        last = next(reversed(self.pending.values())).spec.submit_s if self.pending else float("-inf")
        for row in fresh:
            self._max_seen = max(self._max_seen, row.id)
            problem = reject_reason(row, self.cluster, self.profiles)
            if problem:
                row.state, row.finished_at = S.FAILED, now
                queries.set_end(row, Reason(Code.REJECTED, {"text": problem}))
                queries.add_event(s, row.id, "rejected", problem)
                continue
            job = self._job(row)
            in_order = in_order and job.spec.submit_s >= last
            last = job.spec.submit_s
            self.pending[row.id] = job
        if not in_order:
            self._sort_pending()

    def _sort_pending(self) -> None:
        """Keep the queue in submission order, as the simulator does (a requeued job keeps its place)."""
        self.pending = in_queue_order(self.pending)

    def _sync_cancels(self, s: Session, now: float) -> None:
        if not self.running:
            return
        rows = s.scalars(_CANCEL_REQUESTED).all()
        for row in rows:
            if row.id in self.running:
                self.backend.stop(row.id)
                self._end_run(s, row, now)
                row.state, row.finished_at = S.CANCELLED, now
                queries.add_event(s, row.id, "cancelled", "cancelled while running; workers stopped", at=now)

    def _sync_changes(self, s: Session, now: float) -> None:
        """Take in the time limits and priorities the API changed (`queries.change_job`) for the jobs in memory, and
        its requeue requests (for `_take_requeues`). A running job's run is then held to its new limit
        (`_enforce_time_limits`, just after), and the policy is asked again (a reservation backfills by time limits;
        priorities order the queue and decide preemptions). One indexed query a pass, over the changes of the last
        CHANGES_REREAD_S."""
        rows = s.execute(_CHANGED, {"since": self._changes_read - CHANGES_REREAD_S}).all()
        self._changes_read = now
        for job_id, limit, priority, requeue_by in rows:
            job = self.running.get(job_id) or self.pending.get(job_id)
            if job is not None and (job.spec.time_limit_s, job.spec.priority) != (limit, priority):
                job.spec = replace(job.spec, time_limit_s=limit, priority=priority)
                self._changes += 1
            if requeue_by is not None:
                self._requeues[job_id] = requeue_by

    def _take_requeues(self, s: Session, now: float) -> None:
        """Checkpoint and requeue the runs the API was asked to (`queries.request_requeue`, Slurm's `scontrol
        requeue`): their workers get SIGTERM and the stop's grace period to save, and their jobs go back to the queue
        in their old places, spending no restart (held, if asked so: `_read_holds` then keeps them waiting). A run
        that ended meanwhile is left ended. Either way the request is cleared."""
        requeues, self._requeues = self._requeues, {}
        for job_id, by in requeues.items():
            row = s.get(JobRow, job_id)
            if row is None or row.requeue_by is None:
                continue
            if row.state == S.RUNNING and job_id not in self.running:
                continue  # not adopted yet: asked again at the next pass
            row.requeue_by = None
            if row.state == S.RUNNING:
                self.backend.stop(job_id)
                self._requeue(s, row, now, "checkpointed", Reason(Code.REQUEUED, {"by": by}))
            elif row.state != S.PENDING:  # ended first: a hold asked with the requeue has nothing left to hold
                row.held_at = row.held_by = None

    def _enforce_time_limits(self, s: Session, now: float) -> None:
        """Stop every run that has reached its job's time limit, counted from when its workers started: SIGTERM, the
        stop's grace period, then SIGKILL (the backend's stop), and the job ends `timed_out` with that reason. Checked
        at every pass, so a run overstays its limit by at most a tick."""
        for job_id, job in list(self.running.items()):
            limit = job.spec.time_limit_s
            if limit is None or job.start_s is None or not self._started.get(job_id) or now < job.start_s + limit:
                continue
            row = s.get(JobRow, job_id)
            assert row is not None
            ran = now - job.start_s
            self.backend.stop(job_id)
            self._end_run(s, row, now)
            why = Reason(Code.TIME_LIMIT, {"limit_s": limit, "ran_s": ran, "grace_s": STOP_GRACE_S})
            row.state, row.finished_at = S.TIMED_OUT, now
            queries.set_end(row, why)
            queries.add_event(s, job_id, "timed_out", why.text, at=now, attempt=row.attempt, time_limit_s=limit)
            log.info("job %d: %s", job_id, why.text)

    def _enforce_start_deadline(self, s: Session, now: float) -> None:
        """Take back every run whose workers are not all up `start_timeout_s` after it was placed: Ray could not start
        them (something Corral does not know of holds the GPU's Ray resource, or the node hangs), and the job would
        otherwise show `running` forever with no process, while the loop polls at its starting tick. Its
        workers are stopped, its nodes held out for SUSPECT_S (as after a lost run), and it is requeued in its old
        place without spending a restart: it never ran, and the fault is not the job's."""
        for job_id, job in list(self.running.items()):
            if self._started.get(job_id) or job.start_s is None or now < job.start_s + self.start_timeout_s:
                continue
            row = s.get(JobRow, job_id)
            assert row is not None
            assert job.placement is not None
            nodes = ", ".join(self.node_names[i] for i in job.placement.nodes(self.cluster))
            why = Reason(Code.NOT_STARTED, {"timeout_s": self.start_timeout_s, "nodes": nodes})
            self.backend.stop(job_id)
            self._suspect_nodes(job, now, f"did not start within {self.start_timeout_s:g} s")
            self._strike(s, job, now)
            self._requeue(s, row, now, "evicted", why)
            log.warning("job %d: %s; %s held out for %g s", job_id, why.text, nodes, SUSPECT_S)

    def _strike(self, s: Session, job: Job, now: float) -> None:
        """`job`'s workers did not start: count it against the nodes where they are not up (all its nodes if the
        backend does not say), and drain a node where the runs of `drain_after` different jobs did not start within
        START_STRIKES_WINDOW_S, as an admin's drain (by `controller`, with why; `corral node resume` ends it). Its
        running jobs may finish. Each run placed on such a node costs its job a start timeout, and a hold of
        SUSPECT_S only spaces them out."""
        if not self.drain_after or job.placement is None:
            return
        ranks = self._placement(job)
        status = self._reported.get(job.id)
        up = status.up if status is not None else ()
        # A gang's healthy nodes have their ranks up, waiting for the others: only the others' nodes are to blame.
        blamed = [r.node for r, ok in zip(ranks, up, strict=True) if not ok] if len(up) == len(ranks) else []
        for name in blamed or [r.node for r in ranks]:
            recent = [(t, j) for t, j in self._start_strikes.get(name, ())
                      if t > now - START_STRIKES_WINDOW_S and j != job.id]  # one job counts once
            recent.append((now, job.id))
            self._start_strikes[name] = recent
            if len(recent) < self.drain_after:
                continue
            del self._start_strikes[name]
            jobs = ", ".join(str(j) for _, j in recent)
            reason = (f"the workers of {len(recent)} jobs ({jobs}) did not start here within "
                      f"{self.start_timeout_s:g} s, all in the last {START_STRIKES_WINDOW_S / 60:g} min: check Ray "
                      "on this node, then `corral node resume`")
            drained = cast("CursorResult[Any]", s.execute(update(Node).where(
                Node.name == name, Node.drained_at.is_(None)).values(
                drained_at=now, drained_by="controller", drain_reason=reason, drain_evict=False)))
            if drained.rowcount:  # an admin's drain already there stays as it is
                log.warning("node %s drained: %s", name, reason)
                self._last_conditions = -math.inf  # read at this pass, so the drain closes its GPUs at once

    # ---- what the workers did ------------------------------------------------------------------------------------

    def _collect(self, s: Session, statuses: list[JobStatus], now: float, stats: StepStats) -> None:
        # A status the backend repeats unchanged (no worker answered since) was taken in already: skipped, so a settled
        # pass writes no row.
        current = [st for st in statuses if st.job_id in self.running and st.attempt == self._attempt.get(st.job_id)
                   and self._reported.get(st.job_id) != st]
        # One query for every run's row (not one `get` each, which autoflushes the previous row's progress first).
        rows = {r.id: r for r in s.scalars(_JOBS_BY_ID, {"ids": [st.job_id for st in current]})} if current else {}
        for st in current:
            job = self.running[st.job_id]
            row = rows.get(st.job_id)
            if row is None:
                continue
            if row.duration_s > 0 and row.kind == "emulated":
                row.work_done_s = st.done_s
                row.progress = min(1.0, st.done_s / row.duration_s)
            if st.phase in ("running", "succeeded", "failed") and row.started_at is None:
                started = [t for t in st.started_at if t is not None]
                row.started_at = min(started) if started else now
                if row.first_started_at is None:
                    row.first_started_at = row.started_at
                job.start_s = row.started_at
                self._started[row.id] = True
                self.slowdowns.started(row.id, row.started_at)
                queries.add_event(s, row.id, "started", f"{len(started)} worker(s) started", at=row.started_at,
                                  attempt=st.attempt, ranks_started_at=st.started_at)
            self._reported[st.job_id] = st
            if st.phase == "succeeded":
                self._finish(s, row, S.SUCCEEDED, 0, None, now, st.ended_at)
                stats.finished += 1
            elif st.phase == "failed":
                code = next((c for c in st.exit_codes if c not in (None, 0)), 1)
                delay = None if row.cancel_requested else retry_delay(
                    row.max_retries, row.retries, row.retry_on, row.retry_backoff_s, code)
                if delay is not None:
                    self._retry(s, row, code, st.error, delay, now, st.ended_at)
                else:
                    self._finish(s, row, S.FAILED, code, Reason(Code.EXIT_CODE, {
                        "exit_code": code, "error": st.error or None, "retries": row.retries}), now, st.ended_at)
                stats.finished += 1
            elif st.phase == "lost":
                self._suspect_nodes(job, now)
                self.backend.stop(row.id)
                self._lose(s, row.id, st.error or "its workers were lost", now)
                stats.finished += 1

    def _grow(self, joined: list[NodeInfo]) -> None:
        """Ray nodes with Corral's resources that joined since the model was built: appended to it (the nodes it has
        keep their GPU numbering, which allocations record), then the state is rebuilt from the store and the running
        workers adopted again, as after a failed pass. Rare, so the simplest correct rebuild; it takes the policy's
        caches, built for the old cluster, with it."""
        joined = sorted(joined, key=lambda n: n.name)
        added = [ModelNode(n.name, n.gpus, self._preset_of(n.name, n.preset, n.gpus), self._rack_of(n.name, n.rack))
                 for n in joined]
        self._renumber([*self._node_gpus(), *added])
        log.info("node(s) joined: %s; the cluster has %d nodes and %d GPUs now",
                 ", ".join(f"{n.name} ({n.gpus} GPUs, {n.preset})" for n in added), self.cluster.num_nodes,
                 self.cluster.num_gpus)
        self.recover(after_failure=True)

    def _preset_of(self, name: str, own: str | None, gpus: int) -> str:
        """The preset node `name` is modelled with: its own, or `corral serve --preset` (saying why, if it had one)."""
        preset, why = node_preset(own, self.preset, gpus)
        if why:
            log.warning("node %s: %s", name, why)
        return preset

    def _rack_of(self, name: str, own: str | None) -> str | None:
        """The rack node `name` is modelled in: the one it names, if it is a rack name (saying why not)."""
        rack, why = node_rack(own)
        if why:
            log.warning("node %s: %s", name, why)
        return rack

    def _moved(self, nodes: Sequence[NodeInfo]) -> dict[str, str | None]:
        """The alive nodes of the model that name another rack than the one they are modelled in (name -> rack):
        a server moved, or its agent was restarted with another --rack."""
        racks = racks_of(self.cluster)
        moved: dict[str, str | None] = {}
        for n in nodes:
            i = self.node_index.get(n.name)
            if n.alive and i is not None and node_rack(n.rack)[0] != racks[i]:
                moved[n.name] = self._rack_of(n.name, n.rack)
        return moved

    def _move(self, moved: dict[str, str | None]) -> None:
        """Nodes that name another rack now: the model takes their racks (no GPU is renumbered: a rack is not part
        of the numbering), then the state is rebuilt as after a join (`_grow`). Rare: a server moves racks."""
        self._renumber([n._replace(rack=moved[n.name]) if n.name in moved else n for n in self._node_gpus()])
        log.info("node(s) moved: %s", ", ".join(f"{name} to {rack or 'no named rack'}"
                                                for name, rack in sorted(moved.items())))
        self.recover(after_failure=True)

    def _node_gpus(self) -> list[ModelNode]:
        racks = racks_of(self.cluster)
        return [ModelNode(name, int(self.cluster.node_num_gpus[i]), self.node_presets[i], racks[i])
                for i, name in enumerate(self.node_names)]

    def _renumber(self, nodes: list[ModelNode]) -> None:
        self.cluster = model_cluster(nodes, self.fabric)
        self.node_names = [n.name for n in nodes]
        self.node_presets = [n.preset for n in nodes]
        self.node_index = {n: i for i, n in enumerate(self.node_names)}

    def _take_store_numbering(self) -> None:
        """Another replica may have led while nodes joined, and numbered them in the order they came: take the
        store's numbering (the one allocations were written in) with the presets it recorded, then the nodes only
        this replica knows of. A node's rack is the model's if it has the node (what the node names now: `_move`),
        else the store's."""
        mine = {n.name: n.rack for n in self._node_gpus()}
        with self.store.session() as s:
            known = [ModelNode(n.name, len(n.gpus), self._preset_of(n.name, n.preset, len(n.gpus)),
                               mine[n.name] if n.name in mine else self._rack_of(n.name, n.rack))
                     for n in queries.nodes_with_gpus(s)]
        names = {n.name for n in known}
        nodes = [*known, *(n for n in self._node_gpus() if n.name not in names)]
        if nodes != self._node_gpus():
            log.info("taking the store's node numbering: %s", ", ".join(f"{n.name} ({n.preset})" for n in nodes))
            self._renumber(nodes)

    def _check_nodes(self, s: Session, nodes: list[NodeInfo], now: float) -> None:
        """A Ray node that died takes its GPUs out of the model until it comes back."""
        alive = {n.name: n.alive for n in nodes}
        advertised = {n.name: n.preset for n in nodes}
        for i, name in enumerate(self.node_names):
            up = alive.get(name, False)
            if up and i in self._down:
                if advertised.get(name) not in (None, self.node_presets[i]):
                    # Its GPUs keep their numbering and type: allocations and the store's GPU rows name them.
                    log.warning("node %s came back as preset %s; it stays modelled as %s (give it a new name to "
                                "model it as the new preset)", name, advertised[name], self.node_presets[i])
                self._down.discard(i)
                s.execute(update(Node).where(Node.name == name).values(alive=True, updated_at=now))
            elif not up and i not in self._down:
                self._lose_node(s, i, f"node {name} was lost", now)
                self._down.add(i)
                s.execute(update(Node).where(Node.name == name).values(alive=False, updated_at=now))

    def _read_conditions(self, s: Session, now: float) -> bool:
        """Read the admins' drains and the node agents' GPU reports from the store; True if what they close changed.
        A stale report closes nothing (`gpu_faults`)."""
        self._last_conditions = now
        drained, faults = conditions(s.execute(select(*CONDITION_COLUMNS)),
                                     spans(self.cluster, self.node_names), now)
        if drained == self._drained and faults == self._faults:
            return False
        for g in faults.keys() - self._faults.keys():
            log.warning("GPU %d is faulty: %s", g, faults[g])
        for g in self._faults.keys() - faults.keys():
            log.info("GPU %d is healthy again", g)
        self._drained, self._faults = drained, faults
        return True

    def _read_drains(self, s: Session) -> bool:
        """The admins' drains, at every pass that may place (the GPU reports wait for `_read_conditions`): a drain the
        API acknowledged binds this pass's placements. FOR SHARE (`nodes.DRAIN_COLUMNS`) makes a drain committing
        meanwhile wait for this pass on PostgreSQL (SQLite's write transactions are serial already). True if the
        drains changed."""
        drained = drains(s.execute(select(*DRAIN_COLUMNS).with_for_update(read=True)),
                         spans(self.cluster, self.node_names))
        if drained == self._drained:
            return False
        self._drained = drained
        return True

    def _suspect_nodes(self, job: Job, now: float, what: str = "were lost") -> None:
        """A run of `job` was lost (or its workers never started, `what`): hold its nodes out of placement for
        SUSPECT_S (those Ray still calls alive)."""
        if job.placement is None:
            return
        at = time.strftime("%H:%M:%S", time.localtime(now))
        for i in job.placement.nodes(self.cluster):
            if i not in self._down:
                self._suspect[i] = (now + SUSPECT_S, (f"job {job.id}'s workers {what} there at {at}; it takes "
                                                      f"no new job for {SUSPECT_S:g} s unless Ray declares it dead "
                                                      "sooner"))
                self._held_changed = True

    def _suspects_changed(self, now: float) -> bool:
        """Whether the held-out nodes changed since the outages were last applied: one was added, or its hold ended
        (its time is up, or Ray has declared it dead: it is down, which closes it anyway)."""
        over = [i for i, (until, _) in self._suspect.items() if until <= now or i in self._down]
        for i in over:
            del self._suspect[i]
        changed, self._held_changed = self._held_changed or bool(over), False
        return changed

    def _apply_outages(self, s: Session, now: float) -> None:
        """The one rule (`scheduler.core.outages`), as the simulator applies it: checkpoint and requeue the runs a
        drain `--now` or a faulty GPU evicts (spending no restart), then close exactly the GPUs no new job may use."""
        placements = {j: job.placement for j, job in self.running.items() if job.placement is not None}
        nodes = spans(self.cluster, self.node_names)
        for job_id, why in eviction_reasons(nodes, placements, drained=self._drained, faults=self._faults,
                                            on_fault=self.on_fault, requeued=True).items():
            row = s.get(JobRow, job_id)
            assert row is not None
            self.backend.stop(job_id)
            self._requeue(s, row, now, "evicted", why)
        self.state.set_closed(closed_gpus(nodes, down=self._down, drained=self._drained, faults=self._faults,
                                          held={i: why for i, (_, why) in self._suspect.items()}))

    def _end_run(self, s: Session, row: JobRow, now: float) -> Job:
        """Take a run off its GPUs: close its allocations, account its service, and re-rate its neighbours."""
        slow_integral = self.slowdowns.close(row.id, now, self._ran_from(row.id))
        self._started.pop(row.id, None)
        self._reported.pop(row.id, None)
        job = self.running.pop(row.id)
        job.end_s = now  # the fair share counts its GPUs up to here, even if the frame looks later
        attempt = self._attempt.pop(row.id)
        self.state.release(row.id)
        if job.start_s is not None:
            row.attained_gpu_s += max(0.0, now - job.start_s) * job.spec.gpu_demand
        if row.started_at is not None:  # the workers ran: account the run and what the model expected of it
            ran = max(0.0, now - row.started_at)
            before = (row.predicted_slowdown_avg or 0.0) * row.run_s
            row.run_s += ran
            if row.run_s > 0:
                row.predicted_slowdown_avg = (before + slow_integral) / row.run_s
        s.execute(update(Allocation).where(Allocation.job_id == row.id, Allocation.attempt == attempt,
                                           Allocation.released_at.is_(None)).values(released_at=now))
        job.placement = None
        job.start_s = None
        row.started_at = None
        for j in self.contention.remove(row.id):
            if j in self.running:
                self._set_rate(self.running[j], s)
        return job

    def _finish(self, s: Session, row: JobRow, state: S, code: int, why: Reason | None, now: float,
                ranks_ended_at: list[float | None]) -> None:
        self.backend.forget(row.id)
        self._end_run(s, row, now)
        # A failed job always says why (the worker's error, or at least its exit code): users read it in `corral jobs`.
        row.state, row.finished_at, row.exit_code = state, now, code
        queries.set_end(row, why)
        if state is S.SUCCEEDED:
            row.progress = 1.0
            # Only an emulated job's duration_s is its isolated run time; a command job's is the user's estimate, and
            # "1 s over an estimate of 10 s" is no slowdown (calibration infers theirs from the predictions instead).
            if row.run_s > 0 and row.kind == JobType.EMULATED:
                row.observed_slowdown = row.run_s / row.duration_s
                metrics.OBSERVED_SLOWDOWN.observe(row.observed_slowdown)
        queries.add_event(s, row.id, str(state), why.text if why else f"exit code {code}", at=now, exit_code=code,
                          attempt=row.attempt, ranks_ended_at=ranks_ended_at)

    def _retry(self, s: Session, row: JobRow, code: int, error: str, delay: float, now: float,
               ranks_ended_at: list[float | None]) -> None:
        """A run that exited non-zero, of a job with retries left for its exit code: the job goes back to the queue in
        its old place, held there for its backoff (`scheduler.live.retries`)."""
        self.backend.forget(row.id)
        row.retries += 1
        row.exit_code, row.not_before = code, now + delay
        why = retry_reason(row.retries, row.max_retries, code, delay)
        self._requeue(s, row, now, "retrying", why, message=f"{error}; {why.text}" if error else why.text,
                      exit_code=code, ranks_ended_at=ranks_ended_at)
        self._held[row.id] = now + delay

    def _ready(self, now: float) -> Collection[Job]:
        """The pending jobs the policy may place now: all but those a retry's backoff still holds (the pass that
        asks when the first hold ends is booked with `_wake_at`), those whose dependencies do not hold yet, those a
        user or an admin holds, and an array's tasks beyond the number it may still run
        (`scheduler.core.dependencies`, as the simulator has it)."""
        if self._held:
            for job_id, until in list(self._held.items()):
                if until <= now or job_id not in self.pending:
                    del self._held[job_id]
        ready: Collection[Job] = self.pending.values()
        if self._held:
            self._wake_at = min(self._wake_at, *self._held.values())
        if self._held or self._waiting or self._on_hold:
            ready = [job for job_id, job in self.pending.items()
                     if job_id not in self._held and job_id not in self._waiting and job_id not in self._on_hold]
        throttled: dict[int, Reason] = {}
        if self._arrays_pending:
            ready, throttled = array_waits(ready, self.running.values())
            for job_id, why in throttled.items():
                self._set_reason(job_id, why)
        self._throttled = set(throttled)
        return ready

    def _resolve_dependencies(self, s: Session, now: float) -> None:
        """The pending jobs whose dependencies do not hold yet wait, saying for what; those whose never will are
        cancelled with the reason (Slurm's DependencyNeverSatisfied), and so, in the same pass, is every pending job
        that depended on one of those (a chain of 300 ends at once, not a level a pass). One query a pass for the
        other jobs' states, only while some pending job has dependencies. The same scan of the queue notes whether a
        task of a bounded array waits (`_ready` throttles only then)."""
        dependent: list[Job] = []
        arrays = False
        for job in self.pending.values():
            if job.spec.depends_on:
                dependent.append(job)
            arrays = arrays or job.spec.array_max_running is not None
        self._arrays_pending = arrays
        if not dependent:
            self._waiting = {}
            return
        keys = {int(d.job) for job in dependent for d in job.spec.depends_on}
        found = s.execute(select(JobRow.id, JobRow.state).where(JobRow.id.in_(keys)))
        states: dict[int, str] = {i: st for i, st in found}

        def outcome(key: str) -> Outcome | None:
            state = states.get(int(key))
            return Outcome.FAILED if state is None else job_outcome(state)  # (a job gone: it cannot succeed)

        dependents: dict[int, list[Job]] = {}  # a job -> the pending jobs that depend on it
        for job in dependent:
            for d in job.spec.depends_on:
                dependents.setdefault(int(d.job), []).append(job)
        waiting: dict[int, Reason] = {}
        todo, cancelled = list(dependent), set()
        while todo:  # each job is looked at once, and again only when a job it depends on was cancelled just now
            job = todo.pop()
            if job.id in cancelled:
                continue
            ready = readiness(job.spec.depends_on, outcome)
            if ready.never:
                row = s.get(JobRow, job.id)
                if row is not None and row.state == S.PENDING:
                    row.state, row.finished_at = S.CANCELLED, now
                    queries.set_end(row, ready.reason)
                    queries.set_pending(row, None)
                    row.pending_until = row.held_at = row.held_by = None  # (a hold has nothing left to hold)
                    queries.add_event(s, job.id, "cancelled", f"cancelled: {ready.why}", at=now)
                    states[job.id] = S.CANCELLED
                    todo.extend(dependents.get(job.id, ()))
                cancelled.add(job.id)
                waiting.pop(job.id, None)
                self.pending.pop(job.id, None)
                self._reasons.pop(job.id, None)
            elif ready.ready:  # (looked at again: a job it waited for was cancelled just now, which it may run after)
                waiting.pop(job.id, None)
            elif ready.reason is not None:
                waiting[job.id] = ready.reason
        for job_id, why in waiting.items():
            if job_id not in self._on_hold:  # who holds it says more: it would wait after its dependencies too
                self._set_reason(job_id, why)
        self._waiting = waiting

    def _read_holds(self, s: Session) -> None:
        """The pending jobs their owners or admins hold (`queries.hold`): they wait, in their place, saying who holds
        them, until released. One indexed query a pass while jobs are pending. A job held or released since the last
        pass gets its reason anew (the API wrote its own). A hold that lands while this pass places the job is caught
        by the placement's conditional update."""
        held = {i: by for i, by in s.execute(_ON_HOLD) if i in self.pending} if self.pending else {}
        changed = held.keys() ^ self._on_hold.keys()
        if changed:
            self._capacity_said -= changed
            for job_id in changed:
                self._reasons.pop(job_id, None)
            self._reasons_key = ()
        self._on_hold = {i: queries.held_reason(i, by or "?") for i, by in held.items()}
        for job_id, why in self._on_hold.items():
            self._set_reason(job_id, why)

    def _lose_node(self, s: Session, node: int, why: str, now: float) -> None:
        """Node `node` is gone: every run with a GPU there is stopped and lost (requeued or failed by its policy)."""
        for job_id in runs_on_node(self.running, self.cluster, node):
            self.backend.stop(job_id)
            self._lose(s, job_id, why, now)

    def _lose(self, s: Session, job_id: int, why: str, now: float) -> None:
        """A run whose workers are gone: requeue the job or fail it, by its restart policy."""
        row = s.get(JobRow, job_id)
        assert row is not None
        if job_id in self.running:
            self._end_run(s, row, now)
        else:  # never got back into memory (recover): close whatever it held
            s.execute(update(Allocation).where(Allocation.job_id == job_id, Allocation.released_at.is_(None))
                      .values(released_at=now))
            row.started_at = None
        queries.add_event(s, job_id, "lost", why, at=now, attempt=row.attempt)
        if row.cancel_requested:
            row.state, row.finished_at = S.CANCELLED, now
            queries.add_event(s, job_id, "cancelled", "cancel requested before the run was lost", at=now)
        elif row.restart_policy == RestartPolicy.REQUEUE and row.restarts < row.max_restarts:
            row.restarts += 1
            row.state, row.queued_since = S.PENDING, now
            queries.add_event(s, job_id, "requeued", f"restart {row.restarts} of {row.max_restarts}", at=now)
            self.pending[job_id] = self._job(row)
            self._sort_pending()
        else:
            row.state, row.finished_at = S.FAILED, now
            queries.set_end(row, Reason(Code.LOST, {"detail": why}))
            queries.add_event(s, job_id, "failed", f"not restarted ({row.restart_policy}, "
                              f"{row.restarts} of {row.max_restarts} restarts used)", at=now)

    def _requeue(self, s: Session, row: JobRow, now: float, event: str, why: Reason, message: str | None = None,
                 **data: Any) -> None:
        """Take a run off its GPUs and put its job back in the queue, in its old place, without spending a restart:
        the run was stopped for a reason that is not the job's (a shutdown, a drain, a GPU fault), or it failed and
        the job retries (`_retry`). The caller has stopped its workers, which checkpoint within their grace period,
        so the next run resumes from there. `why` is the pending reason; the event says `message` (default `why`),
        with `data`."""
        self._end_run(s, row, now)
        row.state, row.queued_since = S.PENDING, now
        queries.set_pending(row, why)
        row.pending_until = None
        queries.add_event(s, row.id, event, message or why.text, at=now, attempt=row.attempt, **data)
        self.pending[row.id] = self._job(row)
        self._sort_pending()
        self._reasons[row.id] = (why, None)

    # ---- deciding ------------------------------------------------------------------------------------------------

    def _set_rate(self, job: Job, s: Session | None = None) -> None:
        slow = self.contention.slowdown(job.id)
        self.slowdowns.set(job.id, slow, time.time(), self._ran_from(job.id))
        job.rate = progress_rate(job.spec.kind, slow)
        self.backend.set_rate(job.id, job.rate)
        if s is not None:
            s.execute(update(JobRow).where(JobRow.id == job.id).values(predicted_slowdown=slow))

    def _start_in_memory(self, job: Job, placement: Placement, attempt: int, now: float,
                         adopt: bool = False) -> set[int]:
        self.state.allocate(job.id, job.spec, placement, adopt=adopt)  # adopt: a run recovered, as it is
        job.placement = placement
        job.start_s = now
        self.running[job.id] = job
        self._attempt[job.id] = attempt
        return self.contention.add(job.id, job.spec, placement)

    def _schedule(self, s: Session, now: float, stats: StepStats) -> list[Launch]:
        """The ask-apply loop of every scheduler (`scheduler.core.runner`), applying to the store and the backend."""
        assert self.policy is not None
        launches: dict[int, Launch] = {}
        frame = self.policy if isinstance(self.policy, TenancyFrame) else None
        reclaims = frame.reclaims if frame is not None else 0

        def apply(decisions: list[Decision], latency: float) -> bool:
            nonlocal reclaims
            if frame is not None and frame.reclaims > reclaims:
                metrics.RECLAIMS.inc(frame.reclaims - reclaims)
                reclaims = frame.reclaims
            metrics.DECISION_LATENCY.observe(latency)
            stats.policy_calls += 1
            stats.policy_s += latency
            return self._apply(s, decisions, now, latency, stats, launches)

        settle(self.policy, self.view, lambda: self._ready(now), now, apply, self.policy_name)
        return list(launches.values())

    def _apply(self, s: Session, decisions: list[Decision], now: float, latency: float, stats: StepStats,
               launches: dict[int, Launch]) -> bool:
        acted = False
        ms = latency * 1000.0
        # Most decisions are a thousand Waits (one per queued job the policy holds back): taken in one tight loop,
        # after the preemptions (which queue jobs) and before the placements, as their order in the list would.
        others = [d for d in decisions if type(d) is not Wait]
        for d in others:
            if isinstance(d, Preempt) and d.job_id in self.running:
                row = s.get(JobRow, d.job_id)
                assert row is not None
                self.backend.stop(d.job_id)
                launches.pop(d.job_id, None)
                job = self._end_run(s, row, now)
                row.state, row.queued_since, row.preemptions = S.PENDING, now, row.preemptions + 1
                job.preemptions, job.queued_since = row.preemptions, now
                self.pending[d.job_id] = self._job(row)
                self._sort_pending()
                s.add(DecisionRow(job_id=d.job_id, at=now, policy=self.policy_name, action="preempt", reason=d.reason,
                                  latency_ms=ms))
                queries.add_event(s, d.job_id, "preempted", d.reason or "preempted by the policy", at=now)
                metrics.DECISIONS.labels("preempt").inc()
                stats.preempted += 1
                acted = True
        if len(others) < len(decisions):
            waits = [d for d in decisions if type(d) is Wait and d.job_id in self.pending]
            reasons, unwritten = self._reasons, self._unwritten  # `_set_reason`, inlined: a thousand a pass
            for d in waits:
                said = (d.why, d.until)
                if reasons.get(d.job_id) != said:
                    reasons[d.job_id] = unwritten[d.job_id] = said
            self._policy_said.update(d.job_id for d in waits)
            if waits:
                metrics.DECISIONS.labels("wait").inc(len(waits))
        for d in others:
            if isinstance(d, Place):
                if self._place(s, d, now, ms, launches):
                    metrics.DECISIONS.labels("place").inc()
                    stats.placed += 1
                    acted = True
            elif isinstance(d, WakeAt):
                self._wake_at = min(self._wake_at, d.time)
        return acted

    def _set_reason(self, job_id: int, reason: Reason) -> None:
        """A reason that is not the policy's `Wait`: it bounds no wait (`pending_until` is cleared with it)."""
        if self._reasons.get(job_id) != (reason, None):
            self._reasons[job_id] = self._unwritten[job_id] = (reason, None)

    def _write_reasons(self, s: Session) -> None:
        """The reasons that changed this pass, each with its `pending_until`, in one statement (a thousand jobs'
        reasons change at once when the cluster does), for the jobs still pending."""
        rows = [{"job": i, "why": why.text, "code": why.code.value, "params": dict(why.params), "until": until}
                for i, (why, until) in self._unwritten.items() if i in self.pending]
        self._unwritten.clear()
        if rows:  # Core's executemany: the ORM's bulk update costs a millisecond more for the usual one or two rows
            jobs = cast(Table, JobRow.__table__)  # declared a FromClause; a mapped class's table is a Table
            s.execute(update(jobs).where(jobs.c.id == bindparam("job")).values(
                pending_reason=bindparam("why"), pending_code=bindparam("code"), pending_params=bindparam("params"),
                pending_until=bindparam("until")), rows)

    def _explain_waits(self) -> None:
        """Give every job still pending a reason: the policy's own words where it said why (a `Wait`), else what the
        cluster lacks for it. Recomputed only when free capacity, the policy or the queue changed, and then only for
        the jobs whose reason may have: all of them when the runs, the closed GPUs or the policy did, else the jobs
        new to the queue or no longer waited for by the policy (a burst of submissions to a deep queue adds a few
        jobs to a pass; a thousand jobs' reasons stand)."""
        key = (self.state.free_whole, round(self.state.allocated_share, 6), self.policy_name, len(self.pending),
               len(self._held), len(self._waiting), len(self._on_hold), len(self._throttled))
        if key == self._reasons_key:
            return
        self._reasons_key = key
        capacity = (self._generation, frozenset(self.state.closed.items()),
                    tuple((j, job.placement) for j, job in self.running.items()))
        if capacity != self._capacity_key:
            self._capacity_key = capacity
            self._capacity_said.clear()
        # (held, waiting, on hold, throttled: the retry's, the dependencies', the holder's and the array's words)
        todo = (self.pending.keys() - self._policy_said - self._capacity_said - self._held.keys()
                - self._waiting.keys() - self._on_hold.keys() - self._throttled)
        said: dict[tuple[float, str], Reason] = {}  # a thousand queued jobs come in a few sizes and models
        for job_id in todo:
            spec = self.pending[job_id].spec
            kind = (spec.num_gpus, spec.model)
            why = said.get(kind)
            if why is None:
                why = said[kind] = capacity_reason(self.view, spec, self.policy_name)
            self._set_reason(job_id, why)
        self._capacity_said |= todo
        self._capacity_said -= self._policy_said
        self._capacity_said &= self.pending.keys()
        self._policy_said.clear()

    def _place(self, s: Session, d: Place, now: float, ms: float, launches: dict[int, Launch]) -> bool:
        job = self.pending.get(d.job_id)
        if job is None:
            raise RuntimeError(f"{self.policy_name} placed job {d.job_id}, which is not pending")
        predicted = self.view.predict(job.spec, d.placement)
        metrics.PREDICTED_SLOWDOWN.observe(predicted.slowdown)
        row = s.get(JobRow, d.job_id)
        assert row is not None
        attempt = row.attempt + 1
        # The API may have cancelled or held it a moment ago: the conditional update decides, atomically.
        moved = cast("CursorResult[Any]", s.execute(update(JobRow).where(  # an UPDATE's result counts its rows
            JobRow.id == d.job_id, JobRow.state == S.PENDING, JobRow.held_at.is_(None)).values(
            state=S.RUNNING, attempt=attempt, **queries.pending_columns(None), pending_until=None, not_before=None,
            predicted_slowdown=predicted.slowdown, started_at=None))).rowcount
        del self.pending[d.job_id]
        self._reasons.pop(d.job_id, None)
        if not moved:
            return False
        s.refresh(row)
        affected = self._start_in_memory(job, d.placement, attempt, now)
        for rank in self._placement(job):
            first = int(self.cluster.node_first_gpu[self.node_index[rank.node]])
            for local in rank.local_gpus:
                s.add(Allocation(job_id=row.id, attempt=attempt, rank=rank.rank, node=rank.node, gpu=first + local,
                                 local_gpu=local, share=d.placement.share, allocated_at=now,
                                 epoch=self.leadership.epoch))
        s.add(DecisionRow(
            job_id=row.id, at=now, policy=self.policy_name, action="place", reason=d.reason,
            gpus=list(d.placement.gpus), share=d.placement.share, predicted_slowdown=predicted.slowdown,
            # Each figure with when and against whom it was computed: the policy scored them at this pass's start,
            # before any preemption the same pass applied, so "now" may differ without contradicting them.
            candidates=[{"gpus": list(c.placement.gpus), "share": c.placement.share, "slowdown": c.slowdown,
                         "others_added": c.others_added, "neighbour_job_ids": list(c.neighbours),
                         "computed_at": self.view.now} for c in d.candidates],
            latency_ms=ms,
        ))
        nodes = ", ".join(r.node for r in self._placement(job))
        queries.add_event(s, row.id, "placed", f"on {nodes}: GPUs {list(d.placement.gpus)} x {d.placement.share:g}"
                          f" (predicted slowdown {predicted.slowdown:.2f})", at=now, gpus=list(d.placement.gpus),
                          share=d.placement.share, attempt=attempt)
        for j in affected:
            if j in self.running:
                self._set_rate(self.running[j], s)
        launches[row.id] = self._launch_spec(row, job, attempt)
        return True

"""The live present, read from the store once: what what-if (`scheduler.live.whatif`) and the live start estimates
(`scheduler.live.estimates`) replay in the simulator.

`snapshot(store)` reads, in one session: every node the store records (its preset, GPUs and rack, for the same cluster
model the controller builds: a node that is down stays in it, its GPUs closed) and the GPUs closed to new jobs (down,
drained, faulty); the running jobs with their GPUs, share, work
left and what is left of their time limits; the pending jobs not held, in queue order (submission order, as
`queries.queue_positions`), with their attained service and since when they queue; each job's team, dependencies and
array; the teams' quotas and borrowing limits (and, when asked, their fair-share usage as the controller integrates it
from the store's allocation history); the jobs depended on that have ended, with their states; the active policy.

A running job's work left: an emulated job's workers report its progress (`duration_s * (1 - progress)`); a command
job reports none, so it is its estimated duration less the isolated work its current run has done (its wall seconds
up over its predicted slowdown). A run past its predicted end is `overdue`: it still has `MIN_WORK_S` to go.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.constraints import Constraints
from scheduler.core.dependencies import Condition, Dependency
from scheduler.core.estimates import ARRIVALS_WINDOW_S
from scheduler.core.model import DEFAULT_TEAM, Cluster, JobSpec
from scheduler.core.workloads import ModelProfile
from scheduler.live.cluster import build_live_cluster, fabric_in_store, node_labels
from scheduler.live.explain import known_progress
from scheduler.live.nodes import closed_in_store

MAX_RECENT = 2_000  # the latest submissions a snapshot reads as the arrivals a replay repeats (a bound on its cost)
MIN_WORK_S = 1.0  # a running job reported (almost) done still has this much left: it has not finished yet

TeamsKey = tuple[tuple[str, float, float | None], ...]  # (name, quota, borrowing limit) of every team, by name


@dataclass(frozen=True)
class LiveNode:
    name: str
    preset: str
    gpus: tuple[int, ...]  # the store's cluster-wide GPU indices, in local order
    rack: str | None = None  # the rack it names (None: none; it fills racks in order)
    labels: tuple[tuple[str, str], ...] = ()  # its operator's labels (`corral node start --label`)
    alive: bool = True  # False: down (its GPUs are closed; a run the store still records there is lost)


@dataclass(frozen=True)
class Elastic:
    """What makes a live job elastic, as `JobSpec` takes it (`scheduler.core.elastic`); all None: one size."""

    min_gpus: int | None = None
    max_gpus: int | None = None
    sizes: tuple[int, ...] = ()
    resize_pause_s: float | None = None

    @staticmethod
    def of(row: Any) -> Elastic:
        """A job row's."""
        return Elastic(row.min_gpus, row.max_gpus, tuple(row.sizes or ()), row.resize_pause_s)


@dataclass(frozen=True)
class LiveJob:
    id: int
    name: str
    model: str
    num_gpus: float
    work_left: float  # isolated seconds still to run, by the estimate
    user: str = ""
    priority: int = 0
    slo_ms: float | None = None
    attained_gpu_s: float = 0.0
    gpus: tuple[int, ...] = ()  # the store's GPU indices it holds (running jobs only)
    share: float = 1.0
    preemptible: bool = True
    time_limit_s: float | None = None  # what is left of it (running jobs) or all of it (pending ones)
    elastic: Elastic = Elastic()  # an elastic job's sizes (the default: one size)
    team: str = DEFAULT_TEAM
    depends_on: tuple[tuple[int, str], ...] = ()  # (job id, condition) as stored
    array: str | None = None  # its array's id, if a task
    array_max_running: int | None = None
    queued_since: float = 0.0  # pending jobs: submission, or the last requeue
    overdue: bool = False  # running jobs: past its predicted end (its work left is then MIN_WORK_S)
    constraints: Constraints | None = None  # where it may run (`scheduler.core.constraints`)


@dataclass
class Snapshot:
    nodes: list[LiveNode]
    running: list[LiveJob]
    pending: list[LiveJob]
    active_policy: str | None
    taken_at: float = field(default_factory=time.time)
    closed: dict[int, str] = field(default_factory=dict)  # store GPU index -> why it takes no new job (down, drain, fault)
    fabric: str | None = None  # the fabric preset the controller models the cluster on (None: none)
    teams: TeamsKey = ()
    usage: dict[str, float] | None = None  # the teams' decayed fair-share usage now (None: not read)
    ended: dict[int, str] = field(default_factory=dict)  # jobs depended on that are neither pending nor running: state
    held: frozenset[int] = frozenset()  # pending jobs left out: held by their owner or an admin, or being cancelled
    # Jobs submitted in the last `ARRIVALS_WINDOW_S` (whatever became of them), with when: the arrivals a start
    # estimate repeats (`scheduler.core.estimates.expected_arrivals`); the latest `MAX_RECENT` at most.
    recent: list[tuple[float, LiveJob]] = field(default_factory=list)

    def cluster(self, extra_nodes: int = 0) -> Cluster:
        """The cluster model the controller has of the live nodes: each as its recorded preset, in the rack it names,
        on the recorded fabric; with `extra_nodes` more of the last alive node's kind (`like`), in its rack."""
        shape = [(n.preset, len(n.gpus)) for n in self.nodes]
        racks = [n.rack for n in self.nodes]
        names = [n.name for n in self.nodes]
        labels = [n.labels for n in self.nodes]
        if extra_nodes:
            like = self.like()
            shape += [(like.preset, len(like.gpus))] * extra_nodes
            racks += [like.rack] * extra_nodes
            names += [f"{like.name}+{i + 1}" for i in range(extra_nodes)]
            labels += [like.labels] * extra_nodes
        return build_live_cluster(shape, racks=racks, fabric=self.fabric, names=names, labels=labels)

    def like(self) -> LiveNode:
        """The node what-if's extra nodes are like: the last alive one (the last one if none is alive)."""
        return next((n for n in reversed(self.nodes) if n.alive), self.nodes[-1])

    def model_gpus(self, cluster: Cluster) -> dict[int, int]:
        """Store GPU index -> the model's GPU index in `cluster` (built by `cluster()`; the store numbers GPUs over
        every node it ever recorded, in the order it recorded them, so the two numberings may differ)."""
        out: dict[int, int] = {}
        for k, n in enumerate(self.nodes):
            first = int(cluster.node_first_gpu[k])
            out.update({g: first + i for i, g in enumerate(n.gpus)})
        return out

    def down_gpus(self) -> set[int]:
        """The store's GPU indices of the nodes that are down: closed to new jobs (`closed` says so), and a run the
        store still records on one is lost (the controller requeues it)."""
        return {g for n in self.nodes if not n.alive for g in n.gpus}


def running_work(row: Any, now: float) -> tuple[float, bool]:
    """A running job's isolated work left now, and whether it is past its predicted end (see the module docstring)."""
    done = known_progress(row.kind, row.state, row.progress)
    if done is not None:
        left = row.duration_s * (1.0 - min(max(done, 0.0), 1.0))
    else:
        ran = max(0.0, now - row.started_at) if row.started_at is not None else 0.0
        left = row.duration_s - row.work_done_s - ran / (row.predicted_slowdown or 1.0)
    return max(left, MIN_WORK_S), left < MIN_WORK_S


def live_spec(name: str, model: str, num_gpus: float, work: float, profiles: dict[str, ModelProfile], *,
              submit_s: float = 0.0, user: str = "", priority: int = 0, slo_ms: float | None = None,
              preemptible: bool = True, time_limit_s: float | None = None, elastic: Elastic = Elastic(),
              team: str = DEFAULT_TEAM, depends_on: tuple[Dependency, ...] = (), array: str | None = None,
              array_max_running: int | None = None, constraints: Constraints | None = None) -> JobSpec:
    """A job as the simulator takes it."""
    return JobSpec(name=name, submit_s=submit_s, num_gpus=num_gpus, duration_s=work, model=model,
                   kind=profiles[model].kind, user=user, priority=priority, slo_ms=slo_ms, preemptible=preemptible,
                   time_limit_s=time_limit_s, min_gpus=elastic.min_gpus, max_gpus=elastic.max_gpus, sizes=elastic.sizes,
                   resize_pause_s=elastic.resize_pause_s, team=team, depends_on=depends_on, array=array,
                   array_max_running=array_max_running, constraints=constraints)


def dependencies(job: LiveJob) -> tuple[Dependency, ...]:
    """A live job's dependencies as the simulator takes them: on the job named by its id (`str(id)`)."""
    return tuple(Dependency(str(j), Condition(c)) for j, c in job.depends_on)


def snapshot(store: Any, *, half_life_s: float | None = None) -> Snapshot:
    """Read the present from the store (a `scheduler.live.store.Store`) in one session. With `half_life_s`, the teams'
    fair-share usage too (as the controller integrates it on a fresh start), where teams have quotas or limits."""
    from sqlalchemy import select

    from scheduler.live.store import queries as q
    from scheduler.live.store.models import Job as JobRow
    from scheduler.live.store.models import JobState as S

    now = time.time()
    with store.session() as s:
        rows = q.nodes_with_gpus(s)
        # Down nodes too: the controller's model keeps them (their GPUs closed), so a job that only they could hold
        # waits for them rather than being refused (`control.intake`).
        nodes = [LiveNode(n.name, n.preset, tuple(g.index for g in sorted(n.gpus, key=lambda g: g.local_index)),
                          n.rack, node_labels(n.labels), n.alive) for n in rows]
        closed = closed_in_store(rows, now)
        running_rows = s.scalars(select(JobRow).where(JobRow.state == S.RUNNING).order_by(JobRow.id)).all()
        allocs = q.current_allocations(s, running_rows)
        pending_rows = s.scalars(select(JobRow).where(JobRow.state == S.PENDING)
                                 .order_by(JobRow.submitted_at, JobRow.id)).all()
        names = q.user_names(s, [r.user_id for r in [*running_rows, *pending_rows]])
        running = []
        pending = []
        held: set[int] = set()
        for r in running_rows:
            if r.cancel_requested:
                continue  # its workers are being stopped: its GPUs are as good as free
            placed = allocs.get(r.id, [])
            work, overdue = running_work(r, now)
            running.append(LiveJob(
                r.id, r.name, r.model, r.num_gpus, work, names.get(r.user_id, ""), r.priority, r.slo_ms,
                r.attained_gpu_s, tuple(sorted(a.gpu for a in placed)), placed[0].share if placed else 1.0,
                r.preemptible, _limit_left(r.time_limit_s, r.started_at, now), Elastic.of(r), r.team,
                _deps(r), _array(r), r.array_max_running, r.queued_since, overdue, Constraints.from_json(r.constraints)))
        for r in pending_rows:
            if r.cancel_requested or r.held_at is not None:
                held.add(r.id)  # a held job starts only once released: left out, as the controller leaves it waiting
                continue
            pending.append(LiveJob(r.id, r.name, r.model, r.num_gpus, max(r.duration_s - r.work_done_s, MIN_WORK_S),
                                   names.get(r.user_id, ""), r.priority, r.slo_ms, r.attained_gpu_s,
                                   preemptible=r.preemptible, time_limit_s=r.time_limit_s, elastic=Elastic.of(r),
                                   team=r.team, depends_on=_deps(r), array=_array(r),
                                   array_max_running=r.array_max_running, queued_since=r.queued_since,
                                   constraints=Constraints.from_json(r.constraints)))
        live = {j.id for j in [*running, *pending]} | held
        wanted = {d for j in pending for d, _ in j.depends_on} - live
        ended = {i: state for i, state in s.execute(select(JobRow.id, JobRow.state).where(JobRow.id.in_(wanted)))} \
            if wanted else {}
        teams = q.team_quotas(s)
        usage = _usage(s, teams, half_life_s, now) if half_life_s is not None else None
        recent_rows = s.scalars(select(JobRow).where(JobRow.submitted_at > now - ARRIVALS_WINDOW_S)
                                .order_by(JobRow.submitted_at.desc()).limit(MAX_RECENT)).all()
        who = q.user_names(s, [r.user_id for r in recent_rows])
        recent = [(r.submitted_at, LiveJob(r.id, r.name, r.model, r.num_gpus, r.duration_s, who.get(r.user_id, ""),
                                           r.priority, r.slo_ms, preemptible=r.preemptible,
                                           time_limit_s=r.time_limit_s, elastic=Elastic.of(r), team=r.team,
                                           constraints=Constraints.from_json(r.constraints)))
                  for r in reversed(recent_rows)]
        return Snapshot(nodes, running, pending, q.active_policy(s), taken_at=now, closed=closed,
                        fabric=fabric_in_store(s)[0], teams=teams, usage=usage, ended=ended, held=frozenset(held),
                        recent=recent)


def framed(teams: TeamsKey) -> bool:
    """Whether the controller runs its policy inside the tenancy frame: some team has a quota or a borrowing limit
    (`scheduler.live.control.placing`: else the frame would change nothing)."""
    return not all(quota <= 0 and borrow is None for _, quota, borrow in teams)


def _usage(s: Any, teams: TeamsKey, half_life_s: float, now: float) -> dict[str, float] | None:
    from scheduler.live.store import queries as q
    from scheduler.live.team_usage import Held, history_start, usage_series

    if not framed(teams):
        return None
    held = q.held_intervals(s, history_start(now, 1.0, half_life_s), now)
    past = usage_series((Held(*h) for h in held), [name for name, _, _ in teams], now=now, window_s=1.0, points=1,
                        half_life_s=half_life_s)
    return {name: t.usage_now for name, t in past.teams.items()}


def _deps(row: Any) -> tuple[tuple[int, str], ...]:
    return tuple((int(d["job"]), str(d["condition"])) for d in row.depends_on or ())


def _array(row: Any) -> str | None:
    return str(row.array_id) if row.array_id is not None else None


def _limit_left(limit: float | None, started_at: float | None, now: float | None = None) -> float | None:
    """What is left of a running job's time limit now (at least a second: it is stopped at the next pass)."""
    if limit is None:
        return None
    now = time.time() if now is None else now
    return max(1.0, limit - (now - started_at)) if started_at is not None else limit

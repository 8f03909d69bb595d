"""Discrete-event replay of a trace on a cluster under a policy.

The loop is the one the live controller runs; only I/O differs: here time is a virtual clock, arrivals come from a
trace and a job's end is predicted from its progress rate. A training job's rate is 1 / its predicted slowdown (it
does `duration_s` seconds of isolated work); an inference job is a service that stays up for `duration_s` of wall
time, and contention raises its latency instead (an SLO miss while latency x slowdown > SLO).

Rates change only when placements change, and then only for the jobs the contention model reports as affected, so a
job's end event is rescheduled lazily (stale events carry an old version and are dropped).

A run may start from a cluster that is already busy (`initial`: jobs holding their placements at t=0 with some
isolated work left, e.g. a snapshot of the live cluster for a what-if): they take the ids after the trace's jobs.
"""

from __future__ import annotations

import copy
import heapq
import math
import time
from collections.abc import Callable, Collection, Generator, Mapping, Sequence
from typing import Any

import numpy as np

from scheduler.core.admission import Fit, spec_admission
from scheduler.core.book import Book, BookError
from scheduler.core.contention import ContentionModel, ContentionParams
from scheduler.core.decisions import Decision, Place, Policy, Preempt, Resize, Wait, WakeAt, kinds_among
from scheduler.core.dependencies import Outcome, array_throttle, check_acyclic, readiness
from scheduler.core.elastic import RESIZE_INTERVAL_S, brought_down, resize_pause_s
from scheduler.core.generic import known_profiles
from scheduler.core.heap import heap_frozen
from scheduler.core.model import Cluster, Job, JobKind, JobPhase, JobSpec, Placement
from scheduler.core.outages import OnFault, Outage, closed_gpus, conditions, evictions, spans
from scheduler.core.progress import progress_rate, slo_missed
from scheduler.core.reservations import ReservationRule, frame_policy
from scheduler.core.resizing import shrinks
from scheduler.core.runner import RoundLimitError, rounds, settle
from scheduler.core.sim_result import Placed as Placed
from scheduler.core.sim_result import SimResult as SimResult
from scheduler.core.state import ClusterState, PlacementError
from scheduler.core.tenancy import Isolated, TeamLedger, Teams, TenancyFrame, quota_cluster
from scheduler.core.workloads import ModelProfile

_FINISH = 0
_WAKE = 1
_LIMIT = 3  # a run reaches its time limit; its run number (`_runs`) rides as the version
_OUTAGE = 2  # an outage starts (version 0) or ends (version 1); its index in `outages` rides as the job id


class SimulationError(RuntimeError):
    """The policy broke the rules (an invalid decision, or it left an idle cluster with a queue forever)."""


class Simulator:
    def __init__(
        self,
        cluster: Cluster,
        jobs: Sequence[JobSpec],
        policy: Policy | None,
        *,
        contention: bool = True,
        profiles: Mapping[str, ModelProfile] | None = None,
        params: ContentionParams | None = None,
        preempt_overhead_s: float = 30.0,
        progress: Callable[[int], None] | None = None,
        initial: Sequence[Placed | tuple[JobSpec, Placement, float]] = (),
        teams: Teams | None = None,
        outages: Sequence[Outage] = (),
        on_fault: OnFault = OnFault.REQUEUE,
        reservations: ReservationRule | None = None,
        mps_one_user: bool = False,
        resize_interval_s: float = RESIZE_INTERVAL_S,
    ) -> None:
        """`initial`: jobs running from t=0 on the given placements (validated like any placement: PlacementError if
        they overlap or do not fit), each with its isolated work left. Their specs must have `submit_s <= 0`; they get
        the ids after the trace's jobs, in the given order. The default (none) is the empty cluster.

        `teams`: the cluster is shared by these teams; the policy acts inside the tenancy frame
        (`scheduler.core.tenancy`) and the result reports each team's share. `run()` then also replays each team's
        jobs alone on its quota under the same policy (one more, smaller simulation per team with a quota of at least
        one GPU) for Themis' finish-time fairness (`tenancy.Isolated`).

        `outages`: node drains and GPU faults over time (`scheduler.core.outages`): while one is in effect its GPUs
        take no new job, and the runs it evicts (an evicting drain; a fault, with `on_fault` requeue) are
        checkpointed and requeued, as the live controller does. ValueError naming the field for an impossible one.

        `reservations`: when a pending job gets a reservation, and other jobs backfill around it
        (`scheduler.core.reservations`); None (the default): no reservations. Every policy follows the priority
        rules (`scheduler.core.priorities`) either way.

        `mps_one_user`: the shares of one node go to one user's jobs at a time, as CUDA MPS runs them when jobs run as
        per-user OS accounts (`scheduler.core.colocation`; the live controller's rule then). Off by default.
        `resize_interval_s`: the least time between two resizes of an elastic job (`scheduler.core.resizing`)."""
        if not (math.isfinite(resize_interval_s) and resize_interval_s >= 0):
            raise ValueError(f"resize_interval_s must be a number >= 0, got {resize_interval_s}")
        self.cluster = cluster
        self.specs = sorted(jobs, key=lambda s: s.submit_s)
        placed = [p if isinstance(p, Placed) else Placed(*p) for p in initial]
        if policy is not None:  # every policy follows the scheduling rules; with teams, inside the tenancy frame
            policy = frame_policy(policy, reservations)
            if teams is not None and not isinstance(policy, TenancyFrame):
                policy = TenancyFrame(policy, teams)
        self.policy = policy
        self.ledger = TeamLedger(policy.teams, policy.team_of) if isinstance(policy, TenancyFrame) else None
        # The isolated runs need the policy as it is before this run changes its state (Tiresias' index, Gittins'
        # cached ranks are keyed by job id): a copy now, copied again for each team.
        self._pristine = copy.deepcopy(policy.inner) if isinstance(policy, TenancyFrame) else None
        self._contention_on = contention
        self._params = params
        self.profiles = profiles if profiles is not None else known_profiles()
        self.mps_one_user = mps_one_user
        # The allocations, the contention model and the running and pending jobs, changed together
        # (`scheduler.core.book`). The names below are the book's own objects, never rebound; `pending` is read
        # through the book (a property), which rebuilds it to keep queue order.
        self.book = Book(ClusterState(cluster, self.profiles, mps_one_user=mps_one_user),
                         ContentionModel(cluster, self.profiles, params, enabled=contention, hashed_flows=True))
        self.state = self.book.state
        self.contention = self.book.contention
        self.running = self.book.running
        self.view = self.book.view
        self.view.resize_interval_s = resize_interval_s
        self.preempt_overhead_s = preempt_overhead_s
        self.progress = progress
        self.jobs = [Job(i, s, s.duration_s) for i, s in enumerate(self.specs)]
        self.jobs += [Job(len(self.specs) + k, p.spec, p.work_left) for k, p in enumerate(placed)]
        self._arrivals = len(self.specs)  # jobs [0, _arrivals) arrive from the trace; the rest start placed
        # Arrived jobs whose dependencies do not hold yet (`scheduler.core.dependencies`): not offered to the policy.
        self.blocked: dict[int, Job] = {}
        # A name's first job; the running ones too (a replay's dependents may wait on them: `scheduler.core.estimates`)
        self._by_name = {j.spec.name: j.id for j in reversed(self.jobs)}
        self._deps = any(s.depends_on for s in self.specs)
        if self._deps:
            try:
                check_acyclic({j.spec.name: [d.job for d in j.spec.depends_on]  # (a trace's own names win)
                               for j in [*self.jobs[self._arrivals:], *self.jobs[:self._arrivals]]})
            except ValueError as exc:
                raise SimulationError(f"depends_on: {exc}") from None
        self._arrays = {s.array: s.array_max_running for s in self.specs if s.array is not None
                        and s.array_max_running is not None}
        self.now = 0.0
        self._heap: list[tuple[float, int, int, int, int]] = []  # (time, seq, kind, job id, version)
        self._seq = 0
        self._version = [0] * len(self.jobs)
        self._due = [math.nan] * len(self.jobs)  # when the run's end event (of `_version`) is due; nan: none is
        self._runs = [0] * len(self.jobs)  # runs started so far, per job: a time limit applies to one run
        self._slow = np.ones(len(self.jobs))  # current predicted slowdown of each running job
        self._slo_ms = [self._slo(j.spec) for j in self.jobs]
        self._latency_ms = [self.profiles[j.spec.model].latency_ms for j in self.jobs]
        self._events = 0
        self._next_arrival = 0
        self._wakes: set[float] = set()
        self._finished = 0
        self._busy_share_s = 0.0
        self.pending_reasons: dict[int, str] = {}
        for k, p in enumerate(placed):
            self._place_initial(self.jobs[self._arrivals + k], p)
        self.outages = list(outages)
        self._spans = spans(cluster)
        self.on_fault = on_fault
        self._outages_on: set[int] = set()  # indices into `outages` in effect now
        for k, o in enumerate(self.outages):
            o.check(cluster)
            self._push(o.start_s, _OUTAGE, k, 0)
            if math.isfinite(o.end_s):
                self._push(o.end_s, _OUTAGE, k, 1)
        self.evicted = 0  # runs checkpointed and requeued because an outage took their GPUs

    def _place_initial(self, job: Job, p: Placed) -> None:
        if p.spec.submit_s > 0:
            raise ValueError(f"initial job {p.spec.name}: submit_s must be <= 0 (it is running at t=0)")
        if not p.work_left > 0:
            raise ValueError(f"initial job {p.spec.name}: work_left must be positive, got {p.work_left}")
        job.attained_gpu_s = p.attained_gpu_s
        self.book.append(job)  # _start takes it from the queue, checking the placement like any other
        self._start(job, Place(job.id, p.placement), adopt=True)  # running already: MPS rules decide new placements

    @property
    def pending(self) -> dict[int, Job]:
        """The queue, in queue order (the book's: a requeued job in its place, arrivals at the end)."""
        return self.book.pending

    @property
    def _who(self) -> str:
        return self.policy.name if self.policy is not None else "the driver"

    def _slo(self, spec: JobSpec) -> float:
        if spec.kind is not JobKind.INFERENCE:
            return 0.0
        return spec.slo_ms or self.profiles[spec.model].slo_ms

    # ---- event plumbing --------------------------------------------------------------------------------------------

    def _push(self, t: float, kind: int, job_id: int = -1, version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, job_id, version))

    def _advance(self, job: Job) -> None:
        """Bring a running job's progress and accounting up to `now` at its current rate (none before `last_update`:
        a resized job's pause ends there)."""
        dt = self.now - job.last_update
        if dt > 0:
            job.work_left -= dt * job.rate
            job.run_time += dt
            slow = self._slow[job.id]
            job.slowdown_time += dt * slow
            slo = self._slo_ms[job.id]
            if slo and slo_missed(self._latency_ms[job.id], slow, slo):
                job.slo_violation_s += dt
            job.last_update = self.now

    def _set_rate(self, job: Job) -> None:
        """Take the contention model's current slowdown for a running job and reschedule its end, unless its end
        stands: the same instant as the event already pushed for this run (a neighbour's change that left its
        slowdown as it was). No event is pushed for a change that changes nothing."""
        self._advance(job)
        slow = self.contention.slowdown(job.id)
        self._slow[job.id] = slow
        job.rate = progress_rate(job.spec.kind, slow, job.speedup)
        end = max(self.now, job.last_update) + max(job.work_left, 0.0) / job.rate
        if end == self._due[job.id]:
            return
        self._due[job.id] = end
        self._version[job.id] += 1
        self._push(end, _FINISH, job.id, self._version[job.id])

    def _rates_changed(self, affected: set[int]) -> None:
        for j in sorted(affected):
            job = self.running.get(j)
            if job is not None:
                self._set_rate(job)

    # ---- state changes ---------------------------------------------------------------------------------------------

    def _arrive(self, job: Job) -> None:
        verdict = spec_admission(self.cluster, job.spec, self.profiles)
        if isinstance(verdict, Fit):  # an elastic job larger than the cluster can hold: submitted at a size it can
            spec = brought_down(self.contention, job.spec, verdict.size)
            job.work_left *= spec.duration_s / job.spec.duration_s
            job.spec = spec
        elif verdict is not None:
            job.state = JobPhase.REJECTED
            job.reject_reason = verdict.why
            self._finished += 1
            self._ended()
            return
        if job.spec.depends_on:
            self.blocked[job.id] = job
            self._unblock()
            return
        self.book.append(job)

    def _outcome(self, name: str) -> Outcome | None:
        state = self.jobs[self._by_name[name]].state
        if state is JobPhase.DONE:
            return Outcome.SUCCEEDED
        if state in (JobPhase.PENDING, JobPhase.RUNNING):
            return None
        return Outcome.FAILED

    def _unblock(self) -> None:
        """Offer the blocked jobs whose dependencies now hold; cancel those whose never will (and so on down)."""
        changed = True
        while changed and self.blocked:
            changed = False
            for job_id, job in list(self.blocked.items()):
                ready = readiness(job.spec.depends_on, self._outcome)
                if ready.ready:
                    del self.blocked[job_id]
                    self.pending_reasons.pop(job_id, None)
                    self.book.enqueue(job)
                elif ready.never:
                    del self.blocked[job_id]
                    job.state = JobPhase.CANCELLED
                    job.reject_reason = ready.why
                    job.end_s = self.now
                    self._finished += 1
                    self.pending_reasons.pop(job_id, None)
                    changed = True  # its own dependents may never run now
                else:
                    self.pending_reasons[job_id] = ready.why

    def _ended(self) -> None:
        """A job ended: its dependents may be ready, or never."""
        if self.blocked:
            self._unblock()

    def _start(self, job: Job, decision: Place, adopt: bool = False) -> None:
        if job.id not in self.book.unsorted:  # (a lookup: no need to put the queue in order)
            raise SimulationError(f"{self._who} placed job {job.spec.name}, which is not pending")
        affected = self.book.start(job, decision.placement, self.now, adopt=adopt)
        self.pending_reasons.pop(job.id, None)
        job.last_update = self.now
        if job.first_start_s is None:
            job.first_start_s = self.now
        self._runs[job.id] += 1
        if job.spec.time_limit_s is not None:  # (pushed before the re-rated jobs' ends: the heap's order of ties)
            self._push(self.now + job.spec.time_limit_s, _LIMIT, job.id, self._runs[job.id])
        self._rates_changed(affected)

    def _stop(self, job: Job) -> None:
        """Take a running job off its GPUs (completion or preemption)."""
        self._advance(job)
        self._busy(job)
        affected = self.book.stop(job, self.now)
        self._version[job.id] += 1
        self._due[job.id] = math.nan
        self._rates_changed(affected)

    def _busy(self, job: Job) -> None:
        """Count the GPU share a running job held since it began holding its GPUs (its start or last resize)."""
        since = job.sized_since
        assert since is not None and job.placement is not None
        self._busy_share_s += (self.now - since) * job.placement.share * len(job.placement.gpus)

    def _resize(self, job: Job, d: Resize) -> None:
        """Run `job` at another size (`Book.resize`): no progress for its resize pause, then at its new rate."""
        if job.id not in self.running:
            raise SimulationError(f"{self._who} resized job {job.spec.name}, which is not running")
        self._advance(job)
        self._busy(job)
        try:
            affected = self.book.resize(job, d.placement, self.now)
        except (PlacementError, BookError) as exc:
            raise SimulationError(f"{self._who}: {exc}") from None
        job.last_update = self.now + resize_pause_s(job.submitted or job.spec, self.profiles)
        self._rates_changed(affected)

    def _finish(self, job: Job) -> None:
        self._stop(job)
        job.state = JobPhase.DONE
        job.end_s = self.now
        job.work_left = 0.0
        self._finished += 1
        self._ended()

    def _time_out(self, job: Job) -> None:
        """Its run reached its time limit: stopped, and it ends timed out, unless its work was done at that very
        instant (a finish at the limit is a success)."""
        self._advance(job)
        if job.work_left <= 1e-9:
            self._finish(job)
            return
        self._stop(job)
        job.state = JobPhase.TIMED_OUT
        job.end_s = self.now
        self._finished += 1
        self._ended()

    def _preempt(self, job: Job, *, by_policy: bool = True) -> None:
        if job.id not in self.running:
            raise SimulationError(f"{self._who} preempted job {job.spec.name}, which is not running")
        self._stop(job)
        if by_policy:  # (an outage's eviction is not the policy's choice: it costs the same, but is not counted)
            job.preemptions += 1
        job.work_left += self.preempt_overhead_s  # checkpoint restore and warm-up on restart
        self.book.requeue(job, self.now)  # in its old place (the book rebuilds the queue: preemptions are rare)

    def _outages_changed(self) -> None:
        """Outages started or ended at this instant: requeue the runs they evict, then close exactly the GPUs the
        outages in effect close (the rule of `scheduler.core.outages`, as the live controller applies it)."""
        drained, faults = conditions(self.outages[k] for k in sorted(self._outages_on))
        placements = {j: job.placement for j, job in self.running.items() if job.placement is not None}
        for job_id, why in evictions(self._spans, placements, drained=drained, faults=faults,
                                     on_fault=self.on_fault).items():
            self._preempt(self.jobs[job_id], by_policy=False)
            self.pending_reasons[job_id] = why
            self.evicted += 1
        self.state.set_closed(closed_gpus(self._spans, drained=drained, faults=faults))

    def apply(self, decisions: Sequence[Decision]) -> bool:
        """Carry out decisions (preemptions and shrinks first: they free what placements and grows may use). True if
        anything changed."""
        acted = False
        # Most of a deep queue's decisions are waits: their kinds are read once, and each wait is one test.
        if kinds_among(decisions, Preempt):
            for d in decisions:
                if isinstance(d, Preempt):
                    self._preempt(self.jobs[d.job_id])
                    acted = True
        shrunk = [d for d in decisions if isinstance(d, Resize) and shrinks(self.view, d)] \
            if kinds_among(decisions, Resize) else []
        for d in shrunk:  # shrinks next: they too free what placements may use
            self._resize(self.jobs[d.job_id], d)
            acted = True
        reasons = self.pending_reasons
        for d in decisions:
            if isinstance(d, Wait):
                reasons[d.job_id] = d.reason
            elif isinstance(d, Place):
                self._start(self.jobs[d.job_id], d)
                acted = True
            elif isinstance(d, Resize) and d not in shrunk:  # (a grow, on what the placements left)
                self._resize(self.jobs[d.job_id], d)
                acted = True
            elif isinstance(d, WakeAt) and d.time > self.now and d.time not in self._wakes:
                self._wakes.add(d.time)
                self._push(d.time, _WAKE)
        return acted

    # ---- the loop --------------------------------------------------------------------------------------------------

    def schedule(self) -> None:
        """Ask the policy for decisions at this instant, apply them, and ask again until it stops acting."""
        if self.policy is None:
            raise SimulationError("this simulator has no policy: its driver decides")
        try:
            settle(self.policy, self.view, self._queue, self.now, self._applied, self._who)
        except RoundLimitError as exc:
            raise SimulationError(str(exc)) from None

    def rounds(self) -> Generator[Any, Any, int]:
        """`schedule()` as the generator `scheduler.core.runner.rounds`: it yields each question the policy's agent
        must answer (the RL environment answers them, one step at a time)."""
        if self.policy is None:
            raise SimulationError("this simulator has no policy: its driver decides")
        return rounds(self.policy, self.view, self._queue, self.now, self._applied, self._who)

    def _queue(self) -> Collection[Job]:
        if not self._arrays:
            return self.book.queue()
        offered, waits = array_throttle(self.pending.values(), self.running.values())
        self.pending_reasons.update(waits)
        return offered

    def _applied(self, decisions: list[Decision], _seconds: float) -> bool:
        return self.apply(decisions)

    @property
    def done(self) -> bool:
        """Every job has arrived and nothing is left to happen."""
        return self._next_arrival >= self._arrivals and not self._heap

    def next_event_time(self) -> float:
        t_arr = self.specs[self._next_arrival].submit_s if self._next_arrival < self._arrivals else float("inf")
        return min(t_arr, self._heap[0][0] if self._heap else float("inf"))

    def advance(self) -> bool:
        """Move the clock to the next instant something happens and process all of it (completions, wake-ups,
        arrivals). Returns False when nothing is left. Scheduling is the caller's next move: `schedule()` asks the
        policy; the RL environment decides itself."""
        if self.done:
            return False
        heap = self._heap
        self.now = self.view.now = self.next_event_time()
        outages = False
        while heap and heap[0][0] <= self.now:
            _, _, kind, job_id, version = heapq.heappop(heap)
            self._events += 1
            if kind == _FINISH and version == self._version[job_id]:
                self._finish(self.jobs[job_id])
            elif kind == _LIMIT and version == self._runs[job_id] and job_id in self.running:
                self._time_out(self.jobs[job_id])
            elif kind == _WAKE:
                self._wakes.discard(self.now)
            elif kind == _OUTAGE:
                (self._outages_on.discard if version else self._outages_on.add)(job_id)
                outages = True
        if outages:
            self._outages_changed()
        n = self._arrivals
        while self._next_arrival < n and self.specs[self._next_arrival].submit_s <= self.now:
            self._arrive(self.jobs[self._next_arrival])
            self._events += 1
            self._next_arrival += 1
        return True

    def jobs_in_system(self) -> int:
        return len(self.book.unsorted) + len(self.running)

    def slo_violations(self) -> int:
        """Running inference services whose predicted latency is over their SLO right now."""
        return sum(
            1 for j in self.running.values()
            if self._slo_ms[j.id] and self._latency_ms[j.id] * self._slow[j.id] > self._slo_ms[j.id]
        )

    def idle_forever(self) -> bool:
        """Jobs are queued, nothing runs and nothing will happen: only a placement can make progress."""
        return self.done and bool(self.book.unsorted) and not self.running

    def run(self) -> SimResult:
        # The modules, the policy (an agent's network) and the trace are there for the whole run: out of the way of
        # the full collections the run's own objects trigger (`scheduler.core.heap`: 1.75x faster on a deep queue).
        with heap_frozen():
            return self._run()

    def _run(self) -> SimResult:
        wall0 = time.perf_counter()
        last_report = 0
        while self.advance():
            self.schedule()
            if self.ledger is not None:
                self.ledger.observe(self.now, self.running.values(), self.book.unsorted.values())  # (sums: any order)
            if self.idle_forever():
                stuck = next(iter(self.pending.values()))
                raise SimulationError(
                    f"{self._who} left {len(self.pending)} job(s) queued on an idle cluster, "
                    f"first {stuck.spec.name} ({stuck.spec.num_gpus:g} GPUs): "
                    f"{self.pending_reasons.get(stuck.id, 'no reason given')}"
                )
            if self.progress is not None and self._finished - last_report >= 500:
                self.progress(self._finished - last_report)
                last_report = self._finished
        if self.progress is not None:
            self.progress(self._finished - last_report)
        wall = time.perf_counter() - wall0  # the run's own time: the isolated runs are the report's cost
        return self.result(wall, self.isolated() if self.ledger is not None else None)

    def isolated(self) -> Isolated:
        """Each trace job's JCT with its team's jobs alone on a cluster of its quota (whole GPUs, `quota_cluster`),
        under a fresh copy of the policy with this run's contention and preemption settings. Jobs larger than the
        quota, jobs of teams with less than one GPU of quota and jobs running from t=0 (`initial`: their placements
        are on this cluster) get none."""
        frame = self.policy
        assert isinstance(frame, TenancyFrame) and self._pristine is not None
        jct: dict[int, float] = {}
        for name, team in frame.teams.teams.items():
            gpus = min(math.floor(team.quota_gpus + 1e-9), self.cluster.num_gpus)
            mine = [i for i in range(self._arrivals)
                    if frame.team_of(self.specs[i]) == name and self.specs[i].workers <= gpus]
            if gpus < 1 or not mine:
                continue
            alone = Simulator(quota_cluster(self.cluster, gpus), [self.specs[i] for i in mine],
                              copy.deepcopy(self._pristine), contention=self._contention_on, profiles=self.profiles,
                              params=self._params, preempt_overhead_s=self.preempt_overhead_s,
                              mps_one_user=self.mps_one_user).run()
            # The same specs in the same (submit-sorted, stable) order: the k-th job there is mine[k] here.
            for i, job in zip(mine, alone.jobs, strict=True):
                if job.end_s is not None:
                    jct[i] = job.end_s - job.spec.submit_s
        return Isolated(jct)

    def result(self, wall_s: float = 0.0, isolated: Isolated | None = None) -> SimResult:
        teams = None
        if self.ledger is not None:
            assert isinstance(self.policy, TenancyFrame)
            teams = self.ledger.report(self.jobs, isolated) | {"reclaims": self.policy.reclaims,
                                                                "swaps": self.policy.swaps}
        return SimResult(
            policy=self._who,
            jobs=self.jobs,
            metrics=self.metrics(),
            wall_s=wall_s,
            events=self._events,
            pending_reasons=dict(self.pending_reasons),
            teams=teams,
            isolated=isolated,
        )

    # ---- metrics ---------------------------------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        done = [j for j in self.jobs if j.state is JobPhase.DONE]
        rejected = sum(j.state is JobPhase.REJECTED for j in self.jobs)
        out: dict[str, Any] = {"jobs_completed": len(done), "jobs_rejected": rejected}
        if self._deps:  # (absent without dependencies: older results read the same)
            out["jobs_cancelled"] = sum(j.state is JobPhase.CANCELLED for j in self.jobs)
        if any(s.time_limit_s is not None for s in self.specs):  # (absent without limits: older results read the same)
            out["jobs_timed_out"] = sum(j.state is JobPhase.TIMED_OUT for j in self.jobs)
        if not done:
            return out | dict.fromkeys(
                ["avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "avg_slowdown", "makespan_s",
                 "gpu_util", "avg_contention_slowdown"], 0.0)
        submit = np.array([j.spec.submit_s for j in done])
        end = np.array([j.end_s for j in done], dtype=float)
        jct = end - submit
        run = np.array([j.run_time for j in done])
        makespan = float(end.max() - min(j.spec.submit_s for j in self.jobs))
        run_total = float(run.sum())
        infer = [j for j in done if self._slo_ms[j.id]]
        p50, p95, p99 = np.percentile(jct, [50, 95, 99])
        out |= {
            "avg_jct_s": float(jct.mean()),
            "p50_jct_s": float(p50),
            "p95_jct_s": float(p95),
            "p99_jct_s": float(p99),
            "avg_queue_s": float((jct - run).mean()),
            "avg_slowdown": float((jct / np.array([j.spec.duration_s for j in done])).mean()),
            "makespan_s": makespan,
            "gpu_util": self._busy_share_s / (self.cluster.num_gpus * makespan) if makespan > 0 else 0.0,
            "avg_contention_slowdown": sum(j.slowdown_time for j in done) / run_total if run_total else 1.0,
            "preemptions": int(sum(j.preemptions for j in self.jobs)),
            **({"resizes": sum(j.resizes for j in self.jobs)} if any(s.elastic for s in self.specs) else {}),
            "slo_violation_frac": (
                sum(j.slo_violation_s for j in infer) / sum(j.run_time for j in infer) if infer else 0.0
            ),
        }
        return out

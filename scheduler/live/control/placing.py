"""The policy's room: which policy is active (inside the tenancy frame and the scheduling rules), asking it by the
ask-apply loop every scheduler shares (`scheduler.core.runner`), carrying out its decisions in the store, and giving
every pending job a reason (the policy's words, the gates', or what the cluster lacks for it)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from sqlalchemy.orm import Session

from scheduler.core.constraints import Constraints
from scheduler.core.decisions import Decision, Place, Policy, Preempt, Resize, Wait, WakeAt
from scheduler.core.dependencies import array_waits
from scheduler.core.model import Job, Placement
from scheduler.core.reasons import Reason
from scheduler.core.reservations import ReservationRule, frame_policy
from scheduler.core.resizing import shrinks
from scheduler.core.runner import settle
from scheduler.core.tenancy import Team, Teams, TenancyFrame
from scheduler.live import lifecycle, metrics
from scheduler.live.control.guard_watch import GuardWatch
from scheduler.live.control.membership import Membership
from scheduler.live.control.memory import Memory
from scheduler.live.control.workers import Workers
from scheduler.live.explain import capacity_reason
from scheduler.live.job_accounts import JobAccounts
from scheduler.live.lifecycle import LifeCycle
from scheduler.live.rows import launch_of, rank_specs
from scheduler.live.runs import Launch, RankSpec
from scheduler.live.store import queries
from scheduler.live.store.models import Allocation
from scheduler.live.store.models import Decision as DecisionRow
from scheduler.live.store.models import Job as JobRow
from scheduler.live.team_usage import Held, history_start, usage_series

log = logging.getLogger("scheduler.live.controller")

TeamsKey = tuple[tuple[str, float, float | None], ...]


class Placing:
    def __init__(self, make_policy: Callable[[str], Policy], default_policy: str,
                 reservations: ReservationRule | None, half_life_s: float) -> None:
        self.make_policy = make_policy
        self.default_policy = default_policy
        self.reservations = reservations  # `corral serve --reserve-after/--reserve-share` (None: no reservations)
        self.half_life_s = half_life_s  # of the teams' fair-share usage
        self.generation = 0  # bumped whenever the view or the policy is replaced (the policy's scene)
        self.forget()

    def forget(self) -> None:
        """A new view (memory rebuilt): what the policy was last asked about is gone."""
        self.policy: Policy | None = None  # what the loop asks: the active policy, inside the tenancy frame if any
        self.inner: Policy | None = None  # the active policy inside the scheduling rules' frames
        self.made: Policy | None = None  # the active policy itself
        self.guard = GuardWatch()
        self.policy_name = ""
        self.teams_key: TeamsKey | None = None
        self.wake_at = float("inf")
        self.generation += 1
        self.asked: tuple[object, ...] = ()  # the scene after the policy's last answer
        # Which pending jobs' reasons are computed, and on what: see `explain_waits`.
        self.policy_said: set[int] = set()  # pending jobs the policy gave a reason for since the last explanation
        self.explained: tuple[object, ...] = ()
        # Pending jobs whose reason is what the cluster lacks for them, computed on the capacity `capacity_key` says.
        self.capacity_said: set[int] = set()
        self.capacity_key: tuple[object, ...] = ()

    def scene(self) -> tuple[object, ...]:
        return (self.generation,)

    def reexplain(self, job_ids: set[int]) -> None:
        """These jobs' reasons changed hands (held or released): have them explained anew."""
        if job_ids:
            self.capacity_said -= job_ids
            self.explained = ()

    # ---- the policy ----------------------------------------------------------------------------------------------

    def load_policy(self, s: Session, m: Memory) -> None:
        """The active policy, inside the tenancy frame when teams have quotas or limits; both re-read every pass (a
        switch or a quota change through the API takes effect at the next one)."""
        name = queries.active_policy(s)
        if name is None:
            name = self.default_policy
            queries.activate_policy(s, name, by="controller (default)")
        switched = name != self.policy_name
        if switched:
            # The scheduling rules every caller applies (priorities; reservations if configured), as the simulator does.
            self.made = self.make_policy(name)
            self.guard = GuardWatch()
            self.inner = frame_policy(self.made, self.reservations)
            self.policy_name = name
            log.info("active policy: %s", name)
        teams = queries.team_quotas(s)
        if switched or teams != self.teams_key:
            self.teams_key = teams
            self.generation += 1
            assert self.inner is not None
            self.policy = self._framed(s, self.inner, teams)
            m.reasons.clear()
            self.explained = ()

    def _framed(self, s: Session, inner: Policy, teams: TeamsKey) -> Policy:
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

    # ---- asking and applying -------------------------------------------------------------------------------------

    def ready(self, m: Memory, now: float, arrays_pending: bool) -> Collection[Job]:
        """The pending jobs the policy may place now: all but those a gate holds back (`Memory.gates`): a retry's
        backoff (the pass that asks when the first one ends is booked with `wake_at`), dependencies that do not hold
        yet, a user's or an admin's hold, and an array's tasks beyond the number it may still run
        (`scheduler.core.dependencies`, as the simulator has it)."""
        gates = m.gates
        if gates.backoff:
            for job_id, until in list(gates.backoff.items()):
                if until <= now or job_id not in m.pending:
                    del gates.backoff[job_id]
        # The book's queue as the simulator offers it (`Book.queue`): in order, with its count of priorities and of
        # GPU demands, which the priority bands and the victim rule read instead of every queued job at each pass.
        ready: Collection[Job] = m.book.queue()
        if gates.backoff:
            self.wake_at = min(self.wake_at, *gates.backoff.values())
        if gates.backoff or gates.dependencies or gates.holds:
            ready = [job for job_id, job in m.pending.items() if job_id not in gates.backoff
                     and job_id not in gates.dependencies and job_id not in gates.holds]
        throttled: dict[int, Reason] = {}
        if arrays_pending:
            ready, throttled = array_waits(ready, m.running.values())
            for job_id, why in throttled.items():
                m.reasons.set(job_id, why)
        gates.throttled = set(throttled)
        return ready

    def schedule(self, s: Session, ctx: PassContext) -> None:
        """The ask-apply loop of every scheduler (`scheduler.core.runner`), applying to the store and the backend."""
        assert self.policy is not None
        frame = self.policy if isinstance(self.policy, TenancyFrame) else None
        reclaims = frame.reclaims if frame is not None else 0

        def apply(decisions: list[Decision], latency: float) -> bool:
            nonlocal reclaims
            if frame is not None and frame.reclaims > reclaims:
                metrics.RECLAIMS.inc(frame.reclaims - reclaims)
                reclaims = frame.reclaims
            metrics.DECISION_LATENCY.observe(latency)
            ctx.stats.policy_calls += 1
            ctx.stats.policy_s += latency
            return self._apply(s, ctx, decisions, latency)

        settle(self.policy, ctx.memory.view, lambda: self.ready(ctx.memory, ctx.now, ctx.arrays_pending), ctx.now,
               apply, self.policy_name)
        self.guard.report(s, self.made, self.policy_name)  # (a guarded policy's verdicts: `guard_watch`)

    def _apply(self, s: Session, ctx: PassContext, decisions: list[Decision], latency: float) -> bool:
        m, now = ctx.memory, ctx.now
        acted = False
        ms = latency * 1000.0
        # Most decisions are a thousand Waits (one per queued job the policy holds back): taken in one tight loop,
        # after the preemptions (which queue jobs) and before the placements, as their order in the list would.
        others = [d for d in decisions if type(d) is not Wait]
        for d in others:
            if isinstance(d, Preempt) and d.job_id in m.running:
                row = s.get(JobRow, d.job_id)
                assert row is not None
                ctx.workers.stop(d.job_id)
                ctx.launches.pop(d.job_id, None)
                row.preemptions += 1
                s.add(DecisionRow(job_id=d.job_id, at=now, policy=self.policy_name, action="preempt", reason=d.reason,
                                  latency_ms=ms))
                ctx.lifecycle.to_pending(s, row, now, event="preempted",
                                         message=d.reason or "preempted by the policy")
                metrics.DECISIONS.labels("preempt").inc()
                ctx.stats.preempted += 1
                acted = True
        if len(others) < len(decisions):
            waits = [d for d in decisions if type(d) is Wait and d.job_id in m.pending]
            said, unwritten = m.reasons.said, m.reasons.unwritten  # `PendingReasons.set`, inlined: a thousand a pass
            for d in waits:
                reason = (d.why, d.until)
                if said.get(d.job_id) != reason:
                    said[d.job_id] = unwritten[d.job_id] = reason
            self.policy_said.update(d.job_id for d in waits)
            if waits:
                metrics.DECISIONS.labels("wait").inc(len(waits))
        # Shrinks before the starts they make room for, grows after: the order the simulator applies them in.
        shrunk = [d for d in others if isinstance(d, Resize) and shrinks(m.view, d)]
        for d in shrunk:
            acted = self._resize(s, ctx, d, ms) or acted
        for d in others:
            if isinstance(d, Place):
                if self._place(s, ctx, d, ms):
                    metrics.DECISIONS.labels("place").inc()
                    ctx.stats.placed += 1
                    acted = True
            elif isinstance(d, Resize) and d not in shrunk:
                acted = self._resize(s, ctx, d, ms) or acted
            elif isinstance(d, WakeAt):
                self.wake_at = min(self.wake_at, d.time)
        return acted

    def _resize(self, s: Session, ctx: PassContext, d: Resize, ms: float) -> bool:
        """Run an elastic job at another size (`scheduler.core.resizing`): its workers get SIGTERM and their grace
        period to checkpoint, and its next attempt starts on the new placement once they have ended (the backend waits
        for them), resuming from `CORRAL_CHECKPOINT_DIR` with the new gang's `WORLD_SIZE`, ranks and GPUs. No restart
        is spent and nothing is preempted: the run goes on, with an event saying the size change and why."""
        m, now = ctx.memory, ctx.now
        job = m.running.get(d.job_id)
        row = s.get(JobRow, d.job_id)
        if job is None or row is None or job.placement is None:
            return False
        before = len(job.placement.gpus)
        attempt = row.attempt + 1
        affected = m.resize(s, row, d.placement, attempt, now)
        ctx.workers.stop(d.job_id)
        ctx.launches.pop(d.job_id, None)
        row.attempt = attempt
        ranks = self._allocate(s, ctx, row, d.placement, attempt)
        s.add(DecisionRow(job_id=row.id, at=now, policy=self.policy_name, action="resize", reason=d.reason,
                          gpus=list(d.placement.gpus), share=d.placement.share,
                          predicted_slowdown=m.contention.slowdown(row.id), latency_ms=ms))
        queries.add_event(s, row.id, "resized", f"{before} -> {len(d.placement.gpus)} GPUs: "
                          f"{d.reason or 'by the policy'} (checkpointed; no restart spent)", at=now,
                          gpus=list(d.placement.gpus), from_gpus=before, attempt=attempt)
        for j in affected:
            if j in m.running:
                m.set_rate(m.running[j], s)
        ctx.launches[row.id] = launch_of(row, job, attempt, ranks, ctx.accounts, ctx.store_id, ctx.log_limit_bytes)
        metrics.DECISIONS.labels("resize").inc()
        ctx.stats.placed += 1
        return True

    def _allocate(self, s: Session, ctx: PassContext, row: JobRow, placement: Placement, attempt: int) -> list[RankSpec]:
        """The allocation rows of a run's `attempt` on `placement`, one per GPU of each rank; its ranks."""
        nodes = ctx.nodes
        ranks = rank_specs(nodes.cluster, nodes.node_names, placement)
        for rank in ranks:
            first = int(nodes.cluster.node_first_gpu[nodes.node_index[rank.node]])
            for local in rank.local_gpus:
                s.add(Allocation(job_id=row.id, attempt=attempt, rank=rank.rank, node=rank.node, gpu=first + local,
                                 local_gpu=local, share=placement.share, allocated_at=ctx.now, epoch=ctx.epoch))
        return ranks

    def _place(self, s: Session, ctx: PassContext, d: Place, ms: float) -> bool:
        m, now = ctx.memory, ctx.now
        job = m.pending.get(d.job_id)
        if job is None:
            raise RuntimeError(f"{self.policy_name} placed job {d.job_id}, which is not pending")
        predicted = m.view.predict(job.spec, d.placement)
        metrics.PREDICTED_SLOWDOWN.observe(predicted.slowdown)
        row = s.get(JobRow, d.job_id)
        assert row is not None
        attempt = row.attempt + 1
        m.dequeued(d.job_id)
        # The API may have cancelled or held it a moment ago: the conditional update decides, atomically.
        if not lifecycle.claim(s, d.job_id, attempt, predicted.slowdown):
            return False
        s.refresh(row)
        affected = m.start(job, d.placement, attempt, now)
        ranks = self._allocate(s, ctx, row, d.placement, attempt)
        s.add(DecisionRow(
            job_id=row.id, at=now, policy=self.policy_name, action="place", reason=d.reason,
            gpus=list(d.placement.gpus), share=d.placement.share, predicted_slowdown=predicted.slowdown,
            # Each figure with when and against whom it was computed: the policy scored them at this pass's start,
            # before any preemption the same pass applied, so "now" may differ without contradicting them.
            candidates=[{"gpus": list(c.placement.gpus), "share": c.placement.share, "slowdown": c.slowdown,
                         "others_added": c.others_added, "neighbour_job_ids": list(c.neighbours),
                         "computed_at": m.view.now} for c in d.candidates],
            latency_ms=ms,
        ))
        where = ", ".join(r.node for r in ranks)
        queries.add_event(s, row.id, "placed", f"on {where}: GPUs {list(d.placement.gpus)} x {d.placement.share:g}"
                          f" (predicted slowdown {predicted.slowdown:.2f})", at=now, gpus=list(d.placement.gpus),
                          share=d.placement.share, attempt=attempt)
        for j in affected:
            if j in m.running:
                m.set_rate(m.running[j], s)
        ctx.launches[row.id] = launch_of(row, job, attempt, ranks, ctx.accounts, ctx.store_id, ctx.log_limit_bytes)
        return True

    # ---- reasons -------------------------------------------------------------------------------------------------

    def explain_waits(self, m: Memory) -> None:
        """Give every job still pending a reason: the policy's own words where it said why (a `Wait`), else what the
        cluster lacks for it. Recomputed only when free capacity, the policy or the queue changed, and then only for
        the jobs whose reason may have: all of them when the runs, the closed GPUs or the policy did, else the jobs
        new to the queue or no longer waited for by the policy (a burst of submissions to a deep queue adds a few
        jobs to a pass; a thousand jobs' reasons stand). A job a gate holds back has the gate's words."""
        key = (m.state.free_whole, round(m.state.allocated_share, 6), self.policy_name, len(m.pending),
               *m.gates.sizes())
        if key == self.explained:
            return
        self.explained = key
        capacity = (self.generation, frozenset(m.state.closed.items()),
                    tuple((j, job.placement) for j, job in m.running.items()))
        if capacity != self.capacity_key:
            self.capacity_key = capacity
            self.capacity_said.clear()
        todo = (m.pending.keys() - self.policy_said - self.capacity_said).difference(*m.gates.all())  # gates' words
        # A thousand queued jobs come in a few sizes, models and constraints.
        said: dict[tuple[float, str, Constraints | None], Reason] = {}
        for job_id in todo:
            spec = m.pending[job_id].spec
            kind = (spec.num_gpus, spec.model, spec.constraints)
            why = said.get(kind)
            if why is None:
                why = said[kind] = capacity_reason(m.view, spec, self.policy_name)
            m.reasons.set(job_id, why)
        self.capacity_said |= todo
        self.capacity_said -= self.policy_said
        self.capacity_said &= m.pending.keys()
        self.policy_said.clear()


class PassContext:
    """What one pass hands the rooms: its clock, memory, the life cycle, the workers, its statistics and the launches
    its placements make (carried out after its commit)."""

    def __init__(self, now: float, memory: Memory, lifecycle: LifeCycle, workers: Workers, nodes: Membership,
                 stats: StepStats, *, accounts: JobAccounts, store_id: str, log_limit_bytes: int,
                 epoch: int | None, arrays_pending: bool) -> None:
        self.now = now
        self.memory = memory
        self.lifecycle = lifecycle
        self.workers = workers
        self.nodes = nodes
        self.stats = stats
        self.accounts = accounts
        self.store_id = store_id
        self.log_limit_bytes = log_limit_bytes
        self.epoch = epoch
        self.arrays_pending = arrays_pending
        self.launches: dict[int, Launch] = {}


@dataclass
class StepStats:
    """What one pass of the loop did (for tests, logs and the benchmark)."""

    placed: int = 0
    preempted: int = 0
    finished: int = 0
    policy_calls: int = 0
    policy_s: float = 0.0
    ray_s: float = 0.0  # waiting on Ray: the workers' statuses and the node table (when this pass polled)

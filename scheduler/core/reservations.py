"""Reservations and EASY backfill: a large or long-waiting job is not starved by a stream of small ones.

Without reservations a 32-GPU job waits until 32 GPUs happen to be free at once, which a steady stream of 1-GPU jobs
may never allow (Slurm's and Kueue's reason for backfill with reservations, and KAI's for gang admission). The rule
(Slurm's EASY backfill, one reservation at a time):

1. **Who holds one.** The first pending job, in priority and then queue order (`scheduler.core.priorities.bands`),
   that asks for whole GPUs and has waited at least `after_s` in the queue or asks for at least `share` of the
   cluster's GPUs. If it fits now, it is offered the free GPUs alone, before any other job; if it does not (or its
   policy declines them), the rest of the rule holds GPUs for it.
2. **What it holds.** Each GPU is free from a known time: now if it is wholly free, else when the last of its tenants
   reaches its time limit (a run without a time limit: never, as far as the scheduler knows). The holder gets the
   `workers` GPUs free soonest (ties: GPUs of nodes with more free GPUs now, so a gang stays on few nodes); the
   reservation starts when the last of them is free (`start_s`, infinite when one waits on a run without a limit).
   Those of them free now are held: no other job may start on them.
3. **Backfill.** Other jobs start on the GPUs it does not hold, as the wrapped policy places them; on its GPUs only a
   job whose time limit ends before the reservation starts (so it never delays it).

Recomputed at every call, so GPUs join the reservation as they free, and the holder changes as jobs come and go. The
wrapped policy decides placements as ever; this frame only decides which jobs it is asked about and which GPUs look
free to them while it decides. A run's time limit comes from its job (`JobSpec.time_limit_s`); traces without them get
none unless the simulator is given a multiple of each job's isolated duration (`with_time_limits`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from scheduler.core.constraints import eligible_gpus
from scheduler.core.decisions import Decision, Deliberation, Place, Policy, Wait, acted
from scheduler.core.model import Job, JobSpec
from scheduler.core.priorities import bands, with_priorities
from scheduler.core.reasons import Code, Reason, finite_or_none
from scheduler.core.room import has_room
from scheduler.core.runner import PolicyFrame, deliberation
from scheduler.core.state import EPS, ClusterView


@dataclass(frozen=True, slots=True)
class ReservationRule:
    """When a pending job gets a reservation: it waited `after_s` seconds (None: never by waiting), or it asks for
    at least `share` of the cluster's GPUs (None: never by size)."""

    after_s: float | None = 3600.0
    share: float | None = 0.25

    def __post_init__(self) -> None:
        if self.after_s is not None and not (math.isfinite(self.after_s) and self.after_s >= 0):
            raise ValueError(f"reserve after: seconds must be a number >= 0, got {self.after_s}")
        if self.share is not None and not 0 < self.share <= 1:
            raise ValueError(f"reserve share: a fraction of the cluster in (0, 1], got {self.share}")

    def qualifies(self, job: Job, now: float, cluster_gpus: int) -> bool:
        spec = job.spec
        if spec.num_gpus < 1:
            return False  # a share of one GPU is never starved by fragmentation of whole GPUs
        return ((self.after_s is not None and now - job.queued_since >= self.after_s)
                or (self.share is not None and spec.workers >= self.share * cluster_gpus - EPS))


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: int
    gpus: tuple[int, ...]  # the GPUs held for it (those free now are closed to other jobs)
    start_s: float  # when they are all free by the running jobs' time limits; inf: one waits on a run without one
    waiting_on: tuple[int, ...]  # the running jobs whose ends it waits for


def run_end(job: Job) -> float:
    """When a running job's run must end by its time limit (inf without one)."""
    if job.spec.time_limit_s is None or job.start_s is None:
        return math.inf
    return job.start_s + job.spec.time_limit_s


def free_times(gpus: Iterable[int], runs: Iterable[tuple[Iterable[int], float]], now: float) -> dict[int, float]:
    """Rule 2's clock over `gpus`: when each is wholly free, now or when the last run on it must end (`runs`: each
    run's GPUs and the end its time limit sets, inf without one). The controller's plan and the API's start estimate
    (`scheduler.live.explain`) both read it, so the two say the same."""
    free = dict.fromkeys(gpus, float(now))
    for held, end in runs:
        for g in held:
            if g in free:
                free[g] = max(free[g], end)
    return free


def reservation_start(free: Mapping[int, float], workers: int) -> float:
    """When `workers` of the GPUs free at `free` are all free: the `workers`-th soonest (inf if there are fewer)."""
    times = sorted(free.values())
    return times[workers - 1] if len(times) >= workers else math.inf


def plan(view: ClusterView, spec: JobSpec, now: float, job_id: int = -1) -> Reservation | None:
    """The GPUs `spec` would hold and when it would start (rule 2); None if the cluster has too few GPUs its model
    fits on."""
    cluster = view.cluster
    ok = cluster.gpu_mem >= view.mem_need(spec) - EPS
    if spec.constraints is not None:
        ok &= eligible_gpus(cluster, spec.constraints)
    fits = np.flatnonzero(ok).tolist()
    if len(fits) < spec.workers:
        return None
    free_at = free_times(fits, ((view.placement(j.id).gpus, run_end(j)) for j in view.running.values()), now)
    for g in view.closed:  # a drained or faulty GPU: free when it reopens, which no one schedules by
        if g in free_at:
            free_at[g] = math.inf
    node_of, free_nodes = cluster.gpu_node, view.node_free
    order = sorted(fits, key=lambda g: (free_at[g], -int(free_nodes[node_of[g]]), int(node_of[g]), g))
    gpus = tuple(sorted(order[:spec.workers]))
    held = set(gpus)
    waiting = tuple(sorted(j for j in view.running if held.intersection(view.placement(j).gpus)))
    return Reservation(job_id, gpus, reservation_start(free_at, spec.workers), waiting)


def with_time_limits(jobs: Sequence[JobSpec], factor: float) -> list[JobSpec]:
    """Each job without a time limit given one of `factor` times its isolated duration (users ask for more than
    they need: the limit must leave room for contention and restarts). Jobs with one keep it."""
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"time-limit factor must be a positive number, got {factor}")
    return [j if j.time_limit_s is not None else replace(j, time_limit_s=j.duration_s * factor) for j in jobs]


class ReservationFrame(PolicyFrame):
    """A policy under the reservation rule (module docstring), inside the priority rules; itself a policy with the
    wrapped one's `name` and `oracle`. `current` is the reservation of the last call (None if none)."""

    applies_priorities = True

    def __init__(self, policy: Policy, rule: ReservationRule) -> None:
        super().__init__(with_priorities(policy), named_as=policy)
        self.rule = rule
        self.current: Reservation | None = None
        self.backfilled = 0  # jobs started on reserved GPUs because their time limits end before it starts
        self.held_gpu_s = 0.0  # GPU-seconds free GPUs stood idle, held for a reservation: what holding costs
        self._held_at = (0.0, 0)  # (the last call's time, how many free GPUs it left held)

    def holder(self, view: ClusterView, queue: Collection[Job], now: float) -> Job | None:
        """Rule 1's job: the first that qualifies, in priority and queue order, whether it fits now or not."""
        gpus = view.cluster.num_gpus
        for band in bands(queue):
            for job in band:
                if self.rule.qualifies(job, now, gpus):
                    return job
        return None

    def _holding(self, now: float, free_held: int) -> None:
        """Count the idle held GPUs: the last call at an instant (the one that starts nothing more) says how many
        stay held until the next call."""
        at, held = self._held_at
        if now > at:
            self.held_gpu_s += held * (now - at)
        self._held_at = (now, free_held)

    def deliberate(self, view: ClusterView, queue: Collection[Job], now: float) -> Deliberation:
        self._holding(now, 0)
        holder = self.holder(view, queue, now)
        if holder is not None and has_room(view, holder.spec):
            # It fits: offered the GPUs before anyone else. If its policy declines (a placement it will not take),
            # nothing is held for it this time: holding GPUs for a job that would not take them idles them.
            first = yield from deliberation(self.inner, view, [holder], now)
            if acted(first):
                return first
            holder = None
        if holder is None:
            self.current = None
            return (yield from deliberation(self.inner, view, queue, now))
        res = self.current = plan(view, holder.spec, now, holder.id)
        if res is None:  # larger than the cluster (admission refuses these): nothing to hold
            return (yield from deliberation(self.inner, view, queue, now))
        others = [j for j in queue if j.id != holder.id]
        free_now = [g for g in res.gpus if view.free_share[g] >= 1.0 - EPS]
        self._holding(now, len(free_now))
        said: list[Decision] = []
        if others:
            with _held(view, free_now, f"held for {holder.spec.name}'s reservation"):
                said = yield from deliberation(self.inner, view, others, now)
            if acted(said):
                return said
            short = [j for j in others if j.spec.time_limit_s is not None and now + j.spec.time_limit_s <= res.start_s]
            if short and free_now:
                backfill = yield from deliberation(self.inner, view, short, now)
                if acted(backfill):
                    self.backfilled += sum(isinstance(d, Place) for d in backfill)
                    return backfill
            said = self._held_back(view, said, others, holder, free_now)
        return [*said, Wait.because(holder.id, self.words(view, res, now))]

    def _held_back(self, view: ClusterView, said: list[Decision], others: list[Job], holder: Job,
                   free_now: list[int]) -> list[Decision]:
        """The policy's waits, with the reservation named for each job that would have had room on its GPUs."""
        if not free_now:
            return said
        why = Reason(Code.RESERVED_GPUS, {"holder": holder.spec.name})
        blocked: set[int] = set()
        with _held(view, free_now, ""):
            closed_room = {j.id for j in others if has_room(view, j.spec)}
        for j in others:
            if j.id not in closed_room and has_room(view, j.spec):
                blocked.add(j.id)
        out = [d for d in said if not (isinstance(d, Wait) and d.job_id in blocked)]
        return out + [Wait.because(j, why) for j in sorted(blocked)]

    @staticmethod
    def words(view: ClusterView, res: Reservation, now: float) -> Reason:
        """The holder's pending reason: what it holds and until when (counted from `now`: the simulator's clock and
        the controller's differ)."""
        nodes = {int(view.cluster.gpu_node[g]) for g in res.gpus}
        names = [view.running[j].spec.name for j in res.waiting_on if j in view.running][:3]
        return Reason(Code.RESERVATION, {
            "gpus": len(res.gpus), "nodes": len(nodes),
            "free_now": sum(1 for g in res.gpus if view.free_share[g] >= 1.0 - EPS),
            "waiting_on": names, "more": len(res.waiting_on) - len(names),
            "starts_in_s": finite_or_none(res.start_s - now)})


def frame_policy(policy: Policy, reservations: ReservationRule | None = None) -> Policy:
    """`policy` under the scheduling rules every caller applies: the priority rules, and the reservation rule when
    given (the simulator, what-if and the live controller call this; the tenancy frame goes around it)."""
    if reservations is None or isinstance(policy, ReservationFrame):
        return with_priorities(policy)
    return ReservationFrame(policy, reservations)


@contextmanager
def _held(view: ClusterView, gpus: Sequence[int], why: str) -> Iterator[None]:
    """`gpus` closed to new placements for the length of the block (as an outage closes them), then as before."""
    with view.holding(dict.fromkeys(gpus, why)):
        yield

"""Job priorities and preemptibility: the rules every policy, heuristic or learned, follows, written once.

A job carries `priority` (an integer, higher first; 0 by default) and `preemptible` (true by default), set by the job
or by an admin-defined priority class it names (Kueue's WorkloadPriorityClass, KAI's priority classes). The rules:

1. **Higher priority first.** The wrapped policy is asked about the pending jobs one priority band at a time, highest
   first; a lower band is asked only once the bands above it start nothing more at this instant. Within a band the
   policy orders as it likes (arrival, SJF, Tiresias' attained service). A lower band still takes GPUs a higher band
   cannot use (there are no reservations here; those are `scheduler.core.reservations`'s).
2. **Preemption only downwards.** A policy never preempts a non-preemptible job, and never one of higher priority than
   the job it makes room for. Of equal priority only a *time-sharing* policy may (`time_sharing = True` on the
   class: Tiresias, Gittins and the `rl:` policies, whose least-attained-service preemption is what they are; as
   Kueue's `LowerOrNewerEqualPriority`, or Slurm's gang scheduling of equal jobs). A start whose preemptions break
   this is dropped (the job waits, saying why), and so is any later start the policy planned on those victims' GPUs;
   the policies that preempt (Tiresias, Gittins, `rl:`) take only victims the rule allows, so this is a safety net.
   A shrink of a running elastic job (`Resize`) is a preemption of the GPUs it gives back, for this rule as for the
   tenancy frame's; this frame also applies the resize rules (`scheduler.core.resizing`) to every resize.
3. **Higher priority makes room.** When a band starts nothing, its first job (in arrival order) that the free GPUs
   cannot hold preempts running jobs of strictly lower priority, preemptible and of its own team, lowest priority and
   then youngest first, the fewest GPUs that make room (`scheduler.core.victims`). It is then offered the freed GPUs
   alone at the next round, and makes room at most once an instant (so a policy that will not place it there does
   not cost a preemption a round).

Inside the tenancy frame (`scheduler.core.tenancy`), these rules apply to the jobs the frame makes eligible; the frame
checks that every preemption stays inside it (a victim of the job's own team), reclaims quota only from preemptible
borrowers of no higher priority, and lets a non-preemptible job start only within its team's quota (it could not be
reclaimed, so it may not borrow: KAI's rule).

With every job at one priority and preemptible (every trace before priorities), rule 1 asks once, as before, rule 2
holds for every policy that preempts (they time-share) and rule 3 finds no lower priority: behaviour is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from itertools import groupby

from scheduler.core.book import Queued
from scheduler.core.decisions import Decision, Deliberation, Place, Policy, Preempt, Resize, Wait, acted, kinds_among
from scheduler.core.model import Job, JobSpec
from scheduler.core.resizing import refusal as resize_refusal
from scheduler.core.resizing import shrinks
from scheduler.core.room import has_room, room_model
from scheduler.core.runner import PolicyFrame, deliberation
from scheduler.core.state import ClusterView
from scheduler.core.victims import choose_victims, queue_demands


def may_preempt(victim: JobSpec, for_: JobSpec, equals: bool = False) -> bool:
    """Rule 2: may a start of `for_` preempt `victim`? `equals`: the policy time-shares jobs of equal priority."""
    return victim.preemptible and (victim.priority < for_.priority or (equals and victim.priority == for_.priority))


def lowest_preemptible(view: ClusterView) -> float:
    """The lowest priority a running job may be preempted at (inf: none may be): a pending job above it has a victim
    by rule 3."""
    return view.lowest_preemptible()  # the book keeps it by the runs it starts and stops


def bands(queue: Iterable[Job]) -> list[Collection[Job]]:
    """The jobs grouped by priority, highest first, each band in the queue's order. A queue that knows it holds one
    priority (the book's, `Queued`) is its own band, and no job is read: a deep queue costs nothing here."""
    if isinstance(queue, Queued) and queue.priorities == 1:
        return [queue]
    return _bands(list(queue))


def _priority_of(band: Collection[Job]) -> float:
    """A band's priority: any of its jobs' (the book's queue is read unsorted: a sort would merge the jobs put back)."""
    return next(iter(band.unsorted.values() if isinstance(band, Queued) else band)).spec.priority


def _bands(jobs: list[Job]) -> list[Collection[Job]]:
    if not jobs:
        return []
    first = jobs[0].spec.priority
    if all(j.spec.priority == first for j in jobs):  # the common case: one band, no sort
        return [jobs]
    ordered = sorted(jobs, key=lambda j: -j.spec.priority)  # stable: queue order within a band
    return [list(band) for _, band in groupby(ordered, key=lambda j: j.spec.priority)]


def refusal(victim: JobSpec, for_: JobSpec) -> str:
    """Why rule 2 refuses preempting `victim` for `for_`, in words for the job's pending reason."""
    if not victim.preemptible:
        return f"its policy would preempt {victim.name}, which is not preemptible, to start it"
    return (f"its policy would preempt {victim.name} (priority {victim.priority}) to start it, and a job preempts only "
            f"lower priorities (its own is {for_.priority})")


class PriorityFrame(PolicyFrame):
    """A policy under the priority rules (module docstring); itself a policy, with the wrapped one's `name` and
    `oracle`. `preemptions` counts those rule 3 made; `refused` the starts rule 2 held back."""

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy)
        self.preemptions = 0
        self.refused = 0
        self.resizes_refused = 0  # resizes the resize rules dropped (`scheduler.core.resizing`)
        self._instant: float | None = None
        self._made_room_for: set[int] = set()  # this instant's
        self._focus: int | None = None  # the job rule 3 just made room for: offered the freed GPUs alone, next call

    @property
    def equals(self) -> bool:
        """Whether its policy time-shares (may preempt jobs of equal priority), read at each use: a guard
        (`policies.guarded`) switches between policies that may differ."""
        return bool(getattr(self.inner, "time_sharing", False))

    def deliberate(self, view: ClusterView, queue: Collection[Job], now: float) -> Deliberation:
        if now != self._instant:
            self._instant, self._made_room_for, self._focus = now, set(), None
        focus, self._focus = self._focus, None
        if focus is not None:
            owner = next((j for j in queue if j.id == focus), None)
            if owner is not None and has_room(view, owner.spec):
                offered = yield from self._ask(view, [owner], now)
                if acted(offered):
                    return offered
                # Its policy will not place it there: the freed GPUs go to the bands as usual (it made room once).
        if not queue:  # asked with no job queued: running elastic jobs may grow (`scheduler.core.runner`)
            return (yield from self._ask(view, queue, now))
        said: list[Decision] = []
        lowest: float | None = None  # the lowest priority a running, preemptible job has (inf: none has)
        for band in bands(queue):
            decisions = yield from self._ask(view, band, now)
            if acted(decisions):
                return said + decisions
            said += decisions
            if lowest is None:
                lowest = lowest_preemptible(view)
            if _priority_of(band) > lowest:
                made = self._make_room(view, band, queue)
                if made:
                    return said + made
        return said

    # ---- rule 2 ----------------------------------------------------------------------------------------------------

    def _ask(self, view: ClusterView, jobs: Collection[Job], now: float) -> Deliberation:
        """The wrapped policy's decisions for `jobs`, less every start whose preemptions or shrinks break rule 2 or
        the resize rules (with them, and any later start on GPUs those victims hold: the policy planned it on them),
        each such job told why it waits, and less every grow the resize rules refuse (`scheduler.core.resizing`).
        One ask: the policy is asked again at the next round, on the state the kept decisions leave."""
        decisions = yield from deliberation(self.inner, view, jobs, now)
        if not kinds_among(decisions, Preempt, Resize):
            return decisions
        # (the book's queue is a mapping already: a deep queue's preempting call no longer copies it, nor sorts it;
        # any other is read into one only if a start follows victims)
        by_id: Mapping[int, Job] | None = jobs.unsorted if isinstance(jobs, Queued) else None
        kept: list[Decision] = []
        group: list[Preempt | Resize] = []
        blocked: set[int] = set()  # GPUs of victims whose preemption was refused: still held
        refused: list[Decision] = []
        for d in decisions:
            if isinstance(d, Preempt) or (isinstance(d, Resize) and shrinks(view, d)):
                group.append(d)
                continue
            if isinstance(d, Resize):  # a grow: the resize rules, or dropped (it has no job waiting to tell)
                if resize_refusal(view, d, now) is None:
                    kept.append(d)
                else:
                    self.resizes_refused += 1
                continue
            if not isinstance(d, Place):
                kept.append(d)
                continue
            if not group and not blocked:  # no victim before it, none refused: nothing below can refuse it (a deep
                kept.append(d)  # queue's call places thousands of jobs this way, each read in a few operations)
                continue
            if by_id is None:
                by_id = {j.id: j for j in jobs}
            job = by_id.get(d.job_id)
            victims = [view.running[v.job_id] for v in group if v.job_id in view.running]
            bad = next((v for v in victims if job is not None and not may_preempt(v.spec, job.spec, self.equals)),
                       None)
            shrink = next((r for v in group if isinstance(v, Resize) and (r := resize_refusal(view, v, now))), None)
            if bad is not None or shrink is not None or blocked.intersection(d.placement.gpus):
                for v in victims:
                    blocked.update(view.placement(v.id).gpus)
                if job is not None:
                    refused.append(Wait(job.id, refusal(bad.spec, job.spec)) if bad is not None else
                                   Wait.because(job.id, shrink) if shrink is not None else
                                   Wait(job.id, "its policy planned it on GPUs whose preemption was refused"))
                    self.refused += 1
            else:
                kept += [*group, d]
            group = []
        # A shrink with no start after it makes room for none (`scheduler.core.resizing`, rule 2): dropped.
        self.resizes_refused += sum(isinstance(d, Resize) for d in group)
        group = [d for d in group if not isinstance(d, Resize)]
        return self._lone_ok(view, [*kept, *group]) + refused

    @staticmethod
    def _lone_ok(view: ClusterView, decisions: list[Decision]) -> list[Decision]:
        """`decisions` less any preemption of a non-preemptible job that no placement follows (no start to check it
        against, and rule 2 never takes one)."""
        if not decisions or not isinstance(decisions[-1], Preempt):
            return decisions
        end = len(decisions)
        while end and isinstance(decisions[end - 1], Preempt):
            end -= 1
        lone = [d for d in decisions[end:] if not (isinstance(d, Preempt) and d.job_id in view.running
                                                   and not view.running[d.job_id].spec.preemptible)]
        return decisions[:end] + lone

    # ---- rule 3 ----------------------------------------------------------------------------------------------------

    def _make_room(self, view: ClusterView, band: Collection[Job], queue: Collection[Job]) -> list[Decision]:
        """Preempt lower-priority jobs for the band's first job that they make room for (rule 3); [] if none."""
        pending = queue_demands(queue)
        for job in band:
            spec = job.spec
            if job.id in self._made_room_for or has_room(view, spec):
                continue
            candidates = sorted(
                (r for r in view.running.values() if r.spec.team == spec.team and may_preempt(r.spec, spec)),
                key=lambda r: (r.spec.priority, -run_start(r), -r.id))
            if not candidates:
                continue
            lacking, offer = room_model(view, spec)
            takers = pending.takers(job.spec.gpu_demand)  # a band's job is pending
            def fits(victims: list[Job], spec: JobSpec = spec) -> bool:
                return has_room(view, spec, victims)

            victims = choose_victims((offer(r) for r in candidates), lacking, fits, takers)
            if victims:
                self._made_room_for.add(job.id)
                self._focus = job.id
                self.preemptions += len(victims)
                return [Preempt(v.id, f"preempted for {spec.name}, of priority {spec.priority} (its own is "
                                      f"{v.spec.priority})", for_job=job.id) for v in victims]
        return []


def run_start(job: Job) -> float:
    """When its current run started; a run placed whose workers have not reported yet (the live controller's) is the
    youngest of all."""
    return job.start_s if job.start_s is not None else math.inf


def with_priorities(policy: Policy) -> Policy:
    """`policy` under the priority rules: wrapped once (a frame already wrapped, or one that wraps its own inner
    policy, as the tenancy frame does, is returned as it is)."""
    if isinstance(policy, PriorityFrame) or getattr(policy, "applies_priorities", False):
        return policy
    return PriorityFrame(policy)

"""The tenancy frame: which pending jobs are eligible, what is reclaimed, and the words for why a job waits;
it wraps any policy and is one."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter
from types import MappingProxyType

from scheduler.core.decisions import Decision, Deliberation, Place, Policy, Preempt, Resize, Wait, WakeAt, acted
from scheduler.core.elastic import sizes_within
from scheduler.core.model import (
    DEFAULT_TEAM,
    Job,
    JobSpec,
    Placement,
)
from scheduler.core.priorities import may_preempt, run_start, with_priorities
from scheduler.core.resizing import gives_back, kept_gpus, shrinks, too_soon
from scheduler.core.room import has_room, room_model
from scheduler.core.runner import PolicyFrame, deliberation
from scheduler.core.standing import TeamStanding, TenancyStanding, growth_room
from scheduler.core.state import ClusterView
from scheduler.core.tenancy.teams import EPS, Team, Teams
from scheduler.core.tenancy.usage import FairShare
from scheduler.core.victims import Offer, fewest_victims, first_victims

MAX_ASKS = 64  # re-asks of the wrapped policy at one call after holding back jobs whose preemptions left the frame


@dataclass
class Standing:
    """One team at one instant."""

    team: Team
    in_use: float = 0.0  # GPU share its running jobs hold
    pending: list[Job] = field(default_factory=list)  # priority, then arrival
    ratio: float = 0.0  # fair-share usage over quota

    @property
    def borrowed(self) -> float:
        return max(0.0, self.in_use - self.team.quota_gpus)

    @property
    def unused_quota(self) -> float:
        return max(0.0, self.team.quota_gpus - self.in_use)


@dataclass
class Frame:
    """What the tenancy layer decided at one call: the jobs the policy may start, and why the others wait."""

    eligible: list[Job]
    within_quota: set[int]
    waits: dict[int, str]
    swaps: list[Job] = field(default_factory=list)  # beyond their quota, no idle GPUs: may start only by a swap
    lendable: float = 0.0  # free GPUs no job within its quota needs and no eligible borrower was counted on
    queued_within: dict[str, float] = field(default_factory=dict)  # per team, its queued jobs within its quota


_PRIORITY = attrgetter("spec.priority")


def _gpus(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _n_gpus(x: float) -> str:
    return f"{_gpus(x)} GPU{'' if abs(x - 1.0) < EPS else 's'}"


# ---- why a job beyond its team's quota waits: the words, from the figures the frame decided with -------------------


def holding_words(team: Team, in_use: float, queued_within: float) -> str:
    """What a team holds against its quota, as the frame counts it: "team vision holds 10 GPUs of its 16-GPU quota
    (its queued jobs within the quota take 4 more)", "... holds 16 GPUs, all of its 16-GPU quota", "... holds 18 GPUs:
    its 16-GPU quota and 2 borrowed", "team default has no quota: it runs only on GPUs other teams leave idle
    (borrowing); it holds 2 GPUs"."""
    name, quota = team.name, team.quota_gpus
    if quota <= EPS:
        text = f"team {name} has no quota: it runs only on GPUs other teams leave idle (borrowing)"
        return text + (f"; it holds {_n_gpus(in_use)}" if in_use > EPS else "")
    if in_use < quota - EPS:
        text = f"team {name} holds {_n_gpus(in_use)} of its {_gpus(quota)}-GPU quota"
        if queued_within > EPS:
            text += f" (its queued jobs within the quota take {_gpus(queued_within)} more)"
        return text
    if in_use <= quota + EPS:
        return f"team {name} holds {_n_gpus(in_use)}, all of its {_gpus(quota)}-GPU quota"
    return f"team {name} holds {_n_gpus(in_use)}: its {_gpus(quota)}-GPU quota and {_gpus(in_use - quota)} borrowed"


def limit_words(team: Team, in_use: float, queued_within: float, need: float) -> str:
    """Why a job waits that would take its team past its quota plus its borrowing limit (the frame's test:
    in use + queued within the quota + this job > quota + borrowing limit)."""
    borrow = team.borrow_limit_gpus or 0.0
    after = in_use + queued_within + need
    if team.quota_gpus <= EPS:
        bound = f"past its borrowing limit of {_n_gpus(borrow)}"
    else:
        bound = (f"past its {_gpus(team.quota_gpus)}-GPU quota plus its borrowing limit of {_gpus(borrow)} "
                 f"({_gpus(team.ceiling)} in all)")
    return f"{holding_words(team, in_use, queued_within)}; the job needs {_gpus(need)}, which would take it to " \
           f"{_n_gpus(after)}, {bound}"


def unborrowable_words(team: Team, in_use: float, queued_within: float, need: float) -> str:
    """Why a non-preemptible job waits that its team's quota cannot hold now: it may not borrow (a borrowed GPU must
    be reclaimable)."""
    return (f"{holding_words(team, in_use, queued_within)}; the job needs {_gpus(need)} and is not preemptible, so it "
            "runs only within its team's quota (GPUs it borrowed could not be reclaimed)")


def borrow_words(team: Team, in_use: float, queued_within: float, need: float, lendable: float, free: float,
                 reserved: float) -> str:
    """Why a job waits that its team's quota cannot hold and the GPUs that may be lent cannot either: what it needs,
    what may be lent now and why no more (free, held for teams under their quota, promised to borrowers ahead)."""
    left = max(0.0, team.quota_gpus - in_use - queued_within)
    if team.quota_gpus <= EPS:
        beyond = ""
    elif left > EPS:
        beyond = f", more than the {_gpus(left)} left of its quota, so it must borrow"
    else:
        beyond = ", beyond its quota, so it must borrow"
    ahead = max(0.0, free - reserved - lendable)
    parts = [f"{_gpus(free)} free"]
    if reserved > EPS:
        parts.append(f"{_gpus(reserved)} held for teams under their quota")
    if ahead > EPS:
        parts.append(f"{_gpus(ahead)} going to borrowers ahead")
    return (f"{holding_words(team, in_use, queued_within)}; the job needs {_gpus(need)}{beyond}: waiting for idle "
            f"GPUs to lend, {_gpus(max(0.0, lendable))} may be lent now ({', '.join(parts)})")


class TenancyFrame(PolicyFrame):
    """A policy inside the tenancy frame (see the module docstring). `name` and `oracle` are the wrapped policy's."""

    applies_priorities = True  # its wrapped policy is under the priority rules (`scheduler.core.priorities`)

    def __init__(self, policy: Policy, teams: Teams) -> None:
        if DEFAULT_TEAM not in teams.teams:  # jobs that name no team: no quota, they only borrow
            teams = Teams({**teams.teams, DEFAULT_TEAM: Team(DEFAULT_TEAM, 0.0, None)}, teams.half_life_s)
        super().__init__(with_priorities(policy), named_as=policy)
        self.teams = teams
        self.share = FairShare(teams)
        self.reclaims = 0  # preemptions the frame made to give teams their quota back
        self.swaps = 0  # preemptions the policy made of a team's own jobs to start one of its jobs beyond its quota
        # Reclaims at the current instant: the jobs reclaimed for (each at most once per instant), and the one whose
        # reclaimed GPUs the next call offers to it alone. Without these, a policy that ranks a victim above the
        # owner (Gittins, Tiresias) put the victim straight back on the reclaimed GPUs, the owner still did not fit,
        # and the frame reclaimed the same job again, forever (a round limit in the simulator).
        self._instant: float | None = None
        self._reclaimed_for: set[int] = set()
        self._focus: int | None = None
        # The job the priority rule made room for by a swap at the last call (`_swap`). At the next call its team may
        # be back within its quota, the job then beyond what is left of it and not a swap any more: offered with the
        # rest it waited for lendable GPUs while its victims took their GPUs back, at every call (a livelock).
        self._swapped_for: int | None = None
        self._said: dict[int, Wait] = {}  # the last call's waits (see `_waits`)

    def team_of(self, spec: JobSpec) -> str:
        return spec.team if spec.team in self.teams.teams else DEFAULT_TEAM

    def standings(self, view: ClusterView, queue: Iterable[Job]) -> dict[str, Standing]:
        """Each team now, in fair-share order (lowest usage over quota first)."""
        out = {name: Standing(team, ratio=self.share.ratio(name)) for name, team in self.teams.teams.items()}
        default = out[DEFAULT_TEAM]  # `team_of` inlined: this runs over the whole queue at every pass
        for job in view.running.values():
            out.get(job.spec.team, default).in_use += job.spec.gpu_demand
        for job in queue:
            out.get(job.spec.team, default).pending.append(job)
        for st in out.values():
            if st.pending:
                st.pending.sort(key=_PRIORITY, reverse=True)  # stable even reversed: arrival order within a priority
        return dict(sorted(out.items(), key=lambda kv: (kv[1].ratio, kv[0])))

    # ---- eligibility ---------------------------------------------------------------------------------------------

    def frame(self, view: ClusterView, standings: Mapping[str, Standing]) -> Frame:
        # This runs over the whole queue at every call (a thousand jobs at a pass of the live controller): each job's
        # demand is read once, and each team's figures are taken out of the loops over its jobs.
        order = list(standings.values())
        within: set[int] = set()
        waits: dict[int, str] = {}
        eligible: list[Job] = []
        wanted_within: dict[str, float] = {}
        over: dict[str, list[tuple[Job, float]]] = {}
        for st in order:
            room = st.unused_quota + EPS
            taken = 0.0
            rest = over[st.team.name] = []
            for job in st.pending:
                d = job.spec.gpu_demand
                if taken + d <= room:
                    taken += d
                    within.add(job.id)
                    eligible.append(job)
                else:
                    rest.append((job, d))
            wanted_within[st.team.name] = taken
        reserved = sum(wanted_within.values())  # each at most the team's unused quota
        lendable = max(0.0, view.free_capacity - reserved)
        offered: list[tuple[Job, float, str]] = []
        for st in order:
            name = st.team.name
            head = st.in_use + wanted_within[name]
            limit = st.team.ceiling + EPS
            # One wording per team, kind and job size: the figures in it are the ones this decision used.
            at_limit: dict[tuple[float, float], str] = {}
            to_borrow: dict[tuple[float, float], str] = {}
            for job, d in over[name]:
                if not job.spec.preemptible:
                    waits[job.id] = unborrowable_words(st.team, st.in_use, wanted_within[name], d)
                    continue
                if head + d > limit:
                    key = (d, head)
                    waits[job.id] = at_limit.get(key) or at_limit.setdefault(key, limit_words(
                        st.team, st.in_use, wanted_within[name], d))
                elif d > lendable + EPS:
                    key = (d, lendable)
                    waits[job.id] = to_borrow.get(key) or to_borrow.setdefault(key, borrow_words(
                        st.team, st.in_use, wanted_within[name], d, lendable, view.free_capacity, reserved))
                else:
                    head += d
                    lendable -= d
                    eligible.append(job)
                    continue
                offered.append((job, d, name))
        # A swap can free at most what the team runs, and the rest must be lendable: offer only jobs that could fit.
        cap = {st.team.name: min(st.in_use + lendable, st.team.ceiling) + EPS for st in order}
        swaps = [j for j, d, name in offered if d <= cap[name]]
        return Frame(eligible, within, waits, swaps, lendable, wanted_within)

    # ---- reclaim -------------------------------------------------------------------------------------------------

    def reclaim(self, view: ClusterView, standings: Mapping[str, Standing], frame: Frame) -> list[Decision]:
        """Take borrowed GPUs back for the first team (in fair-share order) with a pending job within its quota that
        the free GPUs cannot hold, if borrowers hold enough to make room: by shrinking elastic borrowers where that
        makes room (`_shrinks`: they give back what they borrow and keep running), else by preempting borrowers."""
        # Borrowers' jobs, furthest over their fair share first; within a team, youngest first. A team with a job
        # within its quota borrows nothing, so these are never the owner's.
        candidates = sorted(
            (j for j in view.running.values() if standings[self.team_of(j.spec)].borrowed > EPS),
            key=lambda j: (-standings[self.team_of(j.spec)].ratio, -run_start(j), -j.id))
        if not candidates:
            return []
        for st in standings.values():
            for job in st.pending:
                if job.id not in frame.within_quota or has_room(view, job.spec, []):
                    continue
                if job.id in self._reclaimed_for:  # its policy started others on what was reclaimed for it
                    frame.waits.setdefault(job.id, f"waiting for GPUs within team {st.team.name}'s quota; those "
                                                   "reclaimed for it went to other jobs, it reclaims again later")
                    continue
                shrunk = self._shrinks(view, job, standings, candidates)
                if shrunk:
                    self._reclaimed_for.add(job.id)
                    self._focus = job.id
                    self.reclaims += len(shrunk)
                    return [Resize(d.job_id, d.placement, f"shrunk to {len(d.placement.gpus)} GPUs: reclaimed for team "
                                   f"{st.team.name} (job {job.spec.name}); team {team} was borrowing them",
                                   for_job=job.id) for d, team in shrunk]
                victims = self._victims(view, job.spec, standings, candidates)
                if victims:
                    self._reclaimed_for.add(job.id)
                    self._focus = job.id
                    self.reclaims += len(victims)
                    by = {v: self.team_of(view.running[v].spec) for v in victims}
                    return [Preempt(v, f"reclaimed for team {st.team.name} (job {job.spec.name}): team {by[v]} "
                                       "was borrowing these GPUs") for v in victims]
                # The borrowers cannot make room for it (fragmentation, or too little borrowed): it waits.
                frame.waits.setdefault(job.id, f"waiting for GPUs within team {st.team.name}'s quota; borrowers "
                                               "hold too little to reclaim")
        return []

    def _shrinks(self, view: ClusterView, job: Job, standings: Mapping[str, Standing],
                 candidates: list[Job]) -> list[tuple[Resize, str]]:
        """The shrinks of elastic borrowers' jobs, in the reclaim's order, that give a whole-GPU `job` the GPUs it
        lacks, each giving back no more than its team borrows (nor its job's GPUs above its minimum), to the nearest
        size it accepts; [] if they cannot (a GPU share, or too little to give). The resize rules hold for them: not
        within the resize interval, not of a higher priority or a non-preemptible job (`scheduler.core.resizing`)."""
        spec = job.spec
        lacking = spec.workers - view.free_whole if spec.num_gpus >= 1 else 0
        if lacking <= 0:
            return []
        left = {name: st.borrowed for name, st in standings.items()}
        out: list[tuple[Resize, str]] = []
        for j in candidates:
            if (j.id not in view.elastic or too_soon(view, j, self._instant or 0.0)
                    or not may_preempt(j.spec, spec, equals=True)):
                continue
            team = self.team_of(j.spec)
            give = min(lacking, int(left[team] + EPS))
            within = sizes_within(j.submitted or j.spec, j.spec.workers - give, j.spec.workers)
            size = within[0] if within else j.spec.workers
            if size >= j.spec.workers:
                continue
            kept = kept_gpus(view, view.placement(j.id).gpus)[:size]
            out.append((Resize(j.id, Placement(tuple(sorted(kept)))), team))
            lacking -= j.spec.workers - size
            left[team] -= j.spec.workers - size
            if lacking <= 0:
                return out
        return []

    def _victims(self, view: ClusterView, spec: JobSpec, standings: Mapping[str, Standing],
                 candidates: list[Job]) -> list[int]:
        """The borrowed jobs to reclaim for `spec`, by the rule every preemption follows (`scheduler.core.victims`):
        the first in the frame's order that make room, unless they free more than it lacks; then the fewest GPUs."""
        lacking, offer = room_model(view, spec)
        if not lacking:
            return []
        # Reclaim is the quota's guarantee, so it takes borrowers of equal priority too, but never a higher one or a
        # non-preemptible job (`scheduler.core.priorities`; such a job never borrows, so this only guards).
        offers = [offer(j) for j in candidates if may_preempt(j.spec, spec, equals=True)]

        def fits(victims: list[Job]) -> bool:
            return has_room(view, spec, victims) and self._only_borrowed(victims, standings)

        first = first_victims(self._while_borrowing(offers, standings), lacking, fits)
        if first is None:
            return []
        return [j.id for j in fewest_victims(*first, offers, lacking, fits)]

    def _while_borrowing(self, offers: list[Offer[Job, int]],
                         standings: Mapping[str, Standing]) -> Iterator[Offer[Job, int]]:
        """The offers in order, skipping a team's once those before add up to what it borrows: what it still holds
        then is its own quota."""
        left = {name: st.borrowed for name, st in standings.items()}
        for o in offers:
            team = self.team_of(o.victim.spec)
            if left[team] > EPS:
                left[team] -= o.freed
                yield o

    def _only_borrowed(self, victims: list[Job], standings: Mapping[str, Standing]) -> bool:
        """Never more of a team than it borrows: each team's victims but its largest take less than it borrows (as
        `_while_borrowing` would have reached them, the largest last)."""
        by_team: dict[str, list[float]] = {}
        for v in victims:
            by_team.setdefault(self.team_of(v.spec), []).append(v.spec.gpu_demand)
        return all(sum(d) - max(d) < standings[t].borrowed - EPS for t, d in by_team.items())

    # ---- what the wrapped policy is told ----------------------------------------------------------------------

    def told(self, view: ClusterView, standings: Mapping[str, Standing], frame: Frame,
             swaps: bool = False) -> TenancyStanding:
        """Each team's standing for the wrapped policy (`ClusterView.tenancy`); `swaps`: it is asked about the jobs
        that may start only by a swap."""
        demand = [name for name, st in standings.items() if st.pending or st.in_use > EPS]  # fair-share order
        last = max(len(demand) - 1, 1)
        rank = {name: i / last for i, name in enumerate(demand)}
        teams = {name: TeamStanding(name, st.team.quota_gpus, st.in_use, st.borrowed, rank.get(name, 0.0),
                                    name in rank, st.team.ceiling, frame.queued_within.get(name, 0.0))
                 for name, st in standings.items()}
        # Borrowers take the GPUs in no team's quota first; only beyond those do they hold others' idle quota.
        unowned = max(0.0, view.cluster.num_gpus - sum(t.quota_gpus for t in self.teams.teams.values()))
        lent = max(0.0, sum(st.borrowed for st in standings.values()) - unowned)
        return TenancyStanding(MappingProxyType(teams), frozenset(frame.within_quota),
                               frozenset(j.id for j in frame.swaps) if swaps else frozenset(), frame.lendable, lent)

    @staticmethod
    @contextmanager
    def _telling(view: ClusterView, standing: TenancyStanding) -> Iterator[None]:
        """The standing on the view while the wrapped policy decides, and the view as it was afterwards (whatever
        the policy raised: the view outlives this call)."""
        before, view.tenancy = view.tenancy, standing
        try:
            yield
        finally:
            view.tenancy = before

    # ---- the policy protocol -------------------------------------------------------------------------------------

    def deliberate(self, view: ClusterView, queue: Collection[Job], now: float) -> Deliberation:
        """The frame's decisions at this call (`schedule`), yielding the questions its wrapped policy asks while
        deciding inside it (`scheduler.core.runner`): the RL environment answers them in the agent's place."""
        self.share.observe(now, view.running.values(), self.team_of)
        if now != self._instant:
            self._instant, self._reclaimed_for, self._focus, self._swapped_for = now, set(), None, None
        standings = self.standings(view, queue)
        frame = self.frame(view, standings)
        owner = next((j for j in frame.eligible if j.id == self._focus and j.id in frame.within_quota), None)
        if owner is None and self._swapped_for is not None:
            owner = next((j for j in queue if j.id == self._swapped_for), None)
        self._swapped_for = None
        if owner is not None and has_room(view, owner.spec, []):
            # Just reclaimed for, or swapped for: it alone is offered the GPUs freed for it, before borrowers or
            # swaps could take them.
            frame.eligible, frame.swaps = [owner], []
            frame.waits.pop(owner.id, None)
            decisions: list[Decision] = []
        else:
            self._focus = None
            decisions = self.reclaim(view, standings, frame)
        if not decisions:
            decisions = yield from self._ask(view, frame, standings, now)
            by_id = {j.id: j for j in frame.eligible}
            for d in decisions:
                if isinstance(d, Place) and d.job_id in by_id:
                    job = by_id[d.job_id]
                    self.share.placed(job, self.team_of(job.spec), now)
            # Swaps only once nothing else changes: the jobs within quota and the borrowers on idle GPUs go first, and
            # the runner asks again after every change, so a swap is looked at on the state they leave. A preemption
            # alone counts (the priority rules make room for a job first, and start it at the next call): asked now,
            # the policy would see its victims still running and could take them again.
            if not acted(decisions) and frame.swaps:
                decisions += yield from self._swap(view, frame, standings, now)
            if owner is not None:
                self._focus = None
        return decisions + self._waits(frame.waits)

    def _waits(self, waits: Mapping[int, str]) -> list[Decision]:
        """A `Wait` per job the frame holds back, the same object as last call's where its reason is unchanged (most
        of a thousand, each call)."""
        last, said = self._said, {}
        for job_id, why in waits.items():
            w = last.get(job_id)
            said[job_id] = w if w is not None and w.reason == why else Wait(job_id, why)
        self._said = said
        return list(said.values())

    def _swap(self, view: ClusterView, frame: Frame, standings: Mapping[str, Standing], now: float) -> Deliberation:
        """Ask the wrapped policy about the jobs beyond their quota that idle GPUs cannot hold; keep each start whose
        preemptions are all of its own team and whose growth (GPUs taken beyond those freed) fits what may still be
        lent and the team's borrowing limit. A start that breaks this is dropped with its preemptions, and so is any
        later start on the GPUs those victims would have freed (the policy planned it on them)."""
        by_id = {j.id: j for j in frame.swaps}
        lendable = frame.lendable
        in_use = {name: st.in_use for name, st in standings.items()}
        kept: list[Decision] = []
        victims: list[Preempt | Resize] = []
        blocked: set[int] = set()  # GPUs of victims whose preemption was dropped: still held
        with self._telling(view, self.told(view, standings, frame, swaps=True)):
            asked = yield from deliberation(self.inner, view, frame.swaps, now)
        for d in asked:
            if isinstance(d, Preempt) or (isinstance(d, Resize) and shrinks(view, d)):
                victims.append(d)
                continue
            if isinstance(d, WakeAt):  # e.g. Tiresias' next demotion, when a running job may become a victim
                kept.append(d)
            if not isinstance(d, Place):
                continue  # a Wait: the frame's reason for these jobs says more
            group, victims = victims, []
            job = by_id.get(d.job_id)
            ran = [view.running[v.job_id] for v in group if v.job_id in view.running]
            growth = self._growth(view, job, ran, group, lendable, in_use, standings)
            if growth is None or blocked.intersection(d.placement.gpus):
                for v in ran:
                    blocked.update(view.placement(v.id).gpus)
                continue
            assert job is not None
            team = self.team_of(job.spec)
            lendable -= max(0.0, growth)
            in_use[team] += growth
            self.swaps += len(group)
            kept += [*group, d]
            frame.waits.pop(job.id, None)
            self.share.placed(job, team, now)
        # Preemptions the priority rule made for a job it will place at the next round (`for_job`): a swap too.
        victims = [v for v in victims if isinstance(v, Preempt)]  # (a shrink for no start makes room for none)
        owner = by_id.get(victims[0].for_job) if victims and victims[0].for_job is not None else None
        ran = [view.running[v.job_id] for v in victims if v.job_id in view.running]
        if (owner is not None and all(v.for_job == owner.id for v in victims)
                and self._growth(view, owner, ran, victims, lendable, in_use, standings) is not None):
            self.swaps += len(victims)
            kept += victims
            self._swapped_for = owner.id
        return kept

    def _growth(self, view: ClusterView, job: Job | None, ran: list[Job], group: Sequence[Preempt | Resize],
                lendable: float, in_use: Mapping[str, float], standings: Mapping[str, Standing]) -> float | None:
        """The GPUs `job`'s swap takes beyond those its victims free, or None if the swap leaves the frame: a victim
        not running or of another team, or growth past what may be lent or the team's borrowing limit."""
        if job is None or len(ran) < len(group):
            return None
        team = self.team_of(job.spec)
        growth = job.spec.gpu_demand - sum(gives_back(view, v) for v in group)
        if (any(self.team_of(v.spec) != team for v in ran)
                or (growth > EPS and (growth > lendable + EPS
                                      or in_use[team] + growth > standings[team].team.ceiling + EPS))):
            return None
        return growth

    def _ask(self, view: ClusterView, frame: Frame, standings: Mapping[str, Standing], now: float) -> Deliberation:
        held: set[int] = set()
        team_of = {j.id: self.team_of(j.spec) for j in frame.eligible}
        by_id = {j.id: j for j in frame.eligible}
        for _ in range(MAX_ASKS):
            eligible = [j for j in frame.eligible if j.id not in held]
            if not eligible and not view.growable:  # (with none, only running elastic jobs may still grow)
                return []
            told = self.told(view, standings, frame)
            with self._telling(view, told):
                decisions = yield from deliberation(self.inner, view, eligible, now)
            kept, bad = self._inside(view, decisions, team_of, by_id, frame, standings, told)
            if bad is None:
                return kept
            held.add(bad[0])
            frame.waits[bad[0]] = bad[1]
        return []

    def _inside(self, view: ClusterView, decisions: list[Decision], team_of: Mapping[int, str],
                by_id: Mapping[int, Job], frame: Frame, standings: Mapping[str, Standing],
                told: TenancyStanding) -> tuple[list[Decision], tuple[int, str] | None]:
        """The decisions if every preemption and shrink stays inside the frame and every start beyond a job's
        submitted size fits its team's room to grow, else the job whose start broke that and why; less the grows the
        frame does not allow (`_grown`). A preemption or a shrink belongs to the placement that follows it (how
        policies emit them)."""
        kept: list[Decision] = []
        victims: list[Preempt | Resize] = []
        grows: list[Resize] = []
        for d in decisions:
            if isinstance(d, Preempt) or (isinstance(d, Resize) and shrinks(view, d)):
                victims.append(d)
            elif isinstance(d, Resize):
                grows.append(d)
            elif isinstance(d, Place):
                mine = team_of.get(d.job_id)
                for v in victims:
                    job = view.running.get(v.job_id)
                    if job is None:
                        continue
                    theirs = self.team_of(job.spec)
                    if theirs != mine and not (d.job_id in frame.within_quota and standings[theirs].borrowed > EPS):
                        return kept, (d.job_id, "its policy would preempt another team's jobs within their quota to "
                                                "start it")
                placed = by_id.get(d.job_id)
                extra = len(d.placement.gpus) - placed.spec.workers if placed is not None and placed.spec.elastic else 0
                if extra > 0 and mine is not None and placed is not None:  # beyond its submitted size: a grow
                    room = growth_room(told.teams[mine], told.lendable_gpus, placed.spec.preemptible)
                    if extra > room + EPS:
                        return kept, (d.job_id, f"its policy would start it at {len(d.placement.gpus)} GPUs, "
                                                f"{extra} more than it asks for, and team {mine} may take {room:g} "
                                                "more now")
                    told = told.grown(mine, extra)
                kept += [*victims, d]
                victims = []
            else:
                kept.append(d)
        # Preemptions with no placement after them are dropped: inside the frame a preemption makes room for a job. The
        # priority rule's name that job (`for_job`): kept when the victim is of its team.
        for v in victims:
            job = view.running.get(v.job_id)
            if (isinstance(v, Preempt) and job is not None and v.for_job is not None
                    and team_of.get(v.for_job) == self.team_of(job.spec)):
                kept.append(v)
        return kept + self._grown(view, grows, told), None

    def _grown(self, view: ClusterView, grows: list[Resize], told: TenancyStanding) -> list[Decision]:
        """The grows a team may make (`standing.growth_room`: `scheduler.core.resizing`, rule 4), in order."""
        kept: list[Decision] = []
        for d in grows:
            job = view.running.get(d.job_id)
            if job is None:
                kept.append(d)  # (not running: the book refuses it as the policy's bug)
                continue
            team = self.team_of(job.spec)
            growth = len(d.placement.gpus) - job.spec.gpu_demand
            if growth <= growth_room(told.teams[team], told.lendable_gpus, job.spec.preemptible) + EPS:
                told = told.grown(team, growth)
                kept.append(d)
        return kept

"""What teams used over time: fair-share usage (decayed GPU-seconds), the ledger of a simulated run with its
fairness figures, and each job's JCT with its team alone on its quota."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.core.model import (
    Job,
    JobSpec,
)
from scheduler.core.tenancy.teams import EPS, Teams


class FairShare:
    """Each team's usage, GPU-seconds decayed with a half-life: the key of the fair-share order.

    The frame sees the cluster only when it is asked to schedule, so it integrates run by run: a job counts from when
    it started (or the last look) to when it ended (`end_s`, where the runner records it) or to this look."""

    def __init__(self, teams: Teams) -> None:
        self.teams = teams
        self.usage: dict[str, float] = dict.fromkeys(teams.teams, 0.0)
        self.now: float | None = None
        self._holding: dict[int, tuple[Job, str, float, float]] = {}  # job id -> (job, team, GPUs, counted from)

    def observe(self, now: float, running: Iterable[Job], team_of: Callable[[JobSpec], str]) -> None:
        last = self.now if self.now is not None else now
        if now > last:
            h = self.teams.half_life_s
            keep = 0.5 ** ((now - last) / h)
            for name in self.usage:
                self.usage[name] *= keep
        self.now = max(now, last)
        seen: set[int] = set()
        for job in running:
            seen.add(job.id)
            if job.id not in self._holding:
                start = job.start_s if job.start_s is not None else now
                self._holding[job.id] = (job, team_of(job.spec), job.spec.gpu_demand, min(max(start, last), now))
        for job_id, (job, team, gpus, since) in list(self._holding.items()):
            gone = job_id not in seen
            end = now
            if gone and job.end_s is not None and since <= job.end_s <= now:
                end = job.end_s
            self._add(team, gpus, since, end, now)
            if gone:
                del self._holding[job_id]
            else:  # (counted at its size now from here: an elastic job's may have changed)
                self._holding[job_id] = (job, team, job.spec.gpu_demand, now)

    def inherit(self, old: FairShare) -> None:
        """Carry usage over from the fair share of a previous set of teams (a quota changed): teams that remain keep
        theirs, new teams start at 0, and runs counted so far go on being counted from where they were."""
        self.usage.update({name: u for name, u in old.usage.items() if name in self.usage})
        self.now = old.now
        self._holding = {j: held for j, held in old._holding.items() if held[1] in self.usage}

    def placed(self, job: Job, team: str, now: float) -> None:
        """A job the frame let start now: counted from now even if it ends before the frame looks again."""
        self._holding.setdefault(job.id, (job, team, job.spec.gpu_demand, now))

    def _add(self, team: str, gpus: float, a: float, b: float, now: float) -> None:
        """GPUs held over [a, b], decayed to `now`: the integral of gpus * 2^-((now - t) / h) dt."""
        if b <= a or team not in self.usage:
            return
        h = self.teams.half_life_s
        self.usage[team] += gpus * h / math.log(2) * (0.5 ** ((now - b) / h) - 0.5 ** ((now - a) / h))

    def ratio(self, name: str) -> float:
        """Usage over quota: lower goes first. A team without quota comes after every team with one."""
        quota = self.teams.teams[name].quota_gpus
        if quota <= EPS:
            return math.inf if self.usage[name] > EPS else 1e300
        return self.usage[name] / quota


class TeamLedger:
    """What each team got, exactly, for reports: the runner (the simulator) calls `observe` after every scheduling
    instant, when the holdings are final until the next one."""

    def __init__(self, teams: Teams, team_of: Callable[[JobSpec], str]) -> None:
        self.teams = teams
        self.team_of = team_of
        names = list(teams.teams)
        self.used_gpu_s = dict.fromkeys(names, 0.0)
        self.over_quota_s = dict.fromkeys(names, 0.0)
        self.in_system_s = dict.fromkeys(names, 0.0)  # with jobs pending or running
        self.starved_s = dict.fromkeys(names, 0.0)  # under 95% of its quota with a pending job that fits in it
        self._last: float | None = None
        self._in_use: dict[str, float] = {}
        self._present: set[str] = set()
        self._starved: set[str] = set()

    def observe(self, now: float, running: Iterable[Job], pending: Iterable[Job]) -> None:
        if self._last is not None and now > self._last:
            dt = now - self._last
            for name, used in self._in_use.items():
                self.used_gpu_s[name] += used * dt
                if used > self.teams.teams[name].quota_gpus + EPS:
                    self.over_quota_s[name] += dt
            for name in self._present:
                self.in_system_s[name] += dt
            for name in self._starved:
                self.starved_s[name] += dt
        self._last = now
        in_use: dict[str, float] = {}
        for job in running:
            t = self.team_of(job.spec)
            in_use[t] = in_use.get(t, 0.0) + job.spec.gpu_demand
        smallest: dict[str, float] = {}
        for job in pending:
            t = self.team_of(job.spec)
            smallest[t] = min(smallest.get(t, math.inf), job.spec.gpu_demand)
        self._in_use = in_use
        self._present = set(in_use) | set(smallest)
        self._starved = {t for t, d in smallest.items()
                         if in_use.get(t, 0.0) < 0.95 * self.teams.teams[t].quota_gpus - EPS
                         and in_use.get(t, 0.0) + d <= self.teams.teams[t].quota_gpus + EPS}

    def report(self, jobs: Iterable[Job], isolated: Isolated | None = None) -> dict[str, Any]:
        """Per team: jobs, average JCT, GPU-hours used against its quota over its time in the system, time over
        quota and time starved; overall, Jain's index over the teams with demand (see `jain`). With `isolated`, also
        Themis' finish-time fairness (see `Isolated`): per team the largest and the median rho and how many finished
        jobs have none, overall the largest rho."""
        done: dict[str, list[Job]] = {}
        demand: dict[str, float] = {}
        for job in jobs:
            t = self.team_of(job.spec)
            demand[t] = demand.get(t, 0.0) + job.spec.duration_s * job.spec.gpu_demand
            if job.end_s is not None:
                done.setdefault(t, []).append(job)
        teams_out: dict[str, dict[str, float | None]] = {}
        shares: list[float] = []
        for name, team in self.teams.teams.items():
            if name not in demand:
                continue
            finished = done.get(name, [])
            jct = [j.end_s - j.spec.submit_s for j in finished if j.end_s is not None]
            entitled = team.quota_gpus * self.in_system_s[name]
            teams_out[name] = {
                "quota_gpus": team.quota_gpus, "jobs": float(len(finished)),
                "avg_jct_s": sum(jct) / len(jct) if jct else 0.0,
                "gpu_hours": self.used_gpu_s[name] / 3600.0, "quota_gpu_hours": entitled / 3600.0,
                "demand_gpu_hours": demand[name] / 3600.0,
                "over_quota_s": self.over_quota_s[name], "starved_s": self.starved_s[name],
                "in_system_s": self.in_system_s[name],
            }
            due = min(entitled, demand[name])
            if due > EPS:
                shares.append(self.used_gpu_s[name] / due)
        out: dict[str, Any] = {"teams": teams_out, "jain": jain(shares)}
        if isolated is not None:
            rhos: list[float] = []
            excluded = 0
            for name, row in teams_out.items():
                finished = done.get(name, [])
                mine = [(j.end_s - j.spec.submit_s) / isolated.jct[j.id] for j in finished
                        if j.end_s is not None and j.id in isolated.jct]
                rhos += mine
                excluded += len(finished) - len(mine)
                row |= {"rho_max": max(mine) if mine else None,
                        "rho_median": statistics.median(mine) if mine else None,
                        "rho_jobs": len(mine), "rho_excluded": len(finished) - len(mine)}
            out |= {"rho_max": max(rhos) if rhos else None, "rho_jobs": len(rhos), "rho_excluded": excluded}
        return out


@dataclass(frozen=True)
class Isolated:
    """Each job's JCT with its team alone on its quota, by job id: the denominator of Themis' finish-time fairness
    (NSDI'20), rho = a job's JCT shared / its JCT isolated; the largest rho over jobs is the figure (1: no job did
    worse than on its team's quota alone). The isolated run replays the team's jobs under the same policy on
    `quota_cluster(cluster, floor(quota))`. A job larger than that has no isolated JCT, nor do the jobs of a team
    with less than one GPU of quota: the report counts them as excluded."""

    jct: Mapping[int, float]


def jain(xs: list[float]) -> float:
    """Jain's fairness index, (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n when one has everything. Here x is
    a team's GPU-seconds over what it was due: its quota for as long as it had jobs in the system, or its whole demand
    (isolated GPU-seconds) if that is less."""
    if not xs:
        return 1.0
    sq = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * sq) if sq > 0 else 1.0

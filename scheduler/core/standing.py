"""Each team's standing at one call of the tenancy frame, as the wrapped policy may read it (`ClusterView.tenancy`).

`TenancyFrame` (`scheduler.core.tenancy`) sets it on the view just before it asks the wrapped policy (for the eligible
jobs, and again for the jobs that may start only by a swap) and clears it after; without teams it is None. Heuristics
ignore it; the RL encoding (`policies.rl_encoding`) turns it into features. It lives apart from the frame so the view
can name its type without importing the frame.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from scheduler.core.model import DEFAULT_TEAM, JobSpec


@dataclass(frozen=True, slots=True)
class TeamStanding:
    """One team at this call."""

    name: str
    quota_gpus: float
    in_use_gpus: float  # GPU share its running jobs hold
    borrowed_gpus: float  # the part of that beyond its quota
    rank: float  # fair-share position among the teams with demand: 0 first (least usage over quota), 1 last
    has_demand: bool  # jobs pending or running
    ceiling_gpus: float = math.inf  # its quota plus its borrowing limit (inf: no limit)
    queued_within_gpus: float = 0.0  # what its queued jobs within its quota will take


def growth_room(team: TeamStanding, lendable: float, preemptible: bool) -> float:
    """GPUs a running job of `team` may grow by, or a job start beyond its submitted size (`scheduler.core.resizing`,
    rule 4): only GPUs that may be lent (no team's queued jobs within their quota are owed them), and within the team's
    quota, or its borrowing limit for a preemptible job, counting what its own queued jobs within the quota take."""
    limit = team.ceiling_gpus if preemptible else team.quota_gpus
    return max(0.0, min(lendable, limit - team.in_use_gpus - team.queued_within_gpus))


@dataclass(frozen=True, slots=True)
class TenancyStanding:
    """Every team's standing, and what the frame decided about the jobs it offers the policy at this call."""

    teams: Mapping[str, TeamStanding]  # every team, `default` included
    within_quota: frozenset[int]  # pending jobs that start within their team's quota; the other offered ones borrow
    swaps: frozenset[int]  # jobs offered only to start by preempting their own team's jobs (a swap call), else empty
    lendable_gpus: float  # free GPUs no job within its quota needs: what borrowers may take
    lent_gpus: float  # idle quota of teams under it that borrowers hold (beyond the GPUs in no team's quota)

    @property
    def swap_call(self) -> bool:
        return bool(self.swaps)

    def grown(self, team: str, gpus: float) -> TenancyStanding:
        """This standing once `team` took `gpus` more of the lendable GPUs (a grow, or a start beyond its size)."""
        t = self.teams[team]
        teams = {**self.teams, team: replace(t, in_use_gpus=t.in_use_gpus + gpus)}
        return replace(self, teams=teams, lendable_gpus=self.lendable_gpus - gpus)

    def of(self, spec: JobSpec) -> TeamStanding:
        """The standing of a job's team (a team the frame does not know is `default`, as the frame counts it)."""
        return self.teams.get(spec.team) or self.teams[DEFAULT_TEAM]

    @property
    def borrowed_gpus(self) -> float:
        return sum(t.borrowed_gpus for t in self.teams.values())

    @property
    def in_use_gpus(self) -> float:
        return sum(t.in_use_gpus for t in self.teams.values())

    @property
    def teams_with_demand(self) -> int:
        return sum(1 for t in self.teams.values() if t.has_demand)

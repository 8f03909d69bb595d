"""Teams sharing one cluster: quotas, borrowing, reclaim and fair share (the tenancy frame).

The semantics follow Kueue's cohorts (nominal quota, borrowing limit, reclaim) and Slurm's fair-share:

- A team may always run up to its **quota** (GPUs, possibly fractional). Beyond it, it **borrows** idle GPUs, up to
  its **borrowing limit** (None: no limit but the cluster).
- GPUs are lent only when no team under its quota is waiting for them: the free capacity that pending jobs within
  their teams' quotas need is **reserved** for them, and borrowers get the rest.
- When a team under its quota has a pending job that fits within its quota but not in the free GPUs, because
  borrowers hold them, the frame **reclaims**: it preempts borrowed jobs (checkpointed, as any preemption) of the team
  furthest over its fair share, youngest first, the fewest that make room, never more GPUs than the job lacks where
  borrowed jobs freeing fewer would make room (the rule every preemption follows, `scheduler.core.victims`), and
  never more of a team than it borrows.
- Across teams, the order is **fair share**: each team's usage (GPU-seconds, decayed with a half-life, as Slurm's
  `PriorityDecayHalfLife`) over its quota; the team with the lowest ratio comes first, both for the queue the policy
  sees and for the idle capacity borrowers may take. Within a team, by priority, then arrival.

`TenancyFrame` wraps any policy, heuristic or learned, and is itself a policy, so the simulator, the RL environment
and the live controller apply it as they apply any other: the frame decides which pending jobs are eligible and
reclaims; the wrapped policy orders and places within the eligible set. A preemption the wrapped policy proposes is
kept only if it stays inside the frame (the victim is of the placed job's team, or borrows while the placed job's team
is within its quota); otherwise that job is held back for this instant and the policy is asked again.

A job beyond its team's quota that the idle GPUs cannot hold may still start if the wrapped policy makes room for it
by preempting jobs of **its own team** (a **swap**: e.g. Tiresias' least-attained-service preemption, within the
team); whatever it takes beyond what it frees must be GPUs that may be lent. The policy is offered these jobs once it
starts nothing else at an instant (the runner asks again after every change); a start that preempts another team's
job, or grows its team beyond what may be lent or its borrowing limit, is dropped. Without swaps a team at its quota
could only wait for its own jobs to end, and a preemptive policy lost nearly all its preemptions to the frame.

The package, one idea a module: `teams` (what admins declare), `usage` (fair share, the ledger and its fairness
figures), `quota` (the cluster a quota is) and `frame` (the frame itself). Import from the package.
"""

from __future__ import annotations

from scheduler.core.tenancy.frame import MAX_ASKS, Frame, Standing, TenancyFrame
from scheduler.core.tenancy.quota import quota_cluster
from scheduler.core.tenancy.teams import DEFAULT_HALF_LIFE_S, EPS, Team, TeamError, Teams, make_team
from scheduler.core.tenancy.usage import FairShare, Isolated, TeamLedger, jain

__all__ = ["DEFAULT_HALF_LIFE_S", "EPS", "MAX_ASKS", "FairShare", "Frame", "Isolated", "Standing", "Team", "TeamError",
           "TeamLedger", "Teams", "TenancyFrame", "jain", "make_team", "quota_cluster"]

"""Teams as stored: their quotas, members and usage; moving a user between teams; creating and deleting one."""

from __future__ import annotations

import time

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from scheduler.core.model import DEFAULT_TEAM
from scheduler.live.store.models import Gpu, Job, JobState, Team, User
from scheduler.live.store.names import check_user_name


class UnknownTeam(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"team {name!r} does not exist")
        self.name = name


class TeamConflict(RuntimeError):
    """A change the current state forbids (a team with active jobs deleted, a user moved while their jobs run)."""


ACTIVE = (JobState.PENDING, JobState.RUNNING)


def team_by_name(s: Session, name: str) -> Team | None:
    return s.scalars(select(Team).where(Team.name == name)).one_or_none()


def list_teams(s: Session) -> list[Team]:
    return list(s.scalars(select(Team).order_by(Team.name)))


def team_quotas(s: Session) -> tuple[tuple[str, float, float | None], ...]:
    """(name, quota, borrowing limit) of every team, by name: what the controller re-reads every pass (plain rows, not
    ORM objects: it costs a fraction as much)."""
    return tuple((name, quota, borrow) for name, quota, borrow in s.execute(_TEAM_QUOTAS))


_TEAM_QUOTAS = select(Team.name, Team.quota_gpus, Team.borrow_limit_gpus).order_by(Team.name)


def cluster_gpus(s: Session) -> int:
    """GPUs the controller registered (0 before its first start)."""
    return s.scalar(select(func.count()).select_from(Gpu)) or 0


def active_jobs_of_user(s: Session, user_id: int) -> int:
    return s.scalar(select(func.count()).select_from(Job).where(Job.user_id == user_id, Job.state.in_(ACTIVE))) or 0


def active_jobs_of_team(s: Session, name: str) -> int:
    return s.scalar(select(func.count()).select_from(Job).where(Job.team == name, Job.state.in_(ACTIVE))) or 0


def move_user(s: Session, user: User, team: str) -> User:
    """Put `user` in `team`. Refused (TeamConflict) while they have jobs pending or running: those run under the
    quota they were submitted to, and moving the user alone would split their work across two teams."""
    if team_by_name(s, team) is None:
        raise UnknownTeam(team)
    # The user's row locked before counting: a submission reads the team under a share lock (submitter_team), so it
    # cannot slip a job under the old team between this count and the move (PostgreSQL; SQLite has one writer).
    s.execute(select(User.id).where(User.id == user.id).with_for_update())
    active = active_jobs_of_user(s, user.id)
    if active:
        raise TeamConflict(f"user {user.name!r} has {active} job(s) pending or running in team {user.team!r}; "
                           "move them when those have finished or been cancelled")
    user.team = team
    return user


def submitter_team(s: Session, user_id: int) -> str:
    """The team a job submitted now by `user_id` runs under, read under a share lock on the user's row: a move or a
    team's deletion (which update that row) then waits for the submission to commit, and sees its job."""
    team = s.scalar(_SUBMITTER_TEAM, {"user_id": user_id})
    return team or DEFAULT_TEAM


# Built once: it runs on every submission, and building the statement cost more than running it.
_SUBMITTER_TEAM = select(User.team).where(User.id == bindparam("user_id")).with_for_update(read=True)


def lock_teams(s: Session) -> None:
    """Serialise the writers of quotas (PostgreSQL; SQLite has one writer anyway) by locking the `default` team's
    row, which always exists: two admins raising quotas at once cannot both pass the check against the cluster's size.
    Read the quotas in a later statement, so it sees what the writer before committed."""
    s.execute(select(Team.id).where(Team.name == DEFAULT_TEAM).with_for_update())


def quota_total(s: Session, *, without: str | None = None) -> float:
    """The teams' quotas added up, leaving out the team `without` (the one being changed)."""
    query = select(func.coalesce(func.sum(Team.quota_gpus), 0.0))
    if without is not None:
        query = query.where(Team.name != without)
    return float(s.scalar(query) or 0.0)


def create_team(s: Session, name: str, quota_gpus: float, borrow_limit_gpus: float | None) -> Team:
    """A new team (TeamConflict if the name is taken, even by a concurrent request). The caller validates the
    numbers and their sum against the cluster."""
    if team_by_name(s, name) is not None:
        raise TeamConflict(f"team {name!r} already exists")
    now = time.time()
    team = Team(name=check_user_name(name), quota_gpus=quota_gpus, borrow_limit_gpus=borrow_limit_gpus,
                created_at=now, updated_at=now)
    try:
        with s.begin_nested():
            s.add(team)
            s.flush()
    except IntegrityError:
        raise TeamConflict(f"team {name!r} already exists") from None
    return team


def delete_team(s: Session, team: Team) -> list[str]:
    """Remove `team`; its members move to `default` (their names are returned). TeamConflict for `default`, and while
    the team has jobs pending or running (they run under its quota)."""
    if team.name == DEFAULT_TEAM:
        raise TeamConflict(f"the {DEFAULT_TEAM!r} team cannot be deleted: users without a team belong to it")
    moved = list(s.scalars(select(User.name).where(User.team == team.name).order_by(User.name)))
    # Members first, then the count: the update locks their rows, so a submission in flight (which reads its team
    # under a share lock) either committed before, and is counted, or waits and lands in `default`.
    s.execute(update(User).where(User.team == team.name).values(team=DEFAULT_TEAM))
    active = active_jobs_of_team(s, team.name)
    if active:
        raise TeamConflict(f"team {team.name!r} has {active} job(s) pending or running; delete it when they have "
                           "finished or been cancelled")
    s.delete(team)
    s.flush()
    return moved


def team_usage(s: Session) -> dict[str, dict[str, float]]:
    """Each team's GPUs now: `in_use_gpus` (its running jobs' GPUs, shares counted as fractions), `borrowed_gpus`
    (beyond its quota), `lent_gpus` (its idle quota that borrowers hold), `pending_jobs` and `running_jobs`.

    Borrowers first take GPUs in no team's quota; what they borrow beyond those is lent by the teams under their
    quota, in proportion to each one's idle quota (GPUs are not owned one by one, so no finer attribution exists)."""
    teams = list_teams(s)
    out: dict[str, dict[str, float]] = {
        t.name: {"in_use_gpus": 0.0, "borrowed_gpus": 0.0, "lent_gpus": 0.0, "pending_jobs": 0.0,
                 "running_jobs": 0.0} for t in teams}
    rows = s.execute(select(Job.team, Job.state, func.count(), func.sum(Job.num_gpus))
                     .where(Job.state.in_(ACTIVE)).group_by(Job.team, Job.state))
    for team, state, n, gpus in rows:
        u = out.get(team)
        if u is None:  # a job of a team deleted since (the API refuses that while it has active jobs)
            continue
        if state == JobState.RUNNING:
            u["running_jobs"] += n
            u["in_use_gpus"] += float(gpus or 0.0)
        else:
            u["pending_jobs"] += n
    idle: dict[str, float] = {}
    for t in teams:
        u = out[t.name]
        u["borrowed_gpus"] = max(0.0, u["in_use_gpus"] - t.quota_gpus)
        idle[t.name] = max(0.0, t.quota_gpus - u["in_use_gpus"])
    unassigned = max(0.0, cluster_gpus(s) - sum(t.quota_gpus for t in teams))
    lent = max(0.0, sum(u["borrowed_gpus"] for u in out.values()) - unassigned)
    total_idle = sum(idle.values())
    if lent > 0 and total_idle > 0:
        for name, free in idle.items():
            out[name]["lent_gpus"] = min(free, lent * free / total_idle)
    return out

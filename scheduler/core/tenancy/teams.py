"""Teams, their quotas and borrowing limits, as a cluster's admins declare them (YAML, the API) and the frame
reads them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.core.errors import SpecError
from scheduler.core.model import (
    DEFAULT_TEAM,
    JobSpec,
)

DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0  # Slurm's PriorityDecayHalfLife default
EPS = 1e-9  # GPUs: below this, a quota or a usage counts as none


class TeamError(SpecError):
    """A team definition that cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    quota_gpus: float  # guaranteed
    borrow_limit_gpus: float | None = None  # how far beyond its quota it may borrow idle GPUs (None: no limit)

    @property
    def ceiling(self) -> float:
        return math.inf if self.borrow_limit_gpus is None else self.quota_gpus + self.borrow_limit_gpus


@dataclass(frozen=True)
class Teams:
    """The teams of one cluster, and how fast past usage is forgotten."""

    teams: Mapping[str, Team]
    half_life_s: float = DEFAULT_HALF_LIFE_S

    @classmethod
    def parse(cls, data: Any, cluster_gpus: float | None = None, where: str = "teams") -> Teams:
        """From `{"half_life_s": S, "teams": [{"name", "quota_gpus", "borrow_limit_gpus"}, ...]}` (or the list
        alone). Raises TeamError naming the field: negative quotas, quotas that add up to more than the cluster,
        duplicate names."""
        if isinstance(data, list):
            data = {"teams": data}
        if not isinstance(data, dict):
            raise TeamError(f"{where}: expected a mapping with a 'teams' list, got {type(data).__name__}")
        unknown = set(data) - {"teams", "half_life_s"}
        if unknown:
            raise TeamError(f"{where}: unknown key(s) {sorted(unknown)}; expected 'teams' and 'half_life_s'")
        half_life = _number(data.get("half_life_s", DEFAULT_HALF_LIFE_S), f"{where}.half_life_s")
        if not half_life > 0:
            raise TeamError(f"{where}.half_life_s: must be positive, got {half_life:g}")
        rows = data.get("teams")
        if not isinstance(rows, list) or not rows:
            raise TeamError(f"{where}.teams: expected a non-empty list of teams")
        teams: dict[str, Team] = {}
        for i, row in enumerate(rows):
            at = f"{where}.teams[{i}]"
            if not isinstance(row, dict):
                raise TeamError(f"{at}: expected a mapping with name, quota_gpus and borrow_limit_gpus")
            extra = set(row) - {"name", "quota_gpus", "borrow_limit_gpus"}
            if extra:
                raise TeamError(f"{at}: unknown key(s) {sorted(extra)}")
            name = row.get("name")
            if not isinstance(name, str) or not name.strip():
                raise TeamError(f"{at}.name: a non-empty string is required")
            if name in teams:
                raise TeamError(f"{at}.name: team {name!r} is defined twice")
            teams[name] = make_team(name, row.get("quota_gpus"), row.get("borrow_limit_gpus"), at)
        total = sum(t.quota_gpus for t in teams.values())
        if cluster_gpus is not None and total > cluster_gpus + EPS:
            raise TeamError(f"{where}: quota_gpus add up to {total:g}, more than the cluster's {cluster_gpus:g} GPUs")
        return cls(teams, half_life)

    @classmethod
    def load(cls, path: str | Path, cluster_gpus: float | None = None) -> Teams:
        import yaml

        p = Path(path)
        try:
            data = yaml.safe_load(p.read_text())
        except OSError as exc:
            raise TeamError(f"{p}: cannot read: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise TeamError(f"{p}: not valid YAML: {exc}") from None
        return cls.parse(data, cluster_gpus, where=str(p))

    def check_jobs(self, specs: Iterable[JobSpec], where: str = "trace") -> None:
        """Every job names a known team, or none (`default`): a typo would otherwise make its jobs borrowers."""
        unknown = sorted({s.team for s in specs} - set(self.teams) - {DEFAULT_TEAM})
        if unknown:
            raise TeamError(f"{where}: job(s) of unknown team(s) {unknown}; the teams are {sorted(self.teams)}")


def make_team(name: str, quota: Any, borrow: Any, where: str) -> Team:
    q = _number(quota, f"{where}.quota_gpus")
    if q < 0:
        raise TeamError(f"{where}.quota_gpus: must be >= 0, got {q:g}")
    b = None if borrow is None else _number(borrow, f"{where}.borrow_limit_gpus")
    if b is not None and b < 0:
        raise TeamError(f"{where}.borrow_limit_gpus: must be >= 0 (or null: no limit), got {b:g}")
    return Team(name, q, b)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TeamError(f"{where}: a finite number is required, got {value!r}")
    return float(value)

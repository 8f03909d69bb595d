"""The guard's verdicts (`policies.guarded`, `scheduler.core.guard`) as the live service reports them: on the active
policy's row (`PolicyVersion.info["guard"]`: what acts now, the latest verdict as data and in words, the switches
so far), which `GET /policies` and the dashboard's policies page show, in the log, and in the metrics (a counter of
switches here; the acting fallback as a gauge read from the store at scrape time, `web.metrics`)."""

from __future__ import annotations

import logging
import math
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.core.guard import GuardRule
from scheduler.live import metrics
from scheduler.live.store.models import PolicyVersion

log = logging.getLogger("scheduler.live.controller")

MAX_SWITCHES = 50  # switches kept on the row (the latest)


class GuardWatch:
    """What the controller has reported of its active policy's guard; a policy without one reports nothing."""

    def __init__(self) -> None:
        self.seen = 0  # verdicts reported

    def report(self, s: Session, policy: Any, active: str) -> None:
        """Write the verdicts `policy` (the active policy `active`, not framed) reached since the last report."""
        rule = getattr(policy, "rule", None)
        if not isinstance(rule, GuardRule) or rule.windows <= self.seen:
            return
        fresh = min(rule.windows - self.seen, len(rule.verdicts))  # (the rule keeps only its latest verdicts)
        new, self.seen = list(rule.verdicts)[-fresh:], rule.windows
        learned = getattr(policy, "learned_name", active)
        row = s.scalars(select(PolicyVersion).where(PolicyVersion.name == active)).one_or_none()
        if row is None:
            return
        guard = dict((row.info or {}).get("guard") or {})
        switches = list(guard.get("switches") or [])
        for v in new:
            if v.switched:
                to = v.fallback or learned
                switches.append({"at": v.at, "to": to, "text": v.text(learned)})
                metrics.GUARD_SWITCHES.labels(to).inc()
                log.warning("%s", v.text(learned))
        last = new[-1]
        guard.update(learned=learned, acting=last.fallback or learned, fallback=last.fallback, best=last.best,
                     ratio=_finite(last.ratio), low=_finite(last.low), high=_finite(last.high), windows=last.windows,
                     at=last.at,
                     verdicts=self.seen, text=last.text(learned), switches=switches[-MAX_SWITCHES:])
        row.info = {**(row.info or {}), "guard": guard}


def _finite(x: float) -> float | None:
    """JSON (PostgreSQL's above all) has no infinities: a bound one window cannot give is null."""
    return x if math.isfinite(x) else None

"""The live side of jobs that name no model (`scheduler.core.generic`): at submission, the measured runs of the jobs
alike that its generic profile is refined from; for the controller, the profile a stored job is scheduled with.

Jobs alike are the submitter's earlier jobs of the same name (how people resubmit the same training script), the
latest `ALIKE_JOBS` of them that NVML measured. The search walks the (user, name) index and reads at most
`SCANNED_JOBS` of the user's latest jobs of that name, so a submission's cost stays bounded whatever the history.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from scheduler.core.generic import GENERIC_MODEL, MeasuredUsage, ProfileBook, merged, refined_profile
from scheduler.core.workloads import ModelProfile
from scheduler.live.store.models import Job

ALIKE_JOBS = 20
SCANNED_JOBS = 2000


# Built once: it runs on every submission that names no model (a hot path, like the submission's own statements).
_LATEST = (select(Job.id, Job.measured_usage)
           .where(Job.user_id == bindparam("user_id"), Job.name == bindparam("name"))
           .order_by(Job.id.desc()).limit(SCANNED_JOBS).subquery())
_ALIKE = (select(_LATEST.c.id, _LATEST.c.measured_usage).where(_LATEST.c.measured_usage.is_not(None))
          .order_by(_LATEST.c.id.desc()).limit(ALIKE_JOBS))


def alike_usage(s: Session, user_id: int, name: str) -> dict[str, Any] | None:
    """What the runs of the user's latest measured jobs named `name` used, as stored in a new job's `profile_usage`
    ({usage, jobs, whose}), or None if none was measured."""
    found = s.execute(_ALIKE, {"user_id": user_id, "name": name}).all()
    usage = merged(MeasuredUsage.from_dict(u) for _, u in found)
    if usage is None:
        return None
    ids = [int(i) for i, _ in found]
    return {"usage": usage.as_dict(), "jobs": ids,
            "whose": f"{len(ids)} earlier job{'s' if len(ids) > 1 else ''} of the same user and name"}


def job_profile(model: str, measured: Mapping[str, Any] | None, alike: Mapping[str, Any] | None) -> ModelProfile:
    """The profile a job that named no model is scheduled with: the generic one refined from its own measured runs
    and those of the jobs alike, together."""
    assert model == GENERIC_MODEL
    own = MeasuredUsage.from_dict(measured)
    theirs = MeasuredUsage.from_dict((alike or {}).get("usage"))
    whose = " and ".join(w for w, u in (("its own runs", own), (str((alike or {}).get("whose", "")), theirs))
                         if u is not None)
    return refined_profile(merged([own, theirs]), whose or "jobs alike")


def model_name(row: Job, profiles: Mapping[str, ModelProfile]) -> str:
    """The name of the profile `row` is scheduled with: its model's, or for a job that named none and was measured
    (itself or jobs alike), its refined profile's, added to the controller's book of profiles."""
    if row.model != GENERIC_MODEL or not isinstance(profiles, ProfileBook):
        return row.model
    if row.measured_usage is None and row.profile_usage is None:
        return row.model
    return profiles.add(job_profile(row.model, row.measured_usage, row.profile_usage))

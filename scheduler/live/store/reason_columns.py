"""A reason as the store keeps it: its words, code and parameters in three columns, always written together
(`scheduler.core.reasons`). Apart from `queries` so that the life cycle, which `queries` calls, writes them too."""

from __future__ import annotations

from typing import Any

from scheduler.core.reasons import Reason
from scheduler.live.store.models import Job


def pending_columns(why: Reason | None) -> dict[str, Any]:
    """A job's pending reason as the store keeps it, words and data together (for an UPDATE's values); None: no
    reason."""
    if why is None:
        return {"pending_reason": None, "pending_code": None, "pending_params": None}
    return {"pending_reason": why.text, "pending_code": why.code.value, "pending_params": dict(why.params)}


def end_columns(why: Reason | None) -> dict[str, Any]:
    """Why a job ended as the store keeps it (`error`, `end_code`, `end_params`); None: it ended for no reason to
    give (it succeeded)."""
    if why is None:
        return {"error": None, "end_code": None, "end_params": None}
    return {"error": why.text, "end_code": why.code.value, "end_params": dict(why.params)}


def set_pending(job: Job, why: Reason | None) -> None:
    """Write `why` as `job`'s pending reason: its words, code and parameters together."""
    for column, value in pending_columns(why).items():
        setattr(job, column, value)


def set_end(job: Job, why: Reason | None) -> None:
    """Write `why` as the reason `job` ended: its words, code and parameters together."""
    for column, value in end_columns(why).items():
        setattr(job, column, value)

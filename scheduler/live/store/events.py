"""A job's events: the record of what happened to it, as `corral show` and the dashboard's timeline read it.

Apart from `queries` so that the life cycle (`scheduler.live.lifecycle`), which `queries` calls, can write them."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session

from scheduler.live.store.models import JobEvent


def add_event(s: Session, job_id: int, kind: str, message: str = "", *, at: float | None = None,
              **data: Any) -> None:
    s.add(JobEvent(job_id=job_id, at=time.time() if at is None else at, kind=kind, message=message, data=data))

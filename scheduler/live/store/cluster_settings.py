"""Store-wide settings: the fabric preset, the active policy, whether the store holds legacy job files."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from scheduler.live.store.models import ClusterFabric, PolicyVersion, StoreIdentity

FABRIC_ROW = 1  # cluster_fabric's one row (migration 0014 inserts it)


def fabric(s: Session) -> str | None:
    """The fabric preset the live cluster model sits on (`corral serve --fabric`), None: none."""
    return s.scalars(select(ClusterFabric.name).where(ClusterFabric.id == FABRIC_ROW)).first()


def set_fabric(s: Session, name: str | None) -> None:
    """Record the fabric preset the live cluster model sits on (None: none); the caller validates the name first."""
    s.execute(update(ClusterFabric).where(ClusterFabric.id == FABRIC_ROW).values(name=name, set_at=time.time()))


_ACTIVE_POLICY = select(PolicyVersion.name).where(PolicyVersion.active.is_(True))  # built once: read every pass


def active_policy(s: Session) -> str | None:
    return s.scalars(_ACTIVE_POLICY).first()


def active_policy_info(s: Session) -> dict[str, Any]:
    """The active policy's `info` (a trained agent's metadata, a guard's verdicts: `control.guard_watch`); {}: none."""
    return s.scalars(select(PolicyVersion.info).where(PolicyVersion.active.is_(True))).first() or {}


def activate_policy(s: Session, name: str, *, by: str) -> PolicyVersion:
    """Make `name` the one active policy (created if new). The caller validates the name first."""
    now = time.time()
    s.execute(update(PolicyVersion).where(PolicyVersion.active.is_(True), PolicyVersion.name != name)
              .values(active=False))
    row = s.scalars(select(PolicyVersion).where(PolicyVersion.name == name)).one_or_none()
    if row is None:
        row = PolicyVersion(name=name, created_at=now)
        s.add(row)
    row.active, row.activated_at, row.activated_by = True, now, by
    s.flush()
    return row


def has_legacy_files(s: Session) -> bool:
    """Whether this store held jobs before it had an id (migration 0019): their files were then kept directly under
    CORRAL_HOME, and it may claim them (`job_files.claim_legacy_files`)."""
    row = s.get(StoreIdentity, 1)
    return bool(row is not None and row.legacy_files)

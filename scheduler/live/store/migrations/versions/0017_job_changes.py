"""job changes: when the API last changed a live job after its submission (`PATCH /jobs/ID`, its time limit; a
requeue request), indexed for the controller's read of the jobs changed since its last pass; who asked for a requeue

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28 13:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: no job stored before was changed after its submission.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('changed_at', sa.Float(precision=53), nullable=True))
        batch_op.add_column(sa.Column('requeue_by', sa.String(length=64), nullable=True))
        batch_op.create_index('ix_jobs_changed_at', ['changed_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_changed_at')
        batch_op.drop_column('requeue_by')
        batch_op.drop_column('changed_at')

"""jobs by submission time: the index the start estimates read the last hour's submissions through
(`scheduler.live.snapshot`, `scheduler.core.estimates.expected_arrivals`)

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-30 01:40:00.000000
"""

from __future__ import annotations

from alembic import op

revision = '0029'
down_revision = '0028'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index('ix_jobs_submitted_at', ['submitted_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_submitted_at')

"""jobs by user and name: the index a submission that names no model reads its jobs alike through
(`scheduler.live.generic_profiles`)

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-29 21:30:00.000000
"""

from __future__ import annotations

from alembic import op

revision = '0028'
down_revision = '0027'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index('ix_jobs_user_name', ['user_id', 'name', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_user_name')

"""duration estimates: what a command job's duration_s was estimated from when the user gave none
(`scheduler.live.durations`)

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29 14:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0023'
down_revision = '0022'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: every job stored before either gave its duration or took the default without saying so.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('duration_estimate', sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('duration_estimate')

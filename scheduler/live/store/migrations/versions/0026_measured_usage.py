"""measured usage: what NVML measured of a job's runs, and of the jobs alike a job without a model is profiled from
(`scheduler.core.generic`)

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29 18:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0026'
down_revision = '0025'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: nothing was measured of the jobs stored before.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('measured_usage', sa.JSON(none_as_null=True), nullable=True))
        batch_op.add_column(sa.Column('profile_usage', sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('profile_usage')
        batch_op.drop_column('measured_usage')

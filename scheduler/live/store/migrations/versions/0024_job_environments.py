"""job environments: a command job's pip packages, node virtual environment, container image and uploaded working
directory (`scheduler.live.environments`)

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29 17:45:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: every job stored before ran in its node's own environment.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('environment', sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('environment')

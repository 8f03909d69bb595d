"""elastic jobs: the sizes a job may run at (min_gpus to max_gpus, or only the sizes listed) and the pause a resize
costs it (`scheduler.core.elastic`); num_gpus stays the size its duration is measured at

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29 11:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0022'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: every job stored before runs at its one size, num_gpus.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('min_gpus', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('max_gpus', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('sizes', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('resize_pause_s', sa.Float(precision=53), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('resize_pause_s')
        batch_op.drop_column('sizes')
        batch_op.drop_column('max_gpus')
        batch_op.drop_column('min_gpus')

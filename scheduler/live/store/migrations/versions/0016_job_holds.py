"""job holds: a pending job its owner or an admin holds does not start until released (`corral hold`, `corral
release`): who holds it and since when, with an index for the controller's read of the held jobs at every pass

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 12:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: no job stored before is held.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('held_at', sa.Float(precision=53), nullable=True))
        batch_op.add_column(sa.Column('held_by', sa.String(length=64), nullable=True))
        batch_op.create_index('ix_jobs_state_held', ['state', 'held_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_state_held')
        batch_op.drop_column('held_by')
        batch_op.drop_column('held_at')

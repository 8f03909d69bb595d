"""node drains: an admin's drain of a node (`corral node drain`): when, by whom, why, and whether its runs leave now

Revision ID: 0008
Revises: 0007
Create Date: 2027-01-20 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # All nullable or defaulted: every node registered before is not drained.
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('drained_at', sa.Float(precision=53), nullable=True))
        batch_op.add_column(sa.Column('drained_by', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('drain_reason', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('drain_evict', sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.drop_column('drain_evict')
        batch_op.drop_column('drain_reason')
        batch_op.drop_column('drained_by')
        batch_op.drop_column('drained_at')

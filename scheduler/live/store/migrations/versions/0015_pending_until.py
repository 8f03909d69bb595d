"""pending until: the latest time the policy keeps a pending job waiting for its pending reason (a `Wait`'s until:
topology holding a job for compact room), written and cleared with the reason; the start estimate reads it

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 18:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: every job stored before waits for no bounded hold, until the controller next gives its reason.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pending_until', sa.Float(precision=53), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('pending_until')

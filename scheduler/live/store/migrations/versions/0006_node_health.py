"""node health: the GPU health report a node's agent pushes through the API, and when it arrived

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-15 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Both nullable: nodes registered before (and nodes whose agent does not report) have no report.
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('health', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('health_at', sa.Float(precision=53), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.drop_column('health_at')
        batch_op.drop_column('health')

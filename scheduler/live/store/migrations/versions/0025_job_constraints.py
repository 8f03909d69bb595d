"""job constraints and node labels: where a job may run (GPU type, node labels, node list, exclusion) and the labels
its operator gave each node (`scheduler.core.constraints`)

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29 18:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: every job stored before may run anywhere, and every node registered before carries no labels of its
    # operator's (its hardware's are derived, never stored).
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('constraints', sa.JSON(none_as_null=True), nullable=True))
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('labels', sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.drop_column('labels')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('constraints')

"""priorities and time limits: admin-defined priority classes; a job's preemptible flag, the class it named and its
time limit

Revision ID: 0010
Revises: 0009
Create Date: 2027-02-15 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('priority_classes',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('value', sa.Integer(), nullable=False),
    sa.Column('preemptible', sa.Boolean(), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('created_at', sa.Float(precision=53), nullable=False),
    sa.Column('created_by', sa.String(length=64), nullable=True),
    sa.PrimaryKeyConstraint('name')
    )
    # Defaulted or nullable: every job stored before is preemptible, names no class and has no time limit, as before.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('preemptible', sa.Boolean(), nullable=False, server_default=sa.true()))
        batch_op.add_column(sa.Column('priority_class', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('time_limit_s', sa.Float(precision=53), nullable=True))
    with op.batch_alter_table('limit_defaults', schema=None) as batch_op:
        batch_op.add_column(sa.Column('default_time_limit_s', sa.Float(precision=53), nullable=True))
        batch_op.add_column(sa.Column('max_time_limit_s', sa.Float(precision=53), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('limit_defaults', schema=None) as batch_op:
        batch_op.drop_column('max_time_limit_s')
        batch_op.drop_column('default_time_limit_s')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('time_limit_s')
        batch_op.drop_column('priority_class')
        batch_op.drop_column('preemptible')
    op.drop_table('priority_classes')

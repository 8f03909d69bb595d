"""fair use: cluster-wide defaults and per-user overrides of the limits on pending jobs, submissions and what-ifs

Revision ID: 0007
Revises: 0006
Create Date: 2027-01-12 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # No rows: every limit is then the built-in default (scheduler.live.store.queries.BUILTIN_LIMITS) until an admin
    # sets one. Null columns mean the same: "not set here".
    op.create_table('limit_defaults',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('max_pending', sa.Integer(), nullable=True),
    sa.Column('submit_rate', sa.Float(precision=53), nullable=True),
    sa.Column('submit_burst', sa.Integer(), nullable=True),
    sa.Column('whatif_per_min', sa.Integer(), nullable=True),
    sa.Column('updated_at', sa.Float(precision=53), nullable=False),
    sa.Column('updated_by', sa.String(length=64), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('user_limits',
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('max_pending', sa.Integer(), nullable=True),
    sa.Column('submit_rate', sa.Float(precision=53), nullable=True),
    sa.Column('submit_burst', sa.Integer(), nullable=True),
    sa.Column('whatif_per_min', sa.Integer(), nullable=True),
    sa.Column('updated_at', sa.Float(precision=53), nullable=False),
    sa.Column('updated_by', sa.String(length=64), nullable=True),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('user_id')
    )


def downgrade() -> None:
    op.drop_table('user_limits')
    op.drop_table('limit_defaults')

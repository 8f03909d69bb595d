"""priority ceilings: per team and per user, the highest priority a job may give, whether it may be non-preemptible
and which priority classes it may name (scheduler.live.priority_ceilings)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28 18:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None

TABLES = ('teams', 'user_limits')


def upgrade() -> None:
    # Nullable, and null everywhere: "not set here", so every existing user gets the built-in ceiling (priority 0,
    # preemptible only, no class beyond it) until an admin grants more. Jobs already stored keep their figures.
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('max_priority', sa.Integer(), nullable=True))
            batch_op.add_column(sa.Column('allow_nonpreemptible', sa.Boolean(), nullable=True))
            batch_op.add_column(sa.Column('priority_classes', sa.JSON(), nullable=True))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN, not a batch: SQLite (3.35 and later) drops these in place, where a batch would copy
    # `teams` and drop the original, which its members' foreign keys refuse once users exist.
    for table in reversed(TABLES):
        for column in ('priority_classes', 'allow_nonpreemptible', 'max_priority'):
            op.drop_column(table, column)

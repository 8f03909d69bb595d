"""request rate: a per-user token bucket of API requests of any kind, as the cluster's default and a user's override

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28 18:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Null: not set here, as for the other limits (0007): the built-in default applies until an admin sets one.
    for table in ('limit_defaults', 'user_limits'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('request_rate', sa.Float(precision=53), nullable=True))
            batch_op.add_column(sa.Column('request_burst', sa.Integer(), nullable=True))


def downgrade() -> None:
    for table in ('user_limits', 'limit_defaults'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('request_burst')
            batch_op.drop_column('request_rate')

"""requested gpus: the size an elastic job was submitted at, where admission stored it at a smaller one

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-30 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0030'
down_revision = '0029'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: a job stored before was stored at its size as far as the store knows (a brought-down one's
    # `submitted` or `sized_down` event still says so).
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('requested_gpus', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('requested_gpus')

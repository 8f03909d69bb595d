"""reasons as data: a job's pending reason and the reason it ended, each as a code and its parameters beside the
words (`scheduler.core.reasons`), so readers decide on the code, never on the words

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28 21:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: a reason stored before has its words only (the controller writes every pending reason anew as it
    # looks at the queue; an ended job's stays words).
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pending_code', sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column('pending_params', sa.JSON(none_as_null=True), nullable=True))
        batch_op.add_column(sa.Column('end_code', sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column('end_params', sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('end_params')
        batch_op.drop_column('end_code')
        batch_op.drop_column('pending_params')
        batch_op.drop_column('pending_code')

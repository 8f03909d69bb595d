"""job retries: a run that exits non-zero is run again up to max_retries times (on the exit codes retry_on names, or on
any when it is null), each after a backoff that doubles; retries counts those used, not_before holds the job back

Revision ID: 0009
Revises: 0008
Create Date: 2027-02-01 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Defaulted or nullable: every job stored before retries nothing, as it did.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('max_retries', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('retry_on', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('retry_backoff_s', sa.Float(precision=53), nullable=False, server_default='30'))
        batch_op.add_column(sa.Column('retries', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('not_before', sa.Float(precision=53), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('not_before')
        batch_op.drop_column('retries')
        batch_op.drop_column('retry_backoff_s')
        batch_op.drop_column('retry_on')
        batch_op.drop_column('max_retries')

"""controller lease: which `corral serve` replica leads, with an epoch; each allocation records the epoch it was
placed under

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    lease = op.create_table('controller_lease',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('holder', sa.String(length=200), nullable=True),
    sa.Column('epoch', sa.Integer(), nullable=False),
    sa.Column('acquired_at', sa.Float(precision=53), nullable=True),
    sa.Column('renewed_at', sa.Float(precision=53), nullable=True),
    sa.Column('expires_at', sa.Float(precision=53), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    # The one row every replica competes for, there from the start: acquiring is then a single conditional UPDATE
    # (never an INSERT two replicas could race on). Epoch 0 and expired since 1970: the first replica takes epoch 1.
    op.bulk_insert(lease, [{'id': 1, 'holder': None, 'epoch': 0, 'acquired_at': None, 'renewed_at': None,
                            'expires_at': 0.0}])
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('epoch', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.drop_column('epoch')
    op.drop_table('controller_lease')

"""cluster fabric: the fabric preset the live cluster model sits on (`corral serve --fabric`), one row

Revision ID: 0014
Revises: 0013
Create Date: 2027-03-20 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    fabric = op.create_table('cluster_fabric',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=True),
    sa.Column('set_at', sa.Float(precision=53), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    # The one row, there from the start, on no fabric (as every store before): `corral serve` only updates it.
    op.execute(sa.insert(fabric).values(id=1, name=None, set_at=0.0))


def downgrade() -> None:
    op.drop_table('cluster_fabric')

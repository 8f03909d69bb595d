"""node racks: the rack each node names (`corral node start --rack`), for the cluster model's racks and the map

Revision ID: 0013
Revises: 0012
Create Date: 2027-03-10 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: every node registered before names no rack, and fills racks in order as it did.
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('rack', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.drop_column('rack')

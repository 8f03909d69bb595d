"""node venvs: the virtual environments each node's operator declared (`CORRAL_VENVS`), which a submission's
`environment.venv` is checked against

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29 21:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0027'
down_revision = '0026'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: the nodes recorded before declared none that the store knows of; the controller writes what each
    # advertises at its next registration.
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('venvs', sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.drop_column('venvs')

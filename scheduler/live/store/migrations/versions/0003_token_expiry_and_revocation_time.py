"""token expiry and revocation time

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 06:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('revoked_at', sa.Float(precision=53), nullable=True))
        batch_op.add_column(sa.Column('expires_at', sa.Float(precision=53), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.drop_column('expires_at')
        batch_op.drop_column('revoked_at')

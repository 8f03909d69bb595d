"""store id: the one row that names this store, a random UUID made here (at the store's creation, or at the upgrade
of a store from before ids), under which its jobs' logs and checkpoints live (`scheduler.live.job_files`)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28 18:30:00.000000
"""

from __future__ import annotations

import time
import uuid

import sqlalchemy as sa
from alembic import op

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    identity = op.create_table('store_identity',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('store_id', sa.String(length=36), nullable=False),
    sa.Column('created_at', sa.Float(precision=53), nullable=False),
    sa.Column('legacy_files', sa.Boolean(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    # A store that already holds jobs kept their files directly under CORRAL_HOME (logs/job-N, checkpoints/job-N):
    # it alone may claim those folders (`job_files.claim_legacy_files`). A store made anew has none there.
    had_jobs = op.get_bind().execute(sa.text('SELECT 1 FROM jobs LIMIT 1')).first() is not None
    op.bulk_insert(identity, [{'id': 1, 'store_id': str(uuid.uuid4()), 'created_at': time.time(),
                               'legacy_files': had_jobs}])


def downgrade() -> None:
    op.drop_table('store_identity')

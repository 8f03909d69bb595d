"""teams: quotas and borrowing limits; each user in one team, each job under its submitter's team

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 16:45:00.000000
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    teams = op.create_table('teams',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('quota_gpus', sa.Float(precision=53), nullable=False),
    sa.Column('borrow_limit_gpus', sa.Float(precision=53), nullable=True),
    sa.Column('created_at', sa.Float(precision=53), nullable=False),
    sa.Column('updated_at', sa.Float(precision=53), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    # Every existing user and job lands in `default` (quota 0, no borrowing limit): nothing changes for them until an
    # admin creates teams with quotas.
    now = time.time()
    op.bulk_insert(teams, [{'name': 'default', 'quota_gpus': 0.0, 'borrow_limit_gpus': None,
                            'created_at': now, 'updated_at': now}])
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('team', sa.String(length=64), server_default='default', nullable=False))
        batch_op.create_index(batch_op.f('ix_users_team'), ['team'], unique=False)
        batch_op.create_foreign_key('fk_users_team_teams', 'teams', ['team'], ['name'])
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('team', sa.String(length=64), server_default='default', nullable=False))
        batch_op.create_index('ix_jobs_team_state', ['team', 'state'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_team_state')
        batch_op.drop_column('team')
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_constraint('fk_users_team_teams', type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_users_team'))
        batch_op.drop_column('team')
    op.drop_table('teams')

"""dependencies and job arrays: a job's depends_on (other jobs and a condition each), and arrays of tasks that share a
parent (job_arrays), each task with its index

Revision ID: 0012
Revises: 0011
Create Date: 2027-03-01 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('job_arrays',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.Column('max_running', sa.Integer(), nullable=True),
    sa.Column('submitted_at', sa.Float(precision=53), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    # Nullable: every job stored before depends on nothing and belongs to no array.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('depends_on', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('array_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('array_index', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('array_max_running', sa.Integer(), nullable=True))
        batch_op.create_index('ix_jobs_array_id', ['array_id'], unique=False)
        batch_op.create_foreign_key('fk_jobs_array_id', 'job_arrays', ['array_id'], ['id'])


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_constraint('fk_jobs_array_id', type_='foreignkey')
        batch_op.drop_index('ix_jobs_array_id')
        batch_op.drop_column('array_max_running')
        batch_op.drop_column('array_index')
        batch_op.drop_column('array_id')
        batch_op.drop_column('depends_on')
    op.drop_table('job_arrays')

"""webhooks: URLs called on job state changes (a user's, or one job's), the deliveries queued for them with each
attempt, and the dispatcher's cursor over job_events

Revision ID: 0011
Revises: 0010
Create Date: 2027-03-01 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('webhooks',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.Column('url', sa.Text(), nullable=False),
    sa.Column('description', sa.Text(), nullable=False, server_default=''),
    sa.Column('secret', sa.String(length=100), nullable=False),
    sa.Column('created_at', sa.Float(precision=53), nullable=False),
    sa.Column('deleted_at', sa.Float(precision=53), nullable=True),
    sa.Column('after_event_id', sa.Integer(), nullable=False, server_default='0'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('webhooks', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_webhooks_job_id'), ['job_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_webhooks_user_id'), ['user_id'], unique=False)

    op.create_table('webhook_deliveries',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('webhook_id', sa.Integer(), nullable=False),
    sa.Column('event_id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('event', sa.String(length=32), nullable=False),
    sa.Column('body', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.Float(precision=53), nullable=False),
    sa.Column('next_at', sa.Float(precision=53), nullable=False),
    sa.Column('claim', sa.String(length=64), nullable=True),
    sa.Column('locked_until', sa.Float(precision=53), nullable=True),
    sa.Column('last_attempt_at', sa.Float(precision=53), nullable=True),
    sa.Column('last_status_code', sa.Integer(), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('finished_at', sa.Float(precision=53), nullable=True),
    sa.ForeignKeyConstraint(['event_id'], ['job_events.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['webhook_id'], ['webhooks.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('webhook_id', 'event_id', name='uq_webhook_deliveries_webhook_event')
    )
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.create_index('ix_webhook_deliveries_due', ['status', 'next_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_webhook_deliveries_job_id'), ['job_id'], unique=False)

    op.create_table('webhook_attempts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('delivery_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('at', sa.Float(precision=53), nullable=False),
    sa.Column('status_code', sa.Integer(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('duration_ms', sa.Float(precision=53), nullable=False),
    sa.ForeignKeyConstraint(['delivery_id'], ['webhook_deliveries.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('webhook_attempts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_webhook_attempts_delivery_id'), ['delivery_id'], unique=False)

    cursor = op.create_table('webhook_cursor',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('last_event_id', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.Float(precision=53), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    # The one row, there from the start: the dispatcher only ever updates it (never an INSERT two could race on).
    # At the newest event: no webhook exists yet to hear the history, which need not be read.
    events = sa.table('job_events', sa.column('id', sa.Integer()))
    op.execute(sa.insert(cursor).from_select(
        ['id', 'last_event_id', 'updated_at'],
        sa.select(sa.literal(1), sa.func.coalesce(sa.func.max(events.c.id), 0), sa.literal(0.0))))


def downgrade() -> None:
    op.drop_table('webhook_cursor')
    with op.batch_alter_table('webhook_attempts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_webhook_attempts_delivery_id'))
    op.drop_table('webhook_attempts')
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_webhook_deliveries_job_id'))
        batch_op.drop_index('ix_webhook_deliveries_due')
    op.drop_table('webhook_deliveries')
    with op.batch_alter_table('webhooks', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_webhooks_user_id'))
        batch_op.drop_index(batch_op.f('ix_webhooks_job_id'))
    op.drop_table('webhooks')

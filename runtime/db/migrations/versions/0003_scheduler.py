"""scheduler

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 09:00:00.000000
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('conduit_job',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('service', sa.String(length=200), nullable=False),
    sa.Column('job_type', sa.String(length=16), nullable=False),
    sa.Column('is_active', sa.Boolean(), nullable=False),
    sa.Column('start_date', sa.Float(), nullable=True),
    sa.Column('weeks', sa.Float(), nullable=False),
    sa.Column('days', sa.Float(), nullable=False),
    sa.Column('hours', sa.Float(), nullable=False),
    sa.Column('minutes', sa.Float(), nullable=False),
    sa.Column('seconds', sa.Float(), nullable=False),
    sa.Column('repeats', sa.Integer(), nullable=True),
    sa.Column('cron_definition', sa.String(length=200), nullable=False),
    sa.Column('timezone', sa.String(length=64), nullable=False),
    sa.Column('extra', sa.Text(), nullable=False),
    sa.Column('jitter_secs', sa.Float(), nullable=False),
    sa.Column('max_execution_time_secs', sa.Float(), nullable=False),
    sa.Column('on_success', sa.String(length=200), nullable=False),
    sa.Column('on_error', sa.String(length=200), nullable=False),
    sa.Column('skip_if_running', sa.Boolean(), nullable=False),
    sa.Column('catch_up', sa.Boolean(), nullable=False),
    sa.Column('origin', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('next_run_time', sa.Float(), nullable=True),
    sa.Column('run_count', sa.Integer(), nullable=False),
    sa.Column('last_fire_time', sa.Float(), nullable=True),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    with op.batch_alter_table('conduit_job', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_conduit_job_next_run_time'), ['next_run_time'], unique=False)

    op.create_table('conduit_job_run',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('fire_time', sa.Float(), nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=True),
    sa.Column('ended_at', sa.Float(), nullable=True),
    sa.Column('heartbeat_at', sa.Float(), nullable=True),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('error', sa.Text(), nullable=False),
    sa.Column('cid', sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('conduit_job_run', schema=None) as batch_op:
        batch_op.create_index('ix_conduit_job_run_fire', ['job_id', 'fire_time'], unique=True)
        batch_op.create_index(batch_op.f('ix_conduit_job_run_outcome'), ['outcome'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('conduit_job_run', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_conduit_job_run_outcome'))
        batch_op.drop_index('ix_conduit_job_run_fire')

    op.drop_table('conduit_job_run')
    with op.batch_alter_table('conduit_job', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_conduit_job_next_run_time'))

    op.drop_table('conduit_job')

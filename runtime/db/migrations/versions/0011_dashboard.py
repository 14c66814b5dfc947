"""Dashboard sessions, the worker registry, rate and service statistics, lease versions, the audit's source

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 14:30:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('conduit_dashboard_session',
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('actor', sa.String(length=200), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('csrf_token', sa.String(length=64), nullable=False),
    sa.Column('client', sa.String(length=100), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('expires_at', sa.Float(), nullable=False),
    sa.Column('last_seen_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('token_hash'),
    )
    op.create_index('ix_conduit_dashboard_session_expires_at', 'conduit_dashboard_session', ['expires_at'])
    op.create_table('conduit_worker',
    sa.Column('id', sa.String(length=200), nullable=False),
    sa.Column('server', sa.String(length=200), nullable=False),
    sa.Column('host', sa.String(length=200), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('bind', sa.String(length=200), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('heartbeat_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_conduit_worker_server', 'conduit_worker', ['server'])
    op.create_index('ix_conduit_worker_heartbeat_at', 'conduit_worker', ['heartbeat_at'])
    op.create_table('conduit_stats_rate',
    sa.Column('worker', sa.String(length=200), nullable=False),
    sa.Column('bucket', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('published', sa.BigInteger(), nullable=False),
    sa.Column('delivered', sa.BigInteger(), nullable=False),
    sa.Column('failed', sa.BigInteger(), nullable=False),
    sa.Column('dead_lettered', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('worker', 'bucket'),
    )
    op.create_index('ix_conduit_stats_rate_bucket', 'conduit_stats_rate', ['bucket'])
    op.create_table('conduit_stats_service',
    sa.Column('worker', sa.String(length=200), nullable=False),
    sa.Column('service', sa.String(length=200), nullable=False),
    sa.Column('bucket', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('invocations', sa.BigInteger(), nullable=False),
    sa.Column('errors', sa.BigInteger(), nullable=False),
    sa.Column('total_secs', sa.Float(), nullable=False),
    sa.Column('histogram', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('worker', 'service', 'bucket'),
    )
    op.create_index('ix_conduit_stats_service_bucket', 'conduit_stats_service', ['bucket'])
    with op.batch_alter_table('conduit_lease') as batch:
        batch.add_column(sa.Column('version', sa.BigInteger(), nullable=False, server_default='0'))
    with op.batch_alter_table('conduit_audit') as batch:
        batch.add_column(sa.Column('source', sa.String(length=16), nullable=False, server_default='api'))


def downgrade() -> None:
    with op.batch_alter_table('conduit_audit') as batch:
        batch.drop_column('source')
    with op.batch_alter_table('conduit_lease') as batch:
        batch.drop_column('version')
    op.drop_index('ix_conduit_stats_service_bucket', table_name='conduit_stats_service')
    op.drop_table('conduit_stats_service')
    op.drop_index('ix_conduit_stats_rate_bucket', table_name='conduit_stats_rate')
    op.drop_table('conduit_stats_rate')
    op.drop_index('ix_conduit_worker_heartbeat_at', table_name='conduit_worker')
    op.drop_index('ix_conduit_worker_server', table_name='conduit_worker')
    op.drop_table('conduit_worker')
    op.drop_index('ix_conduit_dashboard_session_expires_at', table_name='conduit_dashboard_session')
    op.drop_table('conduit_dashboard_session')

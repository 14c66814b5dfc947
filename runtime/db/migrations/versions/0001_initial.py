"""initial schema: deployments, security, channels, sync state

Revision ID: 0001
Revises:
Create Date: 2026-11-22 10:50:31.489946
"""
import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('conduit_channel_rest',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('service', sa.String(length=200), nullable=False),
    sa.Column('url_path', sa.String(length=1000), nullable=False),
    sa.Column('methods', sa.String(length=200), nullable=False),
    sa.Column('data_format', sa.String(length=16), nullable=False),
    sa.Column('security', sa.String(length=200), nullable=False),
    sa.Column('is_active', sa.Boolean(), nullable=False),
    sa.Column('origin', sa.String(length=16), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('conduit_deployment',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('module_name', sa.String(length=200), nullable=False),
    sa.Column('file_name', sa.String(length=400), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('source_hash', sa.String(length=64), nullable=False),
    sa.Column('service_names', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('conduit_sec_basic_auth',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('username', sa.String(length=200), nullable=False),
    sa.Column('password_hash', sa.String(length=400), nullable=False),
    sa.Column('realm', sa.String(length=200), nullable=False),
    sa.Column('is_active', sa.Boolean(), nullable=False),
    sa.Column('origin', sa.String(length=16), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name'),
    sa.UniqueConstraint('username')
    )
    op.create_table('conduit_sync_state',
    sa.Column('key', sa.String(length=100), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('key')
    )


def downgrade() -> None:
    op.drop_table('conduit_sync_state')
    op.drop_table('conduit_sec_basic_auth')
    op.drop_table('conduit_deployment')
    op.drop_table('conduit_channel_rest')

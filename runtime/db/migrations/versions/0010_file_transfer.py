"""File transfer: inbound file channels, the runs of their files, and the digests of failed runs

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 10:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('conduit_file_channel',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('definition', sa.Text(), nullable=False),
    sa.Column('is_active', sa.Boolean(), nullable=False),
    sa.Column('origin', sa.String(length=16), nullable=False),
    sa.Column('owner', sa.String(length=1000), nullable=False, server_default=''),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name'),
    )
    op.create_table('conduit_file_run',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('channel', sa.String(length=200), nullable=False),
    sa.Column('file_name', sa.String(length=1000), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('mtime', sa.Float(), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('records_done', sa.BigInteger(), nullable=False),
    sa.Column('published', sa.BigInteger(), nullable=False),
    sa.Column('invoked', sa.BigInteger(), nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.Column('error', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    )
    op.create_index(op.f('ix_conduit_file_run_channel'), 'conduit_file_run', ['channel'], unique=False)
    op.create_index('ix_file_run_hash', 'conduit_file_run', ['channel', 'content_hash'], unique=False)
    op.create_index('ix_file_run_name', 'conduit_file_run', ['channel', 'file_name'], unique=False)
    op.create_table('conduit_file_digest',
    sa.Column('run_id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('digest', sa.String(length=32), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['conduit_file_run.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'digest'),
    )


def downgrade() -> None:
    op.drop_table('conduit_file_digest')
    op.drop_index('ix_file_run_name', table_name='conduit_file_run')
    op.drop_index('ix_file_run_hash', table_name='conduit_file_run')
    op.drop_index(op.f('ix_conduit_file_run_channel'), table_name='conduit_file_run')
    op.drop_table('conduit_file_run')
    op.drop_table('conduit_file_channel')

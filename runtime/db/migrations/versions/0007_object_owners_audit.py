"""object owners and the audit log

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 02:45:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

#: Tables of declarative objects: each gets the file that declared it.
_OWNED = ('conduit_sec_basic_auth', 'conduit_channel_rest', 'conduit_topic', 'conduit_subscription',
          'conduit_pubsub_permission', 'conduit_job')


def upgrade() -> None:
    for table in _OWNED:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column('owner', sa.String(length=1000), nullable=False, server_default=''))
    op.create_table('conduit_audit',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('actor', sa.String(length=200), nullable=False),
    sa.Column('client', sa.String(length=100), nullable=False),
    sa.Column('method', sa.String(length=16), nullable=False),
    sa.Column('path', sa.String(length=1000), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('name', sa.String(length=400), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('status', sa.Integer(), nullable=False),
    sa.Column('before', sa.Text(), nullable=True),
    sa.Column('after', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True,
    )
    op.create_index('ix_conduit_audit_at', 'conduit_audit', ['at'])
    op.create_index('ix_conduit_audit_object', 'conduit_audit', ['kind', 'name'])


def downgrade() -> None:
    op.drop_index('ix_conduit_audit_object', table_name='conduit_audit')
    op.drop_index('ix_conduit_audit_at', table_name='conduit_audit')
    op.drop_table('conduit_audit')
    for table in _OWNED:
        with op.batch_alter_table(table) as batch:
            batch.drop_column('owner')

"""WebSocket subscribers: the topics' limit_sub_inactivity, and one conduit_ws_client row per subscription

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 10:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('conduit_topic') as batch:
        batch.add_column(sa.Column('limit_sub_inactivity', sa.Integer(), nullable=False, server_default='86400'))
    op.create_table('conduit_ws_client',
    sa.Column('sub_id', sa.Integer(), nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False, server_default=''),
    sa.Column('peer', sa.String(length=100), nullable=False, server_default=''),
    sa.Column('connected_at', sa.Float(), nullable=True),
    sa.Column('last_active_at', sa.Float(), nullable=False),
    sa.Column('in_flight', sa.Integer(), nullable=False, server_default='0'),
    sa.ForeignKeyConstraint(['sub_id'], ['conduit_subscription.id']),
    sa.PrimaryKeyConstraint('sub_id'),
    )


def downgrade() -> None:
    op.drop_table('conduit_ws_client')
    with op.batch_alter_table('conduit_topic') as batch:
        batch.drop_column('limit_sub_inactivity')

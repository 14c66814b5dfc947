"""pubsub

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 10:58:00.672292
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('conduit_dead_letter',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('sub_id', sa.Integer(), nullable=False),
    sa.Column('message_id', sa.BigInteger(), nullable=False),
    sa.Column('delivery_count', sa.Integer(), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=False),
    sa.Column('reason', sa.String(length=32), nullable=False),
    sa.Column('dead_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('conduit_dead_letter', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_conduit_dead_letter_message_id'), ['message_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_conduit_dead_letter_sub_id'), ['sub_id'], unique=False)

    op.create_table('conduit_lease',
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False),
    sa.Column('expires_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('conduit_message',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('msg_id', sa.String(length=64), nullable=False),
    sa.Column('topic_id', sa.Integer(), nullable=False),
    sa.Column('topic_name', sa.String(length=200), nullable=False),
    sa.Column('data', sa.Text(), nullable=False),
    sa.Column('mime_type', sa.String(length=100), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('pub_time', sa.Float(), nullable=False),
    sa.Column('expiration_time', sa.Float(), nullable=False),
    sa.Column('publisher', sa.String(length=200), nullable=False),
    sa.Column('correl_id', sa.String(length=200), nullable=True),
    sa.Column('in_reply_to', sa.String(length=200), nullable=True),
    sa.Column('ext_client_id', sa.String(length=200), nullable=True),
    sa.Column('has_gd', sa.Boolean(), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('in_topic', sa.Boolean(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('msg_id'),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('conduit_message', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_conduit_message_in_topic'), ['in_topic'], unique=False)
        batch_op.create_index(batch_op.f('ix_conduit_message_topic_id'), ['topic_id'], unique=False)

    op.create_table('conduit_queue',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('sub_id', sa.Integer(), nullable=False),
    sa.Column('message_id', sa.BigInteger(), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('delivery_count', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', sa.Float(), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=False),
    sa.Column('ack_id', sa.String(length=64), nullable=True),
    sa.Column('recv_time', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('conduit_queue', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_conduit_queue_message_id'), ['message_id'], unique=False)
        batch_op.create_index('ix_conduit_queue_order', ['sub_id', 'priority', 'message_id'], unique=False)

    op.create_table('conduit_subscription',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('sub_key', sa.String(length=64), nullable=False),
    sa.Column('pattern', sa.String(length=200), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('service', sa.String(length=200), nullable=False),
    sa.Column('security', sa.String(length=200), nullable=False),
    sa.Column('push_url', sa.String(length=1000), nullable=False),
    sa.Column('options', sa.Text(), nullable=False),
    sa.Column('is_active', sa.Boolean(), nullable=False),
    sa.Column('origin', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('sub_key')
    )
    op.create_table('conduit_topic',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('name_key', sa.String(length=200), nullable=False),
    sa.Column('is_active', sa.Boolean(), nullable=False),
    sa.Column('has_gd', sa.Boolean(), nullable=False),
    sa.Column('is_api_sub_allowed', sa.Boolean(), nullable=False),
    sa.Column('on_no_subs', sa.String(length=16), nullable=False),
    sa.Column('max_depth_gd', sa.Integer(), nullable=False),
    sa.Column('max_depth_non_gd', sa.Integer(), nullable=False),
    sa.Column('on_max_depth', sa.String(length=16), nullable=False),
    sa.Column('depth_check_freq', sa.Integer(), nullable=False),
    sa.Column('limit_retention', sa.Integer(), nullable=False),
    sa.Column('limit_message_expiry', sa.Integer(), nullable=False),
    sa.Column('hook_service', sa.String(length=200), nullable=False),
    sa.Column('is_service_topic', sa.Boolean(), nullable=False),
    sa.Column('origin', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name_key')
    )


def downgrade() -> None:
    op.drop_table('conduit_topic')
    op.drop_table('conduit_subscription')
    with op.batch_alter_table('conduit_queue', schema=None) as batch_op:
        batch_op.drop_index('ix_conduit_queue_order')
        batch_op.drop_index(batch_op.f('ix_conduit_queue_message_id'))

    op.drop_table('conduit_queue')
    with op.batch_alter_table('conduit_message', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_conduit_message_topic_id'))
        batch_op.drop_index(batch_op.f('ix_conduit_message_in_topic'))

    op.drop_table('conduit_message')
    op.drop_table('conduit_lease')
    with op.batch_alter_table('conduit_dead_letter', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_conduit_dead_letter_sub_id'))
        batch_op.drop_index(batch_op.f('ix_conduit_dead_letter_message_id'))

    op.drop_table('conduit_dead_letter')

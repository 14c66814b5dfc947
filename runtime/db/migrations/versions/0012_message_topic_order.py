"""A topic's messages in publication order: index (topic_id, id) on conduit_message, replacing (topic_id)

The dashboard and the admin API read a topic's newest messages, its last publication and the messages
waiting in it, page by page; with the id beside the topic an index scan gives them in order without
sorting a topic of a million messages. The old index on topic_id alone is its prefix, so it goes.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24 18:05:00
"""
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('conduit_message', schema=None) as batch_op:
        batch_op.create_index('ix_conduit_message_topic_order', ['topic_id', 'id'], unique=False)
        batch_op.drop_index('ix_conduit_message_topic_id')


def downgrade() -> None:
    with op.batch_alter_table('conduit_message', schema=None) as batch_op:
        batch_op.create_index('ix_conduit_message_topic_id', ['topic_id'], unique=False)
        batch_op.drop_index('ix_conduit_message_topic_order')

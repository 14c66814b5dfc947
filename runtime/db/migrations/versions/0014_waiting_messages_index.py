"""Messages waiting in a topic: a partial index on conduit_message(topic_id, id), replacing (in_topic)

Every stored message had an entry in the index on in_topic, written in the publication's commit and
deleted when the consumed message was swept, although nearly every message goes straight to a queue
and is never looked up by it. The messages waiting in a topic (accepted with no subscriber) are now
indexed alone, by topic and publication order, which is how every query of them asks: a topic's
waiting messages, their count, the hand-over to a new subscription and the sweep of expired ones.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 14:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None

# runtime.db.models.WAITING_IN_TOPIC and WAITING_IN_TOPIC_SQLITE as they are at this revision.
WAITING = 'in_topic IS true'
WAITING_SQLITE = 'in_topic IS 1'


def upgrade() -> None:
    with op.batch_alter_table('conduit_message', schema=None) as batch_op:
        batch_op.drop_index('ix_conduit_message_in_topic')
    op.create_index('ix_conduit_message_waiting', 'conduit_message', ['topic_id', 'id'], unique=False,
                    postgresql_where=sa.text(WAITING), sqlite_where=sa.text(WAITING_SQLITE))


def downgrade() -> None:
    op.drop_index('ix_conduit_message_waiting', table_name='conduit_message')
    with op.batch_alter_table('conduit_message', schema=None) as batch_op:
        batch_op.create_index('ix_conduit_message_in_topic', ['in_topic'], unique=False)

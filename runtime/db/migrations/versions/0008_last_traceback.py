"""last traceback of a failed delivery, on queue entries and dead letters

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 02:30:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('conduit_queue') as batch:
        batch.add_column(sa.Column('last_traceback', sa.Text(), nullable=True))
    with op.batch_alter_table('conduit_dead_letter') as batch:
        batch.add_column(sa.Column('last_traceback', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('conduit_dead_letter') as batch:
        batch.drop_column('last_traceback')
    with op.batch_alter_table('conduit_queue') as batch:
        batch.drop_column('last_traceback')

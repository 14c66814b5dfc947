"""the publisher's own pub_time of a message

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 03:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('conduit_message', sa.Column('ext_pub_time', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('conduit_message') as batch:
        batch.drop_column('ext_pub_time')

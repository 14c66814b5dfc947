"""pub/sub permissions of security definitions

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 11:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('conduit_pubsub_permission',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('security', sa.String(length=200), nullable=False),
    sa.Column('pub', sa.Text(), nullable=False),
    sa.Column('sub', sa.Text(), nullable=False),
    sa.Column('origin', sa.String(length=16), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('security')
    )


def downgrade() -> None:
    op.drop_table('conduit_pubsub_permission')

"""Dashboard sessions end when the password they signed in with changes: conduit_dashboard_credential

Each session records the generation of its role's credentials at sign-in; a new admin or viewer
password (or user name) gives the role a new generation. Sessions from before this revision have
none and end at the upgrade: which password they signed in with is not known.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 12:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('conduit_dashboard_credential',
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('username', sa.String(length=200), nullable=False),
    sa.Column('password_hash', sa.String(length=400), nullable=False),
    sa.Column('generation', sa.String(length=64), nullable=False),
    sa.Column('changed_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('role'),
    )
    with op.batch_alter_table('conduit_dashboard_session') as batch:
        batch.add_column(sa.Column('credential', sa.String(length=64), nullable=False, server_default=''))


def downgrade() -> None:
    with op.batch_alter_table('conduit_dashboard_session') as batch:
        batch.drop_column('credential')
    op.drop_table('conduit_dashboard_credential')

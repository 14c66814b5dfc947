"""spark jobs

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 12:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('conduit_spark_job',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.String(length=64), nullable=False),
    sa.Column('pipeline', sa.String(length=200), nullable=False),
    sa.Column('arguments', sa.Text(), nullable=False),
    sa.Column('master', sa.String(length=400), nullable=False),
    sa.Column('conf', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('submitted_at', sa.Float(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=True),
    sa.Column('ended_at', sa.Float(), nullable=True),
    sa.Column('heartbeat_at', sa.Float(), nullable=True),
    sa.Column('timeout_secs', sa.Float(), nullable=False),
    sa.Column('service', sa.String(length=200), nullable=False),
    sa.Column('callback', sa.String(length=200), nullable=False),
    sa.Column('cid', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('log_path', sa.String(length=1000), nullable=False),
    sa.Column('output_location', sa.String(length=1000), nullable=False),
    sa.Column('result', sa.Text(), nullable=False),
    sa.Column('error', sa.Text(), nullable=False),
    sa.Column('kill_requested', sa.String(length=200), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('job_id')
    )
    with op.batch_alter_table('conduit_spark_job', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_conduit_spark_job_pipeline'), ['pipeline'], unique=False)
        batch_op.create_index(batch_op.f('ix_conduit_spark_job_status'), ['status'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('conduit_spark_job', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_conduit_spark_job_status'))
        batch_op.drop_index(batch_op.f('ix_conduit_spark_job_pipeline'))

    op.drop_table('conduit_spark_job')

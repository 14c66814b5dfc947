"""One implicit subscription per service: a partial unique index on conduit_subscription(service)

A service's implicit subscription to its own topic (kind 'service', origin 'service') is made by the
first publisher that finds it missing. Two workers (or servers) doing so at the same moment each
made one, and every message to the service was then delivered twice. The index makes the second
insert fail, and the publisher that loses reads what the first made.

Duplicates already stored are merged into the oldest subscription of each service first: entries
the oldest queue lacks move to it (a message may then be delivered once more, but none is lost),
dead letters move too, and the duplicates' other rows and leases go.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 00:45:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

# runtime.db.models.IMPLICIT_SUBSCRIPTION as it is at this revision: a migration keeps its own copy, since
# the models change after it.
IMPLICIT = "kind = 'service' AND origin = 'service'"


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.text(f'SELECT service, id FROM conduit_subscription WHERE {IMPLICIT} ORDER BY service, id'))
    by_service: dict[str, list[int]] = {}
    for service, sub_id in rows:
        by_service.setdefault(service, []).append(sub_id)
    for ids in by_service.values():
        kept, duplicates = ids[0], ids[1:]
        for dup in duplicates:
            params = {'kept': kept, 'dup': dup}
            conn.execute(sa.text('DELETE FROM conduit_queue WHERE sub_id = :dup AND message_id IN '
                                 '(SELECT message_id FROM conduit_queue WHERE sub_id = :kept)'), params)
            conn.execute(sa.text('UPDATE conduit_queue SET sub_id = :kept WHERE sub_id = :dup'), params)
            conn.execute(sa.text('UPDATE conduit_dead_letter SET sub_id = :kept WHERE sub_id = :dup'), params)
            conn.execute(sa.text('DELETE FROM conduit_ws_client WHERE sub_id = :dup'), params)
            conn.execute(sa.text('DELETE FROM conduit_lease WHERE name = :name'), {'name': f'pubsub:sub:{dup}'})
            conn.execute(sa.text('DELETE FROM conduit_subscription WHERE id = :dup'), params)
    op.create_index('ix_conduit_subscription_implicit', 'conduit_subscription', ['service'], unique=True,
                    postgresql_where=sa.text(IMPLICIT), sqlite_where=sa.text(IMPLICIT))


def downgrade() -> None:
    op.drop_index('ix_conduit_subscription_implicit', table_name='conduit_subscription')

"""The Alembic migrations create exactly the schema the models describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import insert, select

from runtime.db.engine import make_engine
from runtime.db.migrate import alembic_config, upgrade
from runtime.db.models import Base, DeadLetter, Lease, QueueEntry, Subscription, SyncState
from runtime.pubsub import statements
from runtime.pubsub.registry import KIND_SERVICE, service_topic_name
from runtime.pubsub.subscribers import SUBSCRIBER_KINDS


def test_migrations_match_models(empty_db_url):
    engine = make_engine(empty_db_url, pool_size=1)
    try:
        upgrade(engine)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == [], f'models and migrations differ: {diff}'
    finally:
        engine.dispose()


def test_upgrade_twice_is_harmless(empty_db_url):
    """A second upgrade (every server start runs one) keeps the schema, the revision and the data."""
    engine = make_engine(empty_db_url, pool_size=1)
    try:
        upgrade(engine)
        with engine.begin() as conn:
            conn.execute(insert(SyncState).values(key='kept', version=7, value='v'))
            first = MigrationContext.configure(conn).get_current_revision()
        upgrade(engine)
        with engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == first
            assert first == ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
            assert conn.execute(select(SyncState.version).where(SyncState.key == 'kept')).scalar_one() == 7
    finally:
        engine.dispose()


def test_duplicate_implicit_subscriptions_are_merged_before_the_unique_index(empty_db_url):
    """0013: a service's duplicate implicit subscriptions (an earlier race) become one; no waiting message is lost."""
    engine = make_engine(empty_db_url, pool_size=1)
    try:
        upgrade(engine, '0012')
        with engine.begin() as conn:
            name = service_topic_name('svc')
            statements.create_topic(conn, name, {'has_gd': True}, is_service_topic=True, origin='service')
            kept, dup = (statements.create_subscription(conn, statements.load_topics(conn), SUBSCRIBER_KINDS, name,
                                                        KIND_SERVICE, service='svc', origin='service')[0]
                         for _ in range(2))
            # The user's own subscription of the service to its topic is not an implicit one: it stays.
            own = statements.create_subscription(conn, statements.load_topics(conn), SUBSCRIBER_KINDS, name,
                                                 KIND_SERVICE, service='svc', origin='api')[0]
            for sub_id, message_id in ((kept, 1), (kept, 2), (dup, 2), (dup, 3), (own, 1)):
                conn.execute(insert(QueueEntry).values(sub_id=sub_id, message_id=message_id, priority=-5,
                                                       recv_time=1.0))
            conn.execute(insert(DeadLetter).values(sub_id=dup, message_id=9, delivery_count=5, last_error='boom',
                                                   reason='max_attempts', dead_at=1.0))
            conn.execute(insert(Lease).values(name=f'pubsub:sub:{dup}', owner='w1', expires_at=1.0))
        upgrade(engine)
        with engine.connect() as conn:
            subs = set(conn.execute(select(Subscription.id).where(Subscription.service == 'svc')).scalars())
            assert subs == {kept, own}
            entries = sorted(conn.execute(select(QueueEntry.sub_id, QueueEntry.message_id)).all())
            assert entries == sorted([(kept, 1), (kept, 2), (kept, 3), (own, 1)])
            assert conn.execute(select(DeadLetter.sub_id)).scalars().all() == [kept]
            assert conn.execute(select(Lease.name)).scalars().all() == []
    finally:
        engine.dispose()

"""The Alembic migrations create exactly the schema the models describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import insert, select

from runtime.db.engine import make_engine
from runtime.db.migrate import alembic_config, upgrade
from runtime.db.models import Base, SyncState


def test_migrations_match_models(db_url):
    engine = make_engine(db_url, pool_size=1)
    try:
        upgrade(engine)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == [], f'models and migrations differ: {diff}'
    finally:
        engine.dispose()


def test_upgrade_twice_is_harmless(db_url):
    """A second upgrade (every server start runs one) keeps the schema, the revision and the data."""
    engine = make_engine(db_url, pool_size=1)
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

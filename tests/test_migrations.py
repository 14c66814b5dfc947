"""The Alembic migrations create exactly the schema the models describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from runtime.db.engine import make_engine
from runtime.db.migrate import upgrade
from runtime.db.models import Base


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
    engine = make_engine(db_url, pool_size=1)
    try:
        upgrade(engine)
        upgrade(engine)
    finally:
        engine.dispose()

"""Alembic environment: runs migrations on the engine handed over by runtime.db.migrate."""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from runtime.db.engine import is_sqlite, make_engine
from runtime.db.models import Base

config = context.config
target_metadata = Base.metadata

#: Any constant works; it only has to be the same in every process migrating one database.
PG_MIGRATION_LOCK_KEY = 0x636F6E64


def run_migrations_online() -> None:
    engine = config.attributes.get('engine') or make_engine(config.get_main_option('sqlalchemy.url'))
    with engine.connect() as connection:
        if not is_sqlite(engine):
            # Several servers may start at once against one PostgreSQL: one migrates, the others wait.
            connection.execute(text('SELECT pg_advisory_lock(:k)'), {'k': PG_MIGRATION_LOCK_KEY})
            connection.commit()
        try:
            context.configure(connection=connection, target_metadata=target_metadata,
                              render_as_batch=is_sqlite(engine))
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
        finally:
            if not is_sqlite(engine):
                connection.execute(text('SELECT pg_advisory_unlock(:k)'), {'k': PG_MIGRATION_LOCK_KEY})
                connection.commit()


run_migrations_online()

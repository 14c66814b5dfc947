"""Create or upgrade the schema with Alembic, from code (no alembic.ini needed)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

#: Where the migration scripts live.
MIGRATIONS_DIR = Path(__file__).with_name('migrations')


def alembic_config(engine: Engine) -> Config:
    """An Alembic Config bound to this engine."""
    cfg = Config()
    cfg.set_main_option('script_location', str(MIGRATIONS_DIR))
    cfg.set_main_option('sqlalchemy.url', engine.url.render_as_string(hide_password=False).replace('%', '%%'))
    cfg.attributes['engine'] = engine
    return cfg


def upgrade(engine: Engine, revision: str = 'head') -> None:
    """Bring the database schema to the given revision (the newest by default)."""
    command.upgrade(alembic_config(engine), revision)

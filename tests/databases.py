"""The suite's databases: one migrated template per backend and pytest process, and copies of it.

Running every migration costs about a second per database, and the suite makes one per test, so
each pytest process migrates once per backend and hands out copies: a file copy for SQLite, and for
PostgreSQL a database from ``CREATE DATABASE ... TEMPLATE``. A PostgreSQL database a test is done
with is emptied and handed to the next test instead of dropped (dropping and creating cost about a
second together; emptying a few dozen small tables, a few milliseconds), but only when its schema
is still the template's: a test that made a table, a function or a database setting, or moved the
migration revision, gets its database dropped. Whatever a test left in the tables is deleted and
every sequence starts again at 1, so a reused database answers as a new copy would. The emptying is
done when the database is taken again, not when it is given back: a runtime stopped after its test
gave the database back (its last statistics flush, say) still writes into it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from runtime.db.engine import make_engine
from runtime.db.migrate import upgrade
from runtime.db.models import Base

#: What a PostgreSQL database's schema is made of, counted in one query: relations (tables, indexes,
#: sequences, views) outside the system schemas, the columns of the public ones, functions, triggers,
#: the migration revision and per-database settings. Equal to the template's: nothing but rows changed.
_FINGERPRINT = '''
SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'),
       (SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND a.attnum > 0),
       (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'),
       (SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'),
       (SELECT count(*) FROM pg_namespace),
       (SELECT string_agg(version_num, ',') FROM alembic_version),
       (SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
         WHERE d.datname = current_database())
'''


def migrate(url: str) -> None:
    """Bring the database at url to the newest schema, leaving no connection open."""
    engine = make_engine(url, pool_size=1)
    try:
        upgrade(engine)
    finally:
        # PostgreSQL copies a template only while nobody is connected to it.
        engine.dispose()


class Databases:
    """This process's templates, and its PostgreSQL databases waiting to be handed out again."""

    def __init__(self, folder: Path, pg_admin_url: str) -> None:
        self.folder = folder
        self._admin_url = pg_admin_url
        self._templates: dict[str, str] = {}
        self._fingerprint: tuple[object, ...] | None = None
        self._idle: list[str] = []
        self._owned: set[str] = set()

    def pg_url(self, name: str) -> str:
        """The URL of a PostgreSQL database of this server."""
        return f'{self._admin_url.rsplit("/", 1)[0]}/{name}'

    def admin(self) -> psycopg.Connection:
        """An autocommit connection to the administration database."""
        return psycopg.connect(self._admin_url, autocommit=True, connect_timeout=5)

    def create(self, name: str, template: str = '') -> None:
        """Create a PostgreSQL database (empty, or a copy of template)."""
        query = sql.SQL('CREATE DATABASE {}').format(sql.Identifier(name))
        if template:
            query = sql.SQL('CREATE DATABASE {} TEMPLATE {}').format(sql.Identifier(name), sql.Identifier(template))
        with self.admin() as conn:
            conn.execute(query)

    def drop(self, name: str) -> None:
        """Drop a PostgreSQL database, ending its sessions."""
        with self.admin() as conn:
            conn.execute(sql.SQL('DROP DATABASE IF EXISTS {} WITH (FORCE)').format(sql.Identifier(name)))

    def sqlite_copy(self, path: Path) -> str:
        """A copy of the migrated SQLite template at path; its URL."""
        if 'sqlite' not in self._templates:
            template = self.folder / 'template.db'
            migrate(f'sqlite:///{template}')
            self._templates['sqlite'] = str(template)
        shutil.copyfile(self._templates['sqlite'], path)
        return f'sqlite:///{path}'

    def pg_take(self) -> str:
        """A migrated PostgreSQL database no one else uses: an emptied one, or a new copy of the template."""
        if 'postgresql' not in self._templates:
            template = f'conduit_template_{os.getpid()}_{uuid.uuid4().hex[:6]}'
            self.create(template)
            self._templates['postgresql'] = template  # dropped at the end even if the migration fails
            migrate(self.pg_url(template))
            with psycopg.connect(self.pg_url(template), autocommit=True) as conn:
                self._fingerprint = tuple(conn.execute(_FINGERPRINT).fetchone() or ())
        while self._idle:
            name = self._idle.pop()
            if self._emptied(name):
                return name
            self._owned.discard(name)
            self.drop(name)
        name = f'conduit_test_{uuid.uuid4().hex[:12]}'
        self.create(name, self._templates['postgresql'])
        self._owned.add(name)
        return name

    def pg_give_back(self, name: str) -> None:
        """Keep a database a test is done with for the next one (emptied when it is taken)."""
        self._idle.append(name)

    def _emptied(self, name: str) -> bool:
        """Whether name still has the template's schema, and then its rows are deleted and its sequences reset."""
        try:
            return self._empty(name)
        except psycopg.Error:
            return False  # whatever went wrong, a dropped database cannot mislead the next test

    def _empty(self, name: str) -> bool:
        with self.admin() as admin:
            # A server a test left running (or a worker it orphaned) must not write into the next test's rows.
            admin.execute('SELECT pg_terminate_backend(pid) FROM pg_stat_activity '
                          'WHERE datname = %s AND pid <> pg_backend_pid()', (name,))
        with psycopg.connect(self.pg_url(name), connect_timeout=5) as conn:
            conn.execute("SET lock_timeout = '5s'")
            if tuple(conn.execute(_FINGERPRINT).fetchone() or ()) != self._fingerprint:
                return False
            for table in reversed(Base.metadata.sorted_tables):
                conn.execute(sql.SQL('DELETE FROM {}').format(sql.Identifier(table.name)))
            conn.execute("SELECT setval(c.oid::regclass, 1, false) FROM pg_class c "
                         "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'S' AND n.nspname = 'public'")
            conn.commit()
        return True

    def close(self) -> None:
        """Drop every PostgreSQL database of this process (the SQLite files go with pytest's temporary folder)."""
        for name in [*self._owned, *([self._templates['postgresql']] if 'postgresql' in self._templates else [])]:
            self.drop(name)
        self._owned.clear()
        self._idle.clear()

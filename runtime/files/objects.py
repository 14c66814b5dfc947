"""The ``file_channel`` section of the object files: inbound file-transfer channels.

Each item holds the fields of ``FileChannelDef`` (``name``, ``directory``, ``patterns``,
``format``, ``topics``, ``service``, ``after``, ``sftp_*``, ...), checked by
``FileChannelDef.from_values``; SFTP secrets are written as ``${CONDUIT_SECRET_...}`` references
and stored as such. Channels are matched by name. As for every section (``runtime.objects.applier``), a
channel belongs to the file that declared it: re-applying the files updates it, a file that no
longer declares it deletes it, and a channel made through the admin API or the CLI, or declared by a
file outside this application, is left alone with a warning. A channel publishing to a topic that
does not exist (and is not declared in ``pubsub_topic``) is refused unless the server makes topics
on first publication; one invoking a service that does not exist is refused too.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from runtime.db.models import FileChannelRow
from runtime.errors import ConfigError
from runtime.files.definition import FILE_CHANNELS_KEY, FileChannelDef
from runtime.objects import zato_keys
from runtime.objects.applier import CREATE, DELETE, UPDATE, Scope, SectionHandler
from runtime.objects.checks import check_service, topic_missing

#: The section's name in the object files.
SECTION = 'file_channel'

#: The kind of object the plan, the audit log and ``/admin/detach`` name.
KIND = 'file_channel'


def _where(item: dict[str, Any]) -> str:
    return f'{item["_file"]} [{SECTION}] {zato_keys.label(item)}'


def _changed_fields(row: Any, definition: FileChannelDef) -> list[str]:
    """The fields of a stored channel a declaration changes (every one when the stored one is unreadable)."""
    try:
        before = json.loads(row.definition)
    except ValueError:
        before = None
    after = json.loads(definition.stored())
    if not isinstance(before, dict):
        return sorted(after)
    changed = sorted(k for k in after.keys() | before.keys() if before.get(k) != after.get(k))
    if row.is_active != definition.is_active:
        changed.append('is_active')
    return changed


def make_apply_file_channels(auto_create_topics: bool):  # type: ignore[no-untyped-def]
    """The handler of section file_channel (topics must exist unless publishing makes them)."""

    def apply_file_channels(conn: Connection, items: list[dict[str, Any]], scope: Scope) -> None:
        declared: dict[str, tuple[FileChannelDef, str]] = {}
        for item in items:
            where = _where(item)
            definition = FileChannelDef.from_values({k: v for k, v in item.items() if k != '_file'}, where)
            if definition.name in declared:
                raise ConfigError(where, 'file channel declared twice')
            check_service(scope.service_exists, definition.service, where)
            if not auto_create_topics:
                for topic in definition.topics:
                    if topic_missing(conn, topic):
                        raise ConfigError(where, f'topic {topic!r} does not exist (declare it in [pubsub_topic] '
                                                 'or create it first)')
            declared[definition.name] = (definition, item['_file'])
        for row in scope.stale(conn, FileChannelRow):
            if row.name not in declared:
                conn.execute(delete(FileChannelRow).where(FileChannelRow.id == row.id))
                scope.record(DELETE, KIND, row.name, row.owner)
        now = time.time()
        for name, (definition, file) in declared.items():
            row = conn.execute(select(FileChannelRow).where(FileChannelRow.name == name)).first()
            values = {'definition': definition.stored(), 'is_active': definition.is_active, 'origin': 'config',
                      'owner': file}
            if row is None:
                conn.execute(insert(FileChannelRow).values(name=name, updated_at=now, **values))
                scope.record(CREATE, KIND, name, file)
                continue
            if not scope.may_take(KIND, name, row.origin, row.owner, file):
                continue
            changed = _changed_fields(row, definition)
            if row.origin != 'config' or row.owner != file:
                changed.append('owner')
            if changed:
                conn.execute(update(FileChannelRow).where(FileChannelRow.id == row.id).values(updated_at=now,
                                                                                              **values))
                scope.record(UPDATE, KIND, name, file, ', '.join(changed))

    return apply_file_channels


def section_handler(auto_create_topics: bool = False) -> SectionHandler:
    """The handler to register with the ObjectsApplier, after pubsub_topic (a channel names topics)."""
    return SectionHandler(SECTION, make_apply_file_channels(auto_create_topics), (FILE_CHANNELS_KEY,))

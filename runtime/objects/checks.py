"""Checks of references between objects: what a channel, job or subscription names must exist,
two channels may not answer the same path and method, and a service others use is not removed
by accident.

Used by the object files (``runtime.objects.applier`` and the sections of pub/sub and the scheduler) and by
the admin API, so that both refuse the same things with the same words. Each check names the
object at fault and the one it clashes with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from sqlalchemy import Connection, or_, select

from runtime.channels.rest import parse_methods
from runtime.db.models import FileChannelRow, Job, RestChannel, Subscription, Topic
from runtime.errors import ConfigError
from runtime.pubsub.registry import SERVICE_TOPIC_PREFIX
from runtime.pubsub.topics import is_pattern, normalize

#: Topics the runtime makes by itself when a worker starts (the Spark manager's events): a file
#: may subscribe to them before they exist.
RUNTIME_TOPICS = frozenset({'spark.job.completed', 'spark.job.failed'})

_PARAM = re.compile(r'\{[^}]*\}')


def check_service(service_exists: Callable[[str], bool] | None, service: str, where: str) -> None:
    """ConfigError naming where unless the service exists (nothing is checked without a catalog)."""
    if service_exists is not None and service and not service_exists(service):
        raise ConfigError(where, f'service {service!r} does not exist (deploy it first)')


def route_key(url_path: str) -> str:
    """A URL path template with its parameter names blanked: /a/{x} and /a/{y} answer the same paths."""
    return _PARAM.sub('{}', url_path)


def _overlap(a: frozenset[str], b: frozenset[str]) -> set[str] | None:
    """The methods two channels share (an empty set of methods means every method), or None."""
    if not a or not b:
        return set(a or b) or {'any method'}
    common = a & b
    return set(common) if common else None


def channel_clash(conn: Connection, name: str, url_path: str, methods: frozenset[str]) -> str | None:
    """A description of another channel answering the same path and a same method, or None."""
    key = route_key(url_path)
    for row in conn.execute(select(RestChannel.name, RestChannel.url_path, RestChannel.methods)
                            .where(RestChannel.name != name)).all():
        if route_key(row.url_path) != key:
            continue
        shared = _overlap(methods, parse_methods(row.methods))
        if shared is not None:
            return (f'channel {row.name!r} already answers {", ".join(sorted(shared))} {row.url_path} '
                    f'(same path and method)')
    return None


def check_channel_routes(conn: Connection, declared: dict[str, str]) -> None:
    """ConfigError naming the file and channel if one of the declared channels clashes with another."""
    for name, where in declared.items():
        row = conn.execute(select(RestChannel.url_path, RestChannel.methods).where(RestChannel.name == name)).first()
        if row is None:
            continue
        clash = channel_clash(conn, name, row.url_path, parse_methods(row.methods))
        if clash is not None:
            raise ConfigError(where, clash)


def topic_missing(conn: Connection, topic: str) -> bool:
    """Whether a subscription to topic names a topic that does not exist (patterns never do)."""
    if is_pattern(topic) or topic.startswith(SERVICE_TOPIC_PREFIX) or normalize(topic) in RUNTIME_TOPICS:
        return False
    return conn.execute(select(Topic.id).where(Topic.name_key == normalize(topic))).first() is None


def service_users(conn: Connection, service: str) -> list[str]:
    """Every channel, job, subscription, topic hook and file channel that names a service, described for a person."""
    users = [f'channel {r.name!r}' for r in conn.execute(
        select(RestChannel.name).where(RestChannel.service == service).order_by(RestChannel.name)).all()]
    users += [f'job {r.name!r}' for r in conn.execute(
        select(Job.name).where(or_(Job.service == service, Job.on_success == service, Job.on_error == service))
        .order_by(Job.name)).all()]
    users += [f'subscription #{r.id} to {r.pattern!r}' for r in conn.execute(
        select(Subscription.id, Subscription.pattern).where(Subscription.service == service,
                                                            Subscription.origin != 'service')
        .order_by(Subscription.id)).all()]
    users += [f'topic {r.name!r} (hook service)' for r in conn.execute(
        select(Topic.name).where(Topic.hook_service == service).order_by(Topic.name)).all()]
    users += [f'file channel {r.name!r}' for r in conn.execute(
        select(FileChannelRow.name, FileChannelRow.definition).order_by(FileChannelRow.name)).all()
        if names_service(r.definition, service)]
    return users


def names_service(definition: str, service: str) -> bool:
    """Whether a file channel's stored definition (JSON) invokes the service."""
    try:
        values = json.loads(definition)
    except ValueError:
        return False
    return isinstance(values, dict) and values.get('service') == service

"""The pub/sub sections of the object files: ``pubsub_topic``, ``outgoing_rest`` and ``pubsub_subscription``.

Topics are matched by name, service subscriptions by (service, topic), REST push subscriptions
by (security, topic, endpoint name); objects the files no longer declare are removed if those files
made them (``runtime.objects.applier``: each object belongs to the file that declared it). A subscription
to a topic name (not a pattern) that does not exist is refused, naming the file and the topic.
A subscription's delivery options (e.g. ``max_attempts``, ``wait_non_sock_err``,
``err_should_block``, ``delivery_batch_size``, ``wrap_one_msg_in_list``) sit beside its other keys.

REST push subscribers are declared as in Zato's enmasse files: an ``outgoing_rest`` definition
(``name, host, url_path, data_format: json, timeout``, and for Basic Auth ``username`` with
``password: ${CONDUIT_SECRET_...}``), and a ``pubsub_subscription`` with ``delivery_type: push`` and
``push_rest_endpoint`` naming it. ``outgoing_rest`` definitions are not stored on their own:
each subscription that references one gets the endpoint's URL, timeout and credentials copied into
its row when the files are applied (the files are always applied whole, so a changed endpoint
updates its subscriptions). The password is kept only as its ``${CONDUIT_SECRET_...}`` reference
and read from the environment at each delivery, never stored; a literal password, or a reference to
a variable without that prefix, is refused (``runtime.security.secret_refs``). ``security`` on an
``outgoing_rest`` is refused too: security definitions keep only password hashes, which cannot
authenticate an outgoing request. Definitions no subscription references are checked for a name
and otherwise ignored (Conduit has no other use for them yet).

File subscribers (``runtime.pubsub.subscribers.file``) are ``pubsub_subscription`` items with
``delivery_type: file`` and ``file_target`` (``file:///abs/dir`` or ``sftp://user@host:port/abs/dir``),
their ``file_*`` options beside it (``file_format``, ``file_per``, ``file_name``,
``file_csv_columns``, and for SFTP ``file_password`` or ``file_private_key`` as
``${CONDUIT_SECRET_...}`` references and ``file_host_key`` or ``file_known_hosts``). The target
identifies the subscription: an item whose target changes declares another subscriber (the old
one goes, with its queue). ``file_*`` options on any other kind of subscription are refused.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, delete, select

from runtime.config import PubSubSection
from runtime.db.models import BasicAuthDef, PubSubPermission, Subscription, Topic
from runtime.errors import ConfigError, InvalidPermission
from runtime.objects import zato_keys
from runtime.objects.applier import DELETE, Scope, SectionHandler
from runtime.objects.checks import topic_missing
from runtime.pubsub import statements
from runtime.pubsub.catalog import SYNC_KEY
from runtime.pubsub.kinds import Kinds
from runtime.pubsub.options import DeliveryOptions
from runtime.pubsub.permission_admin import security_exists
from runtime.pubsub.permissions import SYNC_KEY as PERMISSIONS_KEY
from runtime.pubsub.permissions import parse_grant
from runtime.pubsub.registry import (
    KIND_SERVICE,
    TOPIC_ATTRIBUTES,
    TopicInfo,
    check_topic_attributes,
    parse_options,
)
from runtime.pubsub.subscribers import KIND_FILE, KIND_PULL, KIND_REST_PUSH
from runtime.pubsub.topics import InvalidTopicName, normalize, validate_pattern, validate_topic_name
from runtime.security import secret_refs
from runtime.util.urls import shown_target

#: Keys of a pubsub_subscription item that are not delivery options.
_SUB_KEYS = {'name', 'service', 'push_service', 'security', 'topic_list', 'delivery_type', 'is_active',
             'push_rest_endpoint', 'rest_push_endpoint', 'file_target', '_file'}


_DEFAULT_TOPIC = TopicInfo(0, '')


def _where(item: dict[str, Any], section: str) -> str:
    return f'{item["_file"]} [{section}] {zato_keys.label(item)}'


def apply_topics(conn: Connection, items: list[dict[str, Any]], scope: Scope) -> None:
    """Section pubsub_topic."""
    declared = set()
    for item in items:
        where = _where(item, 'pubsub_topic')
        name = item.get('name')
        try:
            validate_topic_name(name)
        except InvalidTopicName as e:
            raise ConfigError(where, str(e)) from None
        given = check_topic_attributes({k: v for k, v in item.items() if k not in ('name', '_file')}, where)
        # Attributes left out of the file return to their defaults when the file is re-applied.
        attrs = {k: getattr(_DEFAULT_TOPIC, k) for k in TOPIC_ATTRIBUTES} | given
        key = normalize(name)
        if key in declared:
            raise ConfigError(where, 'topic declared twice')
        declared.add(key)
        exists = conn.execute(select(Topic.id).where(Topic.name_key == key)).first()
        if exists:
            scope.upsert(conn, 'topic', Topic, 'name_key', key, {'name': name, **attrs}, item['_file'], label=name)
        else:
            statements.create_topic(conn, name, attrs, origin='config')
            scope.set_owner(conn, Topic, Topic.name_key == key, item['_file'])
            scope.record('create', 'topic', name, item['_file'])
    for row in scope.stale(conn, Topic):
        if row.name_key not in declared:
            conn.execute(delete(Topic).where(Topic.id == row.id))
            scope.record(DELETE, 'topic', row.name, row.owner)


def _endpoint_options(endpoint: dict[str, Any], where: str, kinds: Kinds) -> tuple[str, dict[str, Any]]:
    """An outgoing_rest definition as a push subscription uses it: its URL and delivery options."""
    if endpoint.get('security'):
        raise ConfigError(where, 'security definitions keep only password hashes and cannot authenticate '
                                 'outgoing requests; give username and password: ${CONDUIT_SECRET_...} instead')
    if str(endpoint.get('data_format') or 'json').lower() != 'json':
        raise ConfigError(where, 'REST push sends JSON: data_format must be json')
    host = endpoint.get('host')
    if not isinstance(host, str) or not host:
        raise ConfigError(where, "'host' is required")
    path = endpoint.get('url_path') or ''
    if not isinstance(path, str):
        raise ConfigError(where, 'url_path must be a string')
    url = host.rstrip('/') + ('/' + path.lstrip('/') if path else '')
    # The REST push kind's own check of a URL, naming the endpoint rather than a subscription using it.
    kinds.plugin(KIND_REST_PUSH).check(where, '', url, DeliveryOptions())
    options: dict[str, Any] = {'push_rest_endpoint': endpoint['name']}
    timeout = endpoint.get('timeout')
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigError(where, 'timeout must be a number of seconds above 0')
        options['push_timeout_secs'] = timeout
    username, password = endpoint.get('username'), endpoint.get('password')
    if password is not None:
        # The value would have to be stored to be sent later: only a reference may be.
        secret_refs.reference_name(password, 'password', where)
        if not username:
            raise ConfigError(where, 'password needs username')
        options['push_password'] = password.strip()
    if username:
        options['push_username'] = str(username)
    return url, options


def make_outgoing_rest_handler(endpoints: dict[str, dict[str, Any]]):  # type: ignore[no-untyped-def]
    """The handler of section outgoing_rest: it fills endpoints for the subscription handler, run next."""

    def apply_outgoing_rest(conn: Connection, items: list[dict[str, Any]], scope: Scope) -> None:
        endpoints.clear()
        for item in items:
            where = _where(item, 'outgoing_rest')
            name = item.get('name')
            if not isinstance(name, str) or not name:
                raise ConfigError(where, "'name' is required")
            if name in endpoints:
                raise ConfigError(where, 'declared twice')
            endpoints[name] = item

    return apply_outgoing_rest


def _subscription_kind(item: dict[str, Any], where: str) -> tuple[str, str, str]:
    """(kind, service, push_rest_endpoint) of a pubsub_subscription item."""
    service = item.get('service') or item.get('push_service') or ''
    endpoint = item.get('push_rest_endpoint') or item.get('rest_push_endpoint') or ''
    if service and endpoint:
        raise ConfigError(where, 'give either push_service (a service subscriber) or push_rest_endpoint, not both')
    delivery_type = item.get('delivery_type', 'push' if service or endpoint else 'pull')
    if delivery_type not in ('push', 'pull', KIND_FILE):
        raise ConfigError(where, f"delivery_type must be 'push', 'pull' or 'file', not {delivery_type!r}")
    if delivery_type == KIND_FILE:
        if service or endpoint:
            raise ConfigError(where, 'a file subscription has no push_service or push_rest_endpoint')
        if not isinstance(item.get('file_target'), str) or not item['file_target']:
            raise ConfigError(where, 'a file subscription needs file_target: file:///abs/dir or '
                                     'sftp://user@host:port/abs/dir')
        return KIND_FILE, '', ''
    if 'file_target' in item:
        raise ConfigError(where, 'file_target is for subscriptions with delivery_type: file')
    if delivery_type == 'pull':
        if service or endpoint:
            raise ConfigError(where, 'a pull subscription has no push_service or push_rest_endpoint')
        if not item.get('security'):
            raise ConfigError(where, 'a pull subscription needs the security definition of its client')
        return KIND_PULL, '', ''
    if not service and not endpoint:
        raise ConfigError(where, 'a push subscription needs push_service (a service) or push_rest_endpoint '
                                 '(an outgoing_rest definition)')
    return (KIND_SERVICE, str(service), '') if service else (KIND_REST_PUSH, '', str(endpoint))


def make_apply_subscriptions(settings: PubSubSection, kinds: Kinds,  # type: ignore[no-untyped-def]
                             endpoints: dict[str, dict[str, Any]] | None = None):
    """The handler of section pubsub_subscription (each subscription checked by its kind, over the server defaults)."""
    endpoints = {} if endpoints is None else endpoints

    def apply_subscriptions(conn: Connection, items: list[dict[str, Any]], scope: Scope) -> None:
        registry = statements.load_registry(conn, settings, kinds.options)
        declared: set[int] = set()
        for item in items:
            where = _where(item, 'pubsub_subscription')
            kind, service, endpoint_name = _subscription_kind(item, where)
            security = str(item.get('security') or '')
            topics = item.get('topic_list') or []
            if isinstance(topics, str):
                topics = [topics]
            if not topics:
                raise ConfigError(where, 'topic_list is required')
            options = {k: v for k, v in item.items() if k not in _SUB_KEYS}
            push_url = ''
            is_active = bool(item.get('is_active', True))
            if kind == KIND_REST_PUSH:
                endpoint = endpoints.get(endpoint_name)
                if endpoint is None:
                    raise ConfigError(where, f'push_rest_endpoint {endpoint_name!r} is not an outgoing_rest '
                                             'definition of the object files')
                push_url, endpoint_options = _endpoint_options(endpoint, _where(endpoint, 'outgoing_rest'), kinds)
                options = endpoint_options | options  # the subscription's own options win
                options['push_rest_endpoint'] = endpoint_name
                is_active = is_active and bool(endpoint.get('is_active', True))
            if kind == KIND_FILE:
                push_url = item['file_target']
            kinds.check(settings, kind, where, service, push_url, options)
            for pattern in topics:
                try:
                    validate_pattern(pattern)
                except InvalidTopicName as e:
                    raise ConfigError(where, str(e)) from None
                if topic_missing(conn, pattern):
                    raise ConfigError(where, f'topic {pattern!r} does not exist (declare it in [pubsub_topic] '
                                             'or create it first)')
                existing = _existing(conn, kind, service, security, pattern, endpoint_name, push_url)
                values = {'options': json.dumps(options), 'is_active': is_active}
                if kind == KIND_REST_PUSH:
                    values['push_url'] = push_url
                label = _label(kind, service, security, endpoint_name, pattern, push_url)
                if existing is not None:
                    declared.add(existing)
                    scope.upsert(conn, 'subscription', Subscription, 'id', existing, values, item['_file'], label)
                else:
                    sub_id, _ = statements.create_subscription(
                        conn, registry, kinds, pattern, kind, service=service, security=security, push_url=push_url,
                        options=options, origin='config', is_active=is_active)
                    scope.set_owner(conn, Subscription, Subscription.id == sub_id, item['_file'])
                    scope.record('create', 'subscription', label, item['_file'])
                    declared.add(sub_id)
        for row in scope.stale(conn, Subscription):
            if row.id not in declared:
                statements.delete_subscription(conn, row.id)
                endpoint = parse_options(row.options).get('push_rest_endpoint', '')
                scope.record(DELETE, 'subscription',
                             _label(row.kind, row.service, row.security, endpoint, row.pattern, row.push_url),
                             row.owner)

    return apply_subscriptions


def _label(kind: str, service: str, security: str, endpoint: str, pattern: str, push_url: str = '') -> str:
    """A subscription as a person names it: its subscriber and its topic."""
    subscriber = shown_target(push_url) if kind == KIND_FILE else service or endpoint or security
    return f'{kind} {subscriber} -> {pattern}'


def _existing(conn: Connection, kind: str, service: str, security: str, pattern: str, endpoint: str,
              push_url: str = '') -> int | None:
    """The id of the subscription an item declares, if it exists (its queue is kept)."""
    rows = conn.execute(select(Subscription.id, Subscription.options, Subscription.push_url).where(
        Subscription.kind == kind, Subscription.service == service, Subscription.security == security,
        Subscription.pattern == pattern)).all()
    for row in rows:
        # REST push: the endpoint's name, not its URL, identifies the subscription, so that moving
        # the endpoint to another host keeps the queue.
        if kind == KIND_FILE:
            if row.push_url == push_url:  # a file subscriber is its target
                return row.id
        elif kind != KIND_REST_PUSH or parse_options(row.options).get('push_rest_endpoint') == endpoint:
            return row.id
    return None


def apply_permissions(conn: Connection, items: list[dict[str, Any]], scope: Scope) -> None:
    """Section ``pubsub_permission``: ``{security, pub: [...], sub: [...]}`` per definition.

    ``pub`` and ``sub`` may also be given as text with one name or pattern a line, and Zato 3's
    ``pub=``/``sub=`` lines as ``patterns``. Runs after the ``security`` section, in the same
    transaction, so the definitions it names are those the files declare now.
    """
    declared: set[str] = set()
    for item in items:
        security = item.get('security')
        where = f'{item["_file"]} [pubsub_permission] {security!r}'
        if not isinstance(security, str) or not security:
            raise ConfigError(where, "'security' is required")
        if security in declared:
            raise ConfigError(where, 'permissions of this security definition are declared twice')
        declared.add(security)
        unknown = sorted(set(item) - {'security', 'pub', 'sub', 'patterns', '_file'})
        if unknown:
            raise ConfigError(where, f'unknown key(s): {", ".join(unknown)}')
        try:
            pub, sub = parse_grant(item)
        except InvalidPermission as e:
            raise ConfigError(where, str(e)) from None
        if not security_exists(conn, security):
            raise ConfigError(where, f'security definition {security!r} does not exist')
        scope.upsert(conn, 'permission', PubSubPermission, 'security', security,
                     {'pub': json.dumps(pub), 'sub': json.dumps(sub)}, item['_file'])
    for row in scope.stale(conn, PubSubPermission):
        if row.security not in declared:
            conn.execute(delete(PubSubPermission).where(PubSubPermission.id == row.id))
            scope.record(DELETE, 'permission', row.security, row.owner)
    # Permissions of definitions that are gone must not pass to a new definition of the same name.
    conn.execute(delete(PubSubPermission).where(PubSubPermission.security.not_in(select(BasicAuthDef.name))))


def section_handlers(settings: PubSubSection, kinds: Kinds) -> list[SectionHandler]:
    """Handlers to register with the ObjectsApplier after 'security', in order (outgoing_rest before
    pubsub_subscription; pubsub_permission names security definitions)."""
    endpoints: dict[str, dict[str, Any]] = {}
    return [SectionHandler('pubsub_topic', apply_topics, (SYNC_KEY,)),
            SectionHandler('outgoing_rest', make_outgoing_rest_handler(endpoints)),
            SectionHandler('pubsub_subscription', make_apply_subscriptions(settings, kinds, endpoints), (SYNC_KEY,)),
            SectionHandler('pubsub_permission', apply_permissions, (PERMISSIONS_KEY,))]

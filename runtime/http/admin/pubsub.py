"""The admin API of publish/subscribe: topics, subscriptions and publishing.

- ``/admin/topics`` (GET, POST) and ``/admin/topics/{name}`` (GET with runtime details, PATCH,
  DELETE); a name may hold ``/``, e.g. ``/admin/topics//zato/s/to/crm_customer_new``.
- ``/admin/subscriptions`` (GET, POST) and ``/admin/subscriptions/{id}`` (GET, PATCH, DELETE),
  ``.../pause``, ``.../resume``. Subscriptions are named by their numeric id: the sub_key is a
  secret and is only returned once, when the subscription is created. A file subscription
  (kind ``file``) has its target in ``push_url`` (``file:///abs/dir`` or ``sftp://user@host/abs/dir``)
  and its ``file_*`` options; its view also shows ``target`` (never a credential: the options hold
  ``${CONDUIT_SECRET_...}`` references only). A WebSocket subscription also shows its client
  (``client``: connected, worker, peer, window, in flight, last activity);
  ``/admin/pubsub/websockets`` (``runtime.http.admin.websockets``) lists them all.
- ``/admin/queues/...``: queues and dead letters are in ``runtime.http.admin.queues``.
- ``POST /admin/publish``: publish on behalf of a service or a security definition.

Every change is written to the database with the ``pubsub`` sync key bumped in the same
transaction, so every worker of every server reloads it within ``sync.interval_secs``; this
worker reloads at once. The work is done by ``runtime.pubsub.topic_admin``,
``runtime.pubsub.subscription_admin``, the catalog (subscribing, pausing) and
``runtime.pubsub.queue_admin``; input checks are in
``runtime.http.admin.input``, and how a subscription is shown (queues use it too) in
``runtime.http.admin.subscription_views``. Topics, subscriptions and publishing share the schemas
below.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

import falcon

from runtime.errors import (
    BadRequest,
    ConfigError,
    InvalidInput,
)
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.admin.input import MAX_DB_INT, Body, check_data, check_numbers, has_bad_chars
from runtime.http.admin.lookups import security_exists
from runtime.http.admin.subscription_views import SUBSCRIPTION, sub_details, sub_views
from runtime.http.openapi import (
    ANY,
    BOOL,
    INT,
    STR,
    TIME,
    arr,
    integer,
    obj,
    operation,
    query,
    string,
)
from runtime.pubsub.queue_statements import MAX_PAGE
from runtime.pubsub.registry import TopicInfo, check_topic_attributes
from runtime.pubsub.subscribers import SUBSCRIBER_KINDS
from runtime.pubsub.topics import validate_pattern, validate_topic_name
from runtime.util.timefmt import iso

#: Default and largest number of last publications in a topic's details.
DEFAULT_LAST = 10
MAX_LAST = 100


# Views


def _topic_view(topic: TopicInfo, row: Any) -> dict[str, Any]:
    view = asdict(topic)
    view['origin'] = row.origin if row else 'api'
    view['created_at_iso'] = iso(row.created_at) if row else None
    return view


# OpenAPI schemas

_TOPIC_ATTR_SCHEMAS: dict[str, dict[str, Any]] = {}
for _f in fields(TopicInfo):
    if _f.name in ('id', 'name', 'is_service_topic'):
        continue
    if isinstance(_f.default, bool):
        _TOPIC_ATTR_SCHEMAS[_f.name] = BOOL
    elif isinstance(_f.default, int):
        _TOPIC_ATTR_SCHEMAS[_f.name] = integer(100 if _f.name == 'depth_check_freq' else 0, MAX_DB_INT)
    else:
        _TOPIC_ATTR_SCHEMAS[_f.name] = string(200)
_TOPIC_ATTR_SCHEMAS['on_no_subs'] = {'enum': ['accept', 'drop']}
_TOPIC_ATTR_SCHEMAS['on_max_depth'] = {'enum': ['overflow', 'reject']}

#: Printable ASCII but '#', no space at either end (wildcards are refused for topics, allowed in patterns).
_NAME_PATTERN = r'^[!-"$-~]([ -"$-~]*[!-"$-~])?$'
TOPIC_NAME = string(200, 1, pattern=_NAME_PATTERN,
                    description='A topic name: ASCII, no # or wildcards, no whitespace at either end')
TOPIC = obj({'id': INT, 'name': STR, 'is_service_topic': BOOL, 'origin': STR, 'created_at_iso': TIME,
             **{k: ANY for k in _TOPIC_ATTR_SCHEMAS}}, required=['id', 'name'], additional=True)
#: The kinds and delivery options the API describes: those Conduit registers (runtime.pubsub.subscribers).
KINDS = SUBSCRIBER_KINDS.names
_OPTION_SCHEMAS = {name: (BOOL if isinstance(default, bool) else
                          {'type': 'number', 'minimum': 0} if isinstance(default, (int, float)) else string(1000))
                   for name, default in SUBSCRIBER_KINDS.options.defaults().items()}
OPTIONS = obj(_OPTION_SCHEMAS, description='Delivery options overriding the [pubsub] defaults')
#: A topic name in a path: it may hold '/', sent as it is or as %2F (/admin/topics//customer/new).
_TOPIC_PARAM = {'name': 'name', 'in': 'path', 'required': True, 'schema': string(200, 1),
                'description': "A topic name; it may contain '/', e.g. /admin/topics//customer/new"}
_T = ['admin: pub/sub']


class _PubSubResource(AdminResource):
    """A resource of topics and subscriptions: the catalog and the pub/sub administration layer."""

    def __init__(self, parts: AdminParts) -> None:
        self._parts = parts
        self._catalog = parts.catalog
        self._topics = parts.topic_admin
        self._subs = parts.subscription_admin
        self._queues = parts.queue_admin


# Topics


class TopicsResource(_PubSubResource):
    """GET /admin/topics: every topic with its depth; POST: create one."""

    openapi = {
        'get': operation('List topics with their depth and subscription count', tags=_T, errors=(400,),
                         description='With limit (and offset, q), a page of topics by name with the last '
                                     'publication time of each; without limit, every topic.',
                         params=[query('q', string(200), 'Only topics whose name contains this (any case)'),
                                 query('limit', integer(1, MAX_PAGE), 'Page size (no limit: every topic)'),
                                 query('offset', integer(0, MAX_DB_INT), 'Topics to skip')],
                         response={'topics': arr(TOPIC), 'total': INT}),
        'post': operation('Create a topic', tags=_T, status=201, errors=(400, 409),
                          body=obj({'name': TOPIC_NAME, **_TOPIC_ATTR_SCHEMAS}, required=['name']),
                          example={'name': 'orders.created', 'has_gd': True, 'on_no_subs': 'accept'},
                          response={'topic': TOPIC}),
    }

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        search = (req.get_param('q') or '').lower()
        if len(search) > 200 or has_bad_chars(search):
            raise InvalidInput('q', 'must be at most 200 printable characters')
        limit = req.get_param_as_int('limit', min_value=1, max_value=MAX_PAGE)
        offset = req.get_param_as_int('offset', min_value=0, max_value=MAX_DB_INT) or 0
        # An offset alone pages too (MAX_PAGE at a time); neither: every topic, with the stats of all at once.
        size = limit if limit is not None else MAX_PAGE if offset else None
        total, listed = self._topics.page(search, size, offset)
        last_pub: dict[int, float] = {}
        if size is None:
            rows, depths = self._queues.topic_stats()
        else:
            rows, depths, last_pub = self._queues.topic_page_stats([t.id for t in listed])
        topics = []
        for topic in listed:
            view = _topic_view(topic, rows.get(topic.id))
            view['depth'] = depths.get(topic.id, {'gd': 0, 'non_gd': 0})
            view['subscriptions'] = len(self._topics.subscribers(topic.name))
            if size is not None:
                view['last_pub_time_iso'] = _last_pub_time(last_pub.get(topic.id),
                                                           self._parts.recent_publications(topic.id))
            topics.append(view)
        resp.media = {'is_ok': True, 'topics': topics, 'total': total}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = Body(req, {'name', *_TOPIC_ATTR_SCHEMAS})
        name = validate_topic_name(body.text('name', required=True))
        attrs = _topic_attrs(body, f'topic {name!r}')
        topic = self._topics.create(name, origin='api', **attrs)
        resp.status = falcon.HTTP_201
        resp.media = {'is_ok': True, 'topic': _topic_view(topic, None)}


def _topic_attrs(body: Body, where: str) -> dict[str, Any]:
    attrs = {k: v for k, v in body.data.items() if k in _TOPIC_ATTR_SCHEMAS}
    for key, value in attrs.items():
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_DB_INT:
            raise InvalidInput(key, f'must be at most {MAX_DB_INT}')
        if isinstance(value, str):
            body.text(key)
    try:
        return check_topic_attributes(attrs, where)
    except ConfigError as e:
        raise BadRequest(str(e)) from None


class TopicResource(_PubSubResource):
    """GET /admin/topics/{name}: attributes and runtime details; PATCH: change attributes; DELETE."""

    openapi = {
        'get': operation('A topic with runtime details: depth, last publications, subscriptions and their queues',
                         tags=_T, errors=(404,),
                         params=[_TOPIC_PARAM, query('last', integer(0, MAX_LAST),
                                                     f'How many last publications (default {DEFAULT_LAST})')],
                         response={'topic': TOPIC, 'depth': obj({'gd': INT, 'non_gd': INT}),
                                   'last_publications': arr(obj(additional=True)),
                                   'last_pub_time_iso': TIME, 'subscriptions': arr(SUBSCRIPTION)}),
        'patch': operation('Change attributes of a topic', tags=_T, errors=(400, 404), params=[_TOPIC_PARAM],
                           body=obj(_TOPIC_ATTR_SCHEMAS), response={'topic': TOPIC}),
        'delete': operation('Delete a topic, the subscriptions to exactly it and the messages waiting in it',
                            tags=_T, errors=(404,), params=[_TOPIC_PARAM],
                            response={'deleted': STR, 'subscriptions_deleted': INT, 'messages_deleted': INT}),
    }

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        topic = self._topics.get(name)
        last = req.get_param_as_int('last', min_value=0, max_value=MAX_LAST)
        last = DEFAULT_LAST if last is None else last
        subs = self._topics.subscribers(topic.name)
        row, depths, stored, stats, rows_by_id = self._queues.topic_details(topic.id, [s.id for s in subs], last)
        publications = _merge_recent(stored, self._parts.recent_publications(topic.id), last)
        resp.media = {'is_ok': True, 'topic': _topic_view(topic, row),
                      'depth': depths.get(topic.id, {'gd': 0, 'non_gd': 0}),
                      'last_publications': publications,
                      'last_pub_time_iso': publications[0]['pub_time_iso'] if publications else None,
                      'subscriptions': sub_views(self._queues, subs, stats, rows_by_id)}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        topic = self._topics.get(name)
        body = Body(req, set(_TOPIC_ATTR_SCHEMAS))
        attrs = _topic_attrs(body, f'topic {topic.name!r}')
        self._topics.update(topic.id, attrs)
        resp.media = {'is_ok': True, 'topic': _topic_view(self._topics.get(topic.name), None)}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        topic = self._topics.get(name)
        counts = self._topics.delete(topic)
        resp.media = {'is_ok': True, 'deleted': topic.name, **counts}


def _last_pub_time(stored: float | None, recent: list[dict[str, Any]]) -> str | None:
    """The newest of a topic's stored publication time and those this worker saw (delivered and swept since)."""
    times = [p['pub_time_iso'] for p in recent if p.get('pub_time_iso')]
    if stored is not None:
        times.append(iso(stored))
    return max(times) if times else None


def _merge_recent(stored: list[dict[str, Any]], recent: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Stored last publications, plus those this worker saw that were delivered (and swept) since."""
    seen = {p['msg_id'] for p in stored}
    merged = stored + [{**p, 'stored': False} for p in recent if p['msg_id'] not in seen]
    for p in stored:
        p['stored'] = True
    merged.sort(key=lambda p: p['pub_time_iso'] or '', reverse=True)
    return merged[:limit]


# Subscriptions


def _options(body: Body, parts: AdminParts, base: dict[str, Any], where: str, kind: str) -> dict[str, Any]:
    given = body.data.get('options')
    if given is None:
        return base
    if not isinstance(given, dict):
        raise InvalidInput('options', 'must be a JSON object of delivery options')
    check_numbers(given, 'options')
    for key, value in given.items():
        if isinstance(value, str) and has_bad_chars(value):
            raise InvalidInput(f'options.{key}', 'must not contain control characters or invalid Unicode')
    options = {**base, **given}
    try:
        parts.catalog.kinds.options.typed(parts.settings.pubsub, kind, options, where)
    except ConfigError as e:
        raise BadRequest(str(e)) from None
    return options


def _check_endpoint(parts: AdminParts, kind: str, service: str, security: str, push_url: str,
                    options: dict[str, Any], where: str) -> None:
    if service and not parts.store.has(service):
        raise InvalidInput('service', f'names no deployed service ({service!r})')
    if security and not security_exists(parts, security):
        raise InvalidInput('security', f'names no security definition ({security!r})')
    refused = parts.catalog.kinds.plugin(kind).refused_field(service, security, push_url)
    if refused is not None:
        raise InvalidInput(*refused)
    try:
        # What the kind itself requires of its fields and options (a file subscription's target, say).
        parts.catalog.check_subscription(kind, where, service, push_url, options)
    except ConfigError as e:
        raise BadRequest(str(e)) from None


_SUB_FIELDS = {'topic', 'kind', 'service', 'security', 'push_url', 'options', 'is_active'}


class SubscriptionsResource(_PubSubResource):
    """GET /admin/subscriptions: every subscription with its queue; POST: subscribe."""

    openapi = {
        'get': operation('List subscriptions with queue depth, oldest message and dead letters', tags=_T, errors=(),
                         params=[query('topic', string(200), 'Only subscriptions whose topic or pattern matches'),
                                 query('kind', {'enum': list(KINDS)}, 'Only subscriptions of this kind')],
                         response={'subscriptions': arr(SUBSCRIPTION)}),
        'post': operation(
            'Subscribe a service, a pull client, a REST push endpoint, a WebSocket client or a file target to a '
            'topic or pattern',
            tags=_T, status=201, errors=(400, 404),
            description='The answer carries the sub_key, a secret shown only here. A file subscription (kind file) '
                        'has its target in push_url: file:///abs/dir or sftp://user@host:port/abs/dir, with its '
                        'file_* options (SFTP credentials as ${CONDUIT_SECRET_...} references only).',
            example={'topic': 'orders.**', 'kind': 'service', 'service': 'conduit.ping',
                     'options': {'max_attempts': 5}},
            body=obj({'topic': string(200, 1, pattern=_NAME_PATTERN,
                                      description='A topic name or a pattern with * and **'),
                      'kind': {'enum': list(KINDS)}, 'service': string(200), 'security': string(200),
                      'push_url': string(1000), 'options': OPTIONS, 'is_active': BOOL}, required=['topic', 'kind']),
            response={'subscription': SUBSCRIPTION, 'sub_key': STR}),
    }

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        subs = self._subs.list(req.get_param('topic'), req.get_param('kind'))
        stats, rows = self._queues.subscription_stats([s.id for s in subs])
        resp.media = {'is_ok': True, 'subscriptions': sub_views(self._queues, subs, stats, rows)}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        parts = self._parts
        body = Body(req, _SUB_FIELDS)
        body.require('topic', 'kind')
        pattern = validate_pattern(body.text('topic', required=True))
        if self._subs.topic_missing(pattern):
            raise InvalidInput('topic', f'names no topic ({pattern!r}): create the topic first, or give a pattern')
        kind = body.text('kind', required=True)
        if kind not in self._catalog.kinds:
            raise InvalidInput('kind', f'must be one of {", ".join(self._catalog.kinds.names)}')
        service, security = body.text('service'), body.text('security')
        push_url = body.text('push_url', max_len=1000)
        where = f'subscription to {pattern!r}'
        options = _options(body, parts, {}, where, kind)
        _check_endpoint(parts, kind, service, security, push_url, options, where)
        is_active = body.flag('is_active') is not False  # read before anything is made: a 400 makes nothing
        try:
            sub = self._catalog.subscribe(pattern, kind, service=service, security=security, push_url=push_url,
                                           options=options, origin='api', is_active=is_active)
        except ConfigError as e:
            raise BadRequest(str(e)) from None
        resp.status = falcon.HTTP_201
        resp.media = {'is_ok': True, 'subscription': sub_details(self._queues, sub), 'sub_key': sub.sub_key}


class SubscriptionResource(_PubSubResource):
    """GET /admin/subscriptions/{id}; PATCH: options, push URL, security, is_active; DELETE: unsubscribe."""

    openapi = {
        'get': operation('A subscription with its queue', tags=_T, errors=(404,),
                         response={'subscription': SUBSCRIPTION}),
        'patch': operation('Change a subscription: delivery options (merged), push_url, security, is_active',
                           tags=_T, errors=(400, 404),
                           body=obj({'options': OPTIONS, 'push_url': string(1000), 'security': string(200),
                                     'is_active': BOOL}),
                           response={'subscription': SUBSCRIPTION}),
        'delete': operation('Unsubscribe: remove a subscription with its queue and dead letters', tags=_T,
                            errors=(404,), response={'deleted': INT}),
    }

    def on_get(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        resp.media = {'is_ok': True, 'subscription': sub_details(self._queues, self._subs.get(sub_id))}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = self._subs.get(sub_id)
        body = Body(req, {'options', 'push_url', 'security', 'is_active'})
        values: dict[str, Any] = {}
        options = self._subs.stored_options(sub.id)
        if 'options' in body:
            options = _options(body, self._parts, options, sub.label, sub.kind)
            values['options'] = json.dumps(options)
        push_url = body.text('push_url', default=sub.push_url, max_len=1000)
        security = body.text('security', default=sub.security)
        _check_endpoint(self._parts, sub.kind, sub.service, security, push_url, options, sub.label)
        if push_url != sub.push_url:
            values['push_url'] = push_url
        if security != sub.security:
            values['security'] = security
        is_active = body.flag('is_active')
        if is_active is not None and is_active != sub.is_active:
            values['is_active'] = is_active
        self._subs.update(sub.id, values)
        resp.media = {'is_ok': True, 'subscription': sub_details(self._queues, self._subs.get(sub.id))}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = self._subs.delete(sub_id)
        resp.media = {'is_ok': True, 'deleted': sub.id}


class _SetActive(_PubSubResource):
    active = True

    def on_post(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = self._subs.get(sub_id)
        self._catalog.set_active(sub.sub_key, self.active)
        resp.media = {'is_ok': True, 'subscription': sub_details(self._queues, self._subs.get(sub.id))}


class PauseResource(_SetActive):
    """POST /admin/subscriptions/{id}/pause: stop delivering (messages still queue)."""

    active = False
    openapi = {'post': operation('Pause delivery of a subscription (publications still queue)', tags=_T,
                                 errors=(404,), response={'subscription': SUBSCRIPTION})}


class ResumeResource(_SetActive):
    """POST /admin/subscriptions/{id}/resume: deliver again."""

    active = True
    openapi = {'post': operation('Resume delivery of a subscription', tags=_T, errors=(404,),
                                 response={'subscription': SUBSCRIPTION})}


# Publishing


class PublishResource(_PubSubResource):
    """POST /admin/publish: publish to a topic or service on behalf of a service or security definition."""

    openapi = {'post': operation(
        'Publish a message on behalf of an endpoint (a service or a security definition)', tags=_T,
        errors=(400, 403, 404, 413, 503),
        description='The endpoint is recorded as the publisher; pub/sub permissions are not checked, as the '
                    'admin may publish anywhere.',
        example={'topic': 'orders.created', 'data': {'order_id': 1}, 'priority': 7, 'service': 'conduit.ping'},
        body=obj({'topic': string(200, 1, pattern=_NAME_PATTERN,
                                  description='A topic name, or a service name (its implicit topic)'),
                  'data': {'description': 'Any JSON value but null'}, 'priority': integer(0, 9),
                  'expiration': {'type': 'number', 'exclusiveMinimum': 0}, 'has_gd': BOOL,
                  'correl_id': string(200), 'in_reply_to': string(200), 'ext_client_id': string(200),
                  'mime_type': string(100), 'service': string(200), 'security': string(200)},
                 required=['topic', 'data']),
        response={'msg_id': STR, 'topic_name': STR, 'overflowed': BOOL})}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        parts = self._parts
        body = Body(req, {'topic', 'data', 'priority', 'expiration', 'has_gd', 'correl_id', 'in_reply_to',
                                   'ext_client_id', 'mime_type', 'service', 'security'})
        target = body.text('topic', required=True, allow_empty=False)
        data = check_data(body.data.get('data'))
        check_numbers(data, 'data')
        service, security = body.text('service'), body.text('security')
        if service and security:
            raise BadRequest('publish on behalf of a service or of a security definition, not both')
        if service and not parts.store.has(service):
            raise InvalidInput('service', f'names no deployed service ({service!r})')
        if security and not security_exists(parts, security):
            raise InvalidInput('security', f'names no security definition ({security!r})')
        publisher = f'service:{service}' if service else f'security:{security}' if security else 'admin'
        msg_id = parts.broker.publish(
            target, data, priority=body.whole('priority', 0, 9, 5), expiration=body.seconds('expiration'),
            has_gd=body.flag('has_gd'), correl_id=body.text('correl_id') or None,
            in_reply_to=body.text('in_reply_to') or None, ext_client_id=body.text('ext_client_id') or None,
            mime_type=body.text('mime_type', max_len=100) or None, publisher=publisher)
        topic = parts.broker.resolve(target)
        resp.media = {'is_ok': True, 'cid': req.context.cid, 'msg_id': str(msg_id), 'topic_name': topic.name,
                      'overflowed': bool(getattr(msg_id, 'overflowed', False))}

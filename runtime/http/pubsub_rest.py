"""The REST pub/sub API for external clients, on Zato 4.1's paths and bodies (plus subscribe and acks).

- ``POST /pubsub/topic/{topic}``: publish ``{data, priority?, expiration?, correl_id?, in_reply_to?,
  ext_client_id?, pub_time?, has_gd?, mime_type?}``; 200 only once the message is stored.
- ``POST /pubsub/subscribe/topic/{topic}``: a pull subscription of the caller (the same one again if
  it exists) → ``{sub_key, queue_depth}``. Only a pull subscription: a body that asks for another
  kind or sets where or how messages go (``kind``, ``push_url``, ``file_target``, ``options``,
  ``file_*``, ...) is refused with 403 and nothing is made (``refuse_subscriber_fields``) — a file
  subscriber writes to the server's disks, a push one makes the server call out: admin only.
- ``POST /pubsub/unsubscribe/topic/{topic}``: ``{sub_key?}``, else every subscription of the caller
  to that topic, with their queues.
- ``POST /pubsub/messages/get``: ``{sub_key?, max_messages?, max_len?, ack?, ack_deadline?, wait?}``;
  without sub_key, all of the caller's pull subscriptions as one queue (runtime.pubsub.subscribers.pull);
  with ``ack: "auto"`` what it hands over is removed only once the answer was written
  (runtime.http.handover); with ``wait``, an empty answer waits up to that many seconds for a
  message to arrive (``runtime.pubsub.watchers``).
- ``POST /pubsub/messages/ack``: ``{sub_key?, ack_ids}`` for messages taken with ``ack: "manual"``.

The caller is any active Basic Auth definition (runtime.security.basic_auth); its name is the subscriber's
identity (``Subscription.security``). Publishing and subscribing need the ``pub`` / ``sub``
permission of the definition (runtime.pubsub.permissions). A sub_key that is not the caller's is
answered exactly like one that does not exist (404), and no answer or log line repeats a sub_key.
Errors are ConduitErrors, turned into ``{is_ok: false, cid, status, details}`` by runtime.http.errors.

Status codes follow Zato 4.1 by default (``pubsub.rest_status_codes = "zato"``), because Zato's
clients check them: a missing ``pub``/``sub`` permission is 401 ``Permission denied``, a pull or
ack by a caller with no subscription is 401 ``No subscription found for user``, unsubscribing when
not subscribed is 200, an inactive topic is 403 ``Topic <name> is inactive``. The log says which
definition lacked which permission. With ``"http"`` the first two are 403 and 404 with details naming
the definition and topic, and unsubscribing when not subscribed is 404.

A publisher's ``pub_time`` is kept verbatim and returned as ``pub_time_iso`` (the server's own
clock orders and expires messages); ``correl_id`` defaults to the request's cid. Zato 4.1's name of
a service topic, ``zato.s.to.<service name>``, is accepted wherever a topic name is: it is the
topic ``/zato/s/to/<name with dots as underscores>``, and a permission for either name grants it.

Topics with ``/`` in their names are sent as they are (``/pubsub/topic//customer/new``) or
percent-encoded: the ``{topic:path}`` field takes the rest of the path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import falcon

from runtime.db.unavailable import storage_errors
from runtime.errors import BadRequest, SubscriptionNotFound
from runtime.http.auth import CALLER
from runtime.http.body import read_json
from runtime.http.handover import HandOver
from runtime.http.pubsub_access import (
    MAX_PUB_TIME_CHARS,
    REALM,
    PubSubParts,
    no_subscription,
    publish_message,
    refuse_subscriber_fields,
    subscription_topic,
    zato_codes,
)
from runtime.pubsub.registry import SubInfo, canonical_topic_name
from runtime.pubsub.subscribers import KIND_PULL, KIND_REST_PUSH, pull
from runtime.pubsub.topics import normalize, validate_topic_name
from runtime.util import json_limits

if TYPE_CHECKING:
    from runtime.security.basic_auth import BasicAuth

_log = logging.getLogger(__name__)


#: Status text of every successful answer (Zato's).
STATUS_OK = '200 OK'

#: Longest a long-polling pull waits between two looks at its queues when nothing wakes it.
RECHECK_SECS = 5.0

#: Longest a worker waits before it reloads its subscriptions for a sub_key it does not know.
RELOAD_AFTER_SECS = 1.0

# OpenAPI pieces shared by the operations below (schemas inline: the spec builder copies them as they are).

_TOPIC_PARAM = {'name': 'topic', 'in': 'path', 'required': True,
                'description': "A topic name: ASCII, at most 200 characters, no '#', no whitespace at either end; "
                               "'/' may be sent as it is or as %2F.",
                'schema': {'type': 'string', 'minLength': 1, 'maxLength': 200,
                           'pattern': '^[!-"$-)+-~]([ -"$-)+-~]*[!-"$-)+-~])?$'}}
_ERROR = {'type': 'object', 'required': ['is_ok', 'cid', 'status', 'details'],
          'properties': {'is_ok': {'const': False}, 'cid': {'type': 'string'}, 'status': {'type': 'string'},
                         'details': {'type': 'string', 'description': 'What is wrong, named'}}}
_OK_FIELDS = {'is_ok': {'const': True}, 'cid': {'type': 'string'}, 'status': {'type': 'string', 'const': STATUS_OK}}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {'description': description, 'content': {'application/json': {'schema': schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {400: 'Malformed JSON, topic name or field (details name it)',
            401: "No or wrong credentials, or an inactive definition (with WWW-Authenticate); with "
                 "pubsub.rest_status_codes 'zato' (the default) also no pub/sub permission ('Permission denied') "
                 "and no subscription ('No subscription found for user')",
            403: "Inactive topic, self-subscription not allowed; with pubsub.rest_status_codes 'http' also no "
                 "pub/sub permission",
            404: "No such topic or sub_key; with pubsub.rest_status_codes 'http' also no subscription",
            413: 'Body or message too large', 503: 'Storage unavailable, or the topic is full (nothing was stored)'}
    return {str(c): _json(_ERROR, text[c]) for c in codes}


def _body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {'required': required, 'content': {'application/json': {'schema': schema}}}


_META = {'type': 'object', 'properties': {
    'topic_name': {'type': 'string'}, 'size': {'type': 'integer'}, 'priority': {'type': 'integer'},
    'expiration': {'type': 'integer', 'description': 'seconds'}, 'msg_id': {'type': 'string'},
    'sub_key': {'type': 'string'}, 'pub_time_iso': {'type': 'string', 'format': 'date-time'},
    'recv_time_iso': {'type': 'string', 'format': 'date-time'},
    'expiration_time_iso': {'type': 'string', 'format': 'date-time'},
    'time_since_pub': {'type': 'string', 'description': 'H:MM:SS.ffffff'},
    'time_since_recv': {'type': 'string', 'description': 'H:MM:SS.ffffff'},
    'correl_id': {'type': 'string'}, 'in_reply_to': {'type': 'string'}, 'ext_client_id': {'type': 'string'},
    'delivery_count': {'type': 'integer'}, 'mime_type': {'type': 'string'},
    'ack_id': {'type': 'string', 'description': 'manual mode only'}}}


def _caller(parts: PubSubParts, req: falcon.Request) -> BasicAuth:
    """The active Basic Auth definition of the caller, or Unauthorized (401)."""
    caller = parts.security.authenticate(req.get_header('Authorization'), realm=REALM)
    req.context.auth_ok = True  # the sign-in throttle remembers the address (runtime.http.auth)
    return caller


def _object_body(parts: PubSubParts, req: falcon.Request) -> dict[str, Any]:
    """The JSON object sent (an empty body is an empty object)."""
    body = read_json(req)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise BadRequest(f'request body must be a JSON object, not {type(body).__name__}')
    return body


def _ok(req: falcon.Request, **fields: Any) -> dict[str, Any]:
    return {'is_ok': True, 'cid': req.context.cid, 'status': STATUS_OK, **fields}


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f'{key!r} must be a number, not {value!r}'[:200])
    if not low <= value <= high:
        raise BadRequest(f'{key!r} must be from {low:g} to {high:g}, not {value!r}')
    return value


class _PubSubResource:
    """Base of the pub/sub resources: their parts, and lookups of topics and the caller's subscriptions."""

    #: Each responder authenticates its caller first (the definition is the subscriber's identity).
    auth = CALLER

    #: OpenAPI 3.1 Operation objects by lower-case HTTP method (read by the /openapi.json builder).
    openapi: dict[str, dict[str, Any]] = {}

    def __init__(self, parts: PubSubParts) -> None:
        self._parts = parts
        self._reloaded_at = 0.0

    def _subs(self, caller: BasicAuth, sub_key: str | None, kinds: tuple[str, ...] = (KIND_PULL,),
              topic: str | None = None) -> list[SubInfo]:
        """The caller's subscriptions of these kinds: the one of sub_key, or all (to topic, if given)."""
        # One made by another worker may not be in this worker's registry yet: look again after a
        # reload, at most once a second, so that forged keys cost little.
        for attempt in range(2):
            registry = self._parts.broker.registry
            if sub_key is not None:
                one = registry.subs_by_key.get(sub_key)
                found = [one] if one is not None else []
            else:
                found = list(registry.subs.values())
            found = [s for s in found if s.security == caller.name and s.kind in kinds
                     and (topic is None or normalize(s.pattern) == normalize(topic))]
            now = time.monotonic()
            if found or attempt or now - self._reloaded_at < RELOAD_AFTER_SECS:
                return sorted(found, key=lambda s: s.id)
            self._reloaded_at = now
            with storage_errors():
                self._parts.broker.reload()
        return []


class PublishResource(_PubSubResource):
    """POST /pubsub/topic/{topic}: publish a message."""

    openapi = {'post': {
        'summary': 'Publish a message to a topic',
        'description': 'Needs the pub permission of the caller for the topic. Answers 200 only once the message '
                       'is stored. Checks run in this order: credentials, topic name, permission, topic exists and '
                       'is active, data.',
        'tags': ['pub/sub'],
        'parameters': [_TOPIC_PARAM],
        'requestBody': _body({'type': 'object', 'required': ['data'], 'properties': {
            'data': {'not': {'type': 'null'}, 'description': 'Any JSON value but null'},
            'priority': {'type': 'integer', 'description': '0-9, default 5; outside 0-9 means 5'},
            'expiration': {'type': 'number', 'description': 'seconds, default 31536000, at least 1, capped by '
                                                            'the topic'},
            'correl_id': {'type': 'string', 'maxLength': 200}, 'in_reply_to': {'type': 'string', 'maxLength': 200},
            'ext_client_id': {'type': 'string', 'maxLength': 200},
            'pub_time': {'type': ['string', 'number'], 'maxLength': MAX_PUB_TIME_CHARS,
                         'description': "The publisher's ISO 8601 time (or Unix time in seconds), returned to "
                                        "subscribers verbatim as pub_time_iso; ordering and expiry use the "
                                        "server's clock"},
            'has_gd': {'type': 'boolean'}, 'mime_type': {'type': 'string', 'maxLength': 100}}}),
        'responses': {'200': _json({'type': 'object', 'required': ['is_ok', 'cid', 'status', 'msg_id'],
                                    'properties': {**_OK_FIELDS, 'msg_id': {'type': 'string', 'pattern': '^zpsm'},
                                                   'overflowed': {'type': 'boolean'}}}, 'Stored'),
                      **_errors(400, 401, 403, 404, 413, 503)},
    }}

    def on_post(self, req: falcon.Request, resp: falcon.Response, topic: str) -> None:
        caller = _caller(self._parts, req)
        resp.media = _ok(req, **publish_message(self._parts, caller, topic, lambda: _object_body(self._parts, req),
                                                req.context.cid))


class SubscribeResource(_PubSubResource):
    """POST /pubsub/subscribe/topic/{topic}: the caller's pull subscription to a topic."""

    openapi = {'post': {
        'summary': 'Subscribe the caller to a topic (pull)',
        'description': "Needs the sub permission and a topic whose is_api_sub_allowed is true. Subscribing again "
                       "returns the caller's existing subscription. Messages are read with /pubsub/messages/get.",
        'tags': ['pub/sub'],
        'parameters': [_TOPIC_PARAM],
        'responses': {'200': _json({'type': 'object', 'required': ['is_ok', 'cid', 'sub_key', 'queue_depth'],
                                    'properties': {**_OK_FIELDS, 'sub_key': {'type': 'string'},
                                                   'queue_depth': {'type': 'integer'}}}, 'Subscribed'),
                      **_errors(400, 401, 403, 404, 503)},
    }}

    def on_post(self, req: falcon.Request, resp: falcon.Response, topic: str) -> None:
        parts = self._parts
        caller = _caller(parts, req)
        refuse_subscriber_fields(_object_body(parts, req), KIND_PULL)
        info = subscription_topic(parts, caller, topic)
        catalog = parts.catalog
        existing = self._subs(caller, None, topic=info.name)
        with storage_errors():
            sub = existing[0] if existing else catalog.subscribe(info.name, KIND_PULL, security=caller.name)
            depth = catalog.queue_depth(sub.sub_key)
        resp.media = _ok(req, sub_key=sub.sub_key, queue_depth=depth)


class UnsubscribeResource(_PubSubResource):
    """POST /pubsub/unsubscribe/topic/{topic}: remove the caller's subscription(s) to a topic."""

    openapi = {'post': {
        'summary': "Remove the caller's subscription to a topic, with its queue",
        'description': "With sub_key, that subscription (it must be the caller's, to this topic); without it, "
                       "every subscription of the caller to the topic. Not subscribed: 200 with unsubscribed 0 "
                       "(404 with pubsub.rest_status_codes 'http').",
        'tags': ['pub/sub'],
        'parameters': [_TOPIC_PARAM],
        'requestBody': _body({'type': 'object', 'properties': {'sub_key': {'type': 'string'}}}, required=False),
        'responses': {'200': _json({'type': 'object', 'required': ['is_ok', 'cid', 'unsubscribed'],
                                    'properties': {**_OK_FIELDS, 'unsubscribed': {'type': 'integer'}}},
                                   'Removed'),
                      **_errors(400, 401, 404, 503)},
    }}

    def on_post(self, req: falcon.Request, resp: falcon.Response, topic: str) -> None:
        parts = self._parts
        caller = _caller(parts, req)
        validate_topic_name(topic)
        sub_key = _object_body(parts, req).get('sub_key')
        if sub_key is not None and not isinstance(sub_key, str):
            raise BadRequest("'sub_key' must be a string")
        subs = self._subs(caller, sub_key or None, (KIND_PULL, KIND_REST_PUSH), topic=canonical_topic_name(topic))
        if not subs and (sub_key or not zato_codes(parts)):
            raise SubscriptionNotFound()  # Zato answers 200 when the caller is not subscribed at all
        with storage_errors():
            for sub in subs:
                parts.catalog.unsubscribe(sub.sub_key)
        resp.media = _ok(req, unsubscribed=len(subs))


class MessagesGetResource(_PubSubResource):
    """POST /pubsub/messages/get: take messages from the caller's pull subscriptions."""

    openapi = {'post': {
        'summary': "Take messages from the caller's pull subscriptions",
        'description': "Without sub_key, every pull subscription of the caller is read as one queue. Order: "
                       "priority high first, then publication. ack 'auto' removes what is returned once the answer "
                       "was written to the connection (a client gone before that gets it again); 'manual' "
                       "leases it for ack_deadline seconds (acknowledge with /pubsub/messages/ack; unacknowledged "
                       "messages come back with their attempt counted). A first message longer than max_len stays "
                       "queued and nothing is returned. A stored message that cannot be rendered as JSON within the "
                       "server's limits goes to the subscription's dead-letter queue (reason 'unrenderable') and the "
                       "others are returned.",
        'tags': ['pub/sub'],
        'requestBody': _body({'type': 'object', 'properties': {
            'sub_key': {'type': 'string'},
            'max_messages': {'type': 'integer', 'minimum': 1, 'default': pull.DEFAULT_MAX_MESSAGES,
                             'description': f'capped at {pull.MAX_MESSAGES}'},
            'max_len': {'type': 'integer', 'minimum': 1, 'default': pull.DEFAULT_MAX_LEN_CHARS,
                        'description': 'total characters of data, capped by the server (pubsub.max_pull_chars)'},
            'ack': {'enum': list(pull.ACK_MODES), 'default': pull.ACK_AUTO},
            'ack_deadline': {'type': 'number', 'minimum': 0.001, 'maximum': pull.MAX_ACK_DEADLINE_SECS,
                             'default': pull.DEFAULT_ACK_DEADLINE_SECS},
            'wait': {'type': 'number', 'minimum': 0, 'default': 0,
                     'description': 'seconds to wait for a message when none is queued: the answer comes as '
                                    'soon as one arrives (at most pubsub.max_pull_wait_secs, 30 by default; 0 '
                                    'answers at once, as Zato does)'},
            'wrap_in_list': {'type': 'boolean', 'default': False,
                             'description': 'Zato: with max_messages 1 and false, the message is also given as '
                                            'top-level data and meta'}}}, required=False),
        'responses': {'200': _json({'type': 'object', 'required': ['is_ok', 'cid', 'message_count', 'messages'],
                                    'properties': {**_OK_FIELDS, 'message_count': {'type': 'integer'},
                                                   'messages': {'type': 'array', 'items': {
                                                       'type': 'object', 'required': ['data', 'meta'],
                                                       'properties': {'data': {}, 'meta': _META}}}}},
                                   'The messages (possibly none)'),
                      **_errors(400, 401, 404, 503)},
    }}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        parts = self._parts
        caller = _caller(parts, req)
        body = _object_body(parts, req)
        sub_key = body.get('sub_key')
        if sub_key is not None and not isinstance(sub_key, str):
            raise BadRequest("'sub_key' must be a string")
        max_messages = body.get('max_messages', pull.DEFAULT_MAX_MESSAGES)
        max_len = body.get('max_len', pull.DEFAULT_MAX_LEN_CHARS)
        for key, value in (('max_messages', max_messages), ('max_len', max_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BadRequest(f'{key!r} must be a whole number of at least 1')
        mode = body.get('ack', pull.ACK_AUTO)
        if mode not in pull.ACK_MODES:
            raise BadRequest(f"'ack' must be 'auto' or 'manual', not {mode!r}"[:200])
        deadline = _number(body, 'ack_deadline', pull.DEFAULT_ACK_DEADLINE_SECS, 0.001, pull.MAX_ACK_DEADLINE_SECS)
        subs = self._subs(caller, sub_key or None)
        if not subs:
            raise SubscriptionNotFound() if sub_key else no_subscription(parts)
        active = [s for s in subs if s.is_active]  # a paused subscription keeps its messages
        wait = _number(body, 'wait', 0.0, 0.0, parts.settings.pubsub.max_pull_wait_secs)
        count, chars = min(max_messages, pull.MAX_MESSAGES), min(max_len, _max_pull_chars(parts))

        def look() -> tuple[list[pull.Pulled], pull.Held | None]:
            if mode == pull.ACK_MANUAL:
                return pull.take(parts.broker, active, count, chars, deadline, parts.permissions.may_read), None
            # auto: acknowledged once the answer was written (runtime.http.handover)
            held = pull.hold(parts.broker, active, count, chars, parts.permissions.may_read)
            return held.pulled, held

        if not active:
            pulled, held = [], None
        elif wait > 0:
            pulled, held = _long_poll(parts, active, wait, look)
        else:
            pulled, held = look()
        # Each message was rendered before it left the queue (or was leased); the answer only joins
        # those texts, so nothing can fail once they are gone.
        parts = [json_limits.render(_ok(req, message_count=len(pulled)))[:-1],
                 b',"messages":[', b','.join(p.text for p in pulled), b']']
        if max_messages == 1 and len(pulled) == 1 and not body.get('wrap_in_list'):
            parts += [b',', pulled[0].text[1:-1]]  # Zato 4.1 answers a single message as top-level data and meta
        parts.append(b'}')
        answer = b''.join(parts)
        resp.content_type = falcon.MEDIA_JSON
        if held is None or not pulled:
            resp.data = answer
        else:
            resp.stream = HandOver(answer, held, req.env.get('gunicorn.socket'))
            resp.content_length = len(answer)


def _long_poll(parts: PubSubParts, subs: list[SubInfo], wait: float,
               look: Callable[[], tuple[list[pull.Pulled], pull.Held | None]],
               ) -> tuple[list[pull.Pulled], pull.Held | None]:
    """Look for messages until some are there or wait seconds have passed; what look found last.

    The queues are watched before the first look, so that a message queued between a look and the
    wait wakes it. A message that comes back without being queued anew (its ack deadline passed, a
    retry came due) is seen on the next look, at most ``RECHECK_SECS`` later.
    """
    watchers = parts.broker.watchers
    deadline = time.monotonic() + wait
    with watchers.watch(s.id for s in subs) as woken:
        while True:
            pulled, held = look()
            left = deadline - time.monotonic()
            if pulled or left <= 0 or watchers.closed:
                return pulled, held
            woken.wait(min(left, RECHECK_SECS))
            woken.clear()


def _max_pull_chars(parts: PubSubParts) -> int:
    """Most characters of data one pull answer carries: the configured cap, never below one whole message."""
    pubsub = parts.settings.pubsub
    # A message larger than the cap would stay at the head of its queue for ever.
    return max(pubsub.max_pull_chars, pubsub.max_message_size)


class MessagesAckResource(_PubSubResource):
    """POST /pubsub/messages/ack: acknowledge messages taken with ack 'manual'."""

    openapi = {'post': {
        'summary': 'Acknowledge messages taken in manual mode',
        'description': "Removes the messages leased under ack_ids from the caller's queues (one subscription with "
                       "sub_key, else all of the caller's). An ack_id whose lease ran out and was handed over again "
                       "is reported in not_found.",
        'tags': ['pub/sub'],
        'requestBody': _body({'type': 'object', 'required': ['ack_ids'], 'properties': {
            'sub_key': {'type': 'string'},
            'ack_ids': {'type': 'array', 'minItems': 1, 'maxItems': pull.MAX_ACK_IDS, 'items': {'type': 'string'}}}}),
        'responses': {'200': _json({'type': 'object', 'required': ['is_ok', 'cid', 'acked', 'not_found'],
                                    'properties': {**_OK_FIELDS, 'acked': {'type': 'integer'},
                                                   'not_found': {'type': 'array', 'items': {'type': 'string'}}}},
                                   'Acknowledged'),
                      **_errors(400, 401, 404, 503)},
    }}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        parts = self._parts
        caller = _caller(parts, req)
        body = _object_body(parts, req)
        sub_key = body.get('sub_key')
        if sub_key is not None and not isinstance(sub_key, str):
            raise BadRequest("'sub_key' must be a string")
        ack_ids = body.get('ack_ids')
        if (not isinstance(ack_ids, list) or not ack_ids or len(ack_ids) > pull.MAX_ACK_IDS
                or not all(isinstance(a, str) and a for a in ack_ids)):
            raise BadRequest(f"'ack_ids' must be a list of 1 to {pull.MAX_ACK_IDS} ack_id strings")
        subs = self._subs(caller, sub_key or None)
        if not subs:
            raise SubscriptionNotFound() if sub_key else no_subscription(parts)
        wanted = list(dict.fromkeys(ack_ids))
        # Only ack_ids as this server makes them can match: others (a NUL, megabytes) never reach SQL.
        acked = pull.ack(parts.broker, subs, [a for a in wanted if pull.is_ack_id(a)])
        resp.media = _ok(req, acked=len(acked), not_found=[a for a in wanted if a not in acked])


def routes(parts: PubSubParts) -> dict[str, Any]:
    """The pub/sub API's routes, for runtime.http.app.make_app."""
    return {
        '/pubsub/topic/{topic:path}': PublishResource(parts),
        '/pubsub/subscribe/topic/{topic:path}': SubscribeResource(parts),
        '/pubsub/unsubscribe/topic/{topic:path}': UnsubscribeResource(parts),
        '/pubsub/messages/get': MessagesGetResource(parts),
        '/pubsub/messages/ack': MessagesAckResource(parts),
    }

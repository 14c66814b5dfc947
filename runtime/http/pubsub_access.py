"""What the pub/sub client APIs share: the REST API (``runtime.http.pubsub_rest``) and the WebSocket
endpoint (``runtime.http.websocket``) publish, check permissions and find the topics callers
subscribe to the same way, with the same errors in the same order.

A caller is an authenticated Basic Auth definition; its ``pub``/``sub`` permissions decide
(runtime.pubsub.permissions). With ``pubsub.rest_status_codes = "zato"`` (the default) a missing
permission is Zato 4.1's 401 ``Permission denied`` and the log says which definition lacked which
permission; with ``"http"`` it is a 403 naming both.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

from runtime.db.unavailable import storage_errors
from runtime.errors import (
    AccessDenied,
    ConduitError,
    Forbidden,
    InvalidMessage,
    NoSubscription,
    PermissionDenied,
    TopicInactive,
    TopicNotFound,
)
from runtime.http.auth import CALLER_REALM
from runtime.pubsub.permissions import PUB, SUB
from runtime.pubsub.registry import (
    SERVICE_TOPIC_PREFIX,
    TopicInfo,
    aliased_service,
    canonical_topic_name,
    service_topic_name,
)
from runtime.pubsub.topics import normalize, validate_topic_name
from runtime.util.timefmt import iso

if TYPE_CHECKING:
    from runtime.config import Settings
    from runtime.pubsub.broker import Broker
    from runtime.pubsub.catalog import Catalog
    from runtime.pubsub.permissions import Permissions
    from runtime.security.basic_auth import BasicAuth, SecurityRegistry
    from runtime.service.store import ServiceStore

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PubSubParts:
    """What the pub/sub client APIs (the REST resources, the WebSocket sessions) work with."""

    settings: Settings
    #: The Basic Auth definitions: a caller is one of them.
    security: SecurityRegistry
    #: The callers' pub=/sub= permissions.
    permissions: Permissions
    #: Publishes; its registry names the topics and subscriptions; pulls read its queues.
    broker: Broker
    #: Makes service topics and subscriptions, and removes subscriptions.
    catalog: Catalog
    #: The services deployed in this worker (a publication may name one).
    store: ServiceStore


#: Realm of the Basic Auth challenge of the pub/sub APIs.
REALM = CALLER_REALM

#: pubsub.rest_status_codes: Zato 4.1's codes and texts (the default), or stricter HTTP.
ZATO_CODES = 'zato'

#: Zato 4.1's texts of its 401 answers to valid credentials.
PERMISSION_DENIED = 'Permission denied'
NO_SUBSCRIPTION = 'No subscription found for user'

#: Longest pub_time a publisher may send (it is stored verbatim).
MAX_PUB_TIME_CHARS = 64

#: Bounds of a publication's expiration, in seconds (the topic may cap it further).
MIN_EXPIRATION_SECS = 1
DEFAULT_PRIORITY = 5


def zato_codes(parts: PubSubParts) -> bool:
    """Whether the answers follow Zato 4.1's status codes and texts (pubsub.rest_status_codes)."""
    return parts.settings.pubsub.rest_status_codes == ZATO_CODES


def check_permission(parts: PubSubParts, caller: BasicAuth, action: str, topic: str) -> None:
    """Raise unless the caller has the permission for topic (given by either of its names)."""
    check: Callable[[str, str], bool] = parts.permissions.can_pub if action == PUB else parts.permissions.can_sub
    if check(caller.name, topic):
        return
    canonical = canonical_topic_name(topic)
    if canonical != topic and check(caller.name, canonical):
        return
    _refuse(parts, caller, action, topic)


def check_pattern_permission(parts: PubSubParts, caller: BasicAuth, pattern: str) -> None:
    """Raise unless one of the caller's ``sub`` entries covers every topic the pattern matches."""
    if not parts.permissions.can_sub_pattern(caller.name, pattern):
        _refuse(parts, caller, SUB, pattern)


def _refuse(parts: PubSubParts, caller: BasicAuth, action: str, topic: str) -> NoReturn:
    denied = PermissionDenied(caller.name, action, topic)
    if not zato_codes(parts):
        raise denied
    _log.info('%s (answered 401 %s)', denied, PERMISSION_DENIED)
    raise AccessDenied(REALM, PERMISSION_DENIED)


def no_subscription(parts: PubSubParts) -> ConduitError:
    """The error for a caller with no subscription to read from."""
    return AccessDenied(REALM, NO_SUBSCRIPTION) if zato_codes(parts) else NoSubscription()


def _inactive(parts: PubSubParts, name: str) -> ConduitError:
    """The error for a publication to an inactive topic (403 either way; Zato's text by default)."""
    return TopicInactive(name, f'Topic {name} is inactive' if zato_codes(parts) else None)


#: Fields of a subscribe request that would choose the subscriber's kind, target or delivery options.
_SUBSCRIBER_FIELDS = frozenset({'kind', 'delivery_type', 'push_url', 'file_target', 'service', 'push_service',
                                'options', 'push_rest_endpoint', 'rest_push_endpoint', 'endpoint_type'})
#: Prefixes of delivery options (push_*, file_*) a client may not set either.
_SUBSCRIBER_PREFIXES = ('push_', 'file_')


def refuse_subscriber_fields(body: dict[str, Any], own_kind: str) -> None:
    """Forbidden (403) if a client's subscribe request asks for another kind, a target or delivery options.

    Clients of the pub/sub APIs subscribe themselves, as the kind their API makes (own_kind): file,
    push and service subscribers write to the server's disks, call out or run services, and are made
    by the admin only (admin API, CLI, object files).
    """
    asked = sorted(k for k in body if isinstance(k, str) and (k in _SUBSCRIBER_FIELDS or k.startswith(
        _SUBSCRIBER_PREFIXES)) and not (k in ('kind', 'delivery_type') and body[k] == own_kind))
    if asked:
        shown = ', '.join(repr(k[:40]) for k in asked[:5])
        raise Forbidden(f'{shown}: this API makes {own_kind} subscriptions of the caller only; file, REST push and '
                        f'service subscribers are made by the admin (admin API, CLI or object files)')


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None or value == '':
        return None
    if not isinstance(value, str):
        raise InvalidMessage(key, f'must be a string, not {type(value).__name__}')
    try:
        value.encode('utf-8')
    except UnicodeEncodeError:
        raise InvalidMessage(key, 'is not valid Unicode (it has a lone surrogate)') from None
    if '\x00' in value:
        raise InvalidMessage(key, 'must not contain NUL characters')
    return value


def publish_message(parts: PubSubParts, caller: BasicAuth, topic: str, body: Callable[[], dict[str, Any]],
                    cid: str, channel: str = 'rest') -> dict[str, Any]:
    """Publish for an authenticated caller, with REST's checks in REST's order; the answer's own fields.

    The order is the documented one: topic name, ``pub`` permission, topic exists and is active, then
    the body (read only then, so that a refused publication costs no parsing), then its data. The
    WebSocket channel publishes through this too (the publisher is then ``ws:<definition>``).
    """
    validate_topic_name(topic)
    check_permission(parts, caller, PUB, topic)
    info = publish_topic(parts, topic)
    if not info.is_active:
        raise _inactive(parts, info.name)
    fields = body()
    if fields.get('data') is None:
        raise InvalidMessage('data', 'is required (it is null or missing)')
    options = _publish_options(fields, parts.settings.pubsub.default_expiration_secs)
    if options['correl_id'] is None:
        options['correl_id'] = cid  # as Zato does: the publication is traceable to its request
    with storage_errors():
        msg_id = parts.broker.publish(info.name, fields['data'], publisher=f'{channel}:{caller.name}', **options)
    answer: dict[str, Any] = {'msg_id': str(msg_id)}
    if getattr(msg_id, 'overflowed', False):
        answer['overflowed'] = True
        answer['details'] = 'the topic is at its max depth: the message went to its overflow log'
    return answer


def publish_topic(parts: PubSubParts, name: str) -> TopicInfo:
    """A topic to publish to; a deployed service's topic is made on first use, as in-process publishing does."""
    broker = parts.broker
    topic = broker.registry.topic(name)
    if topic is not None:
        return topic
    service = aliased_service(name)
    if service is None and normalize(name).startswith(SERVICE_TOPIC_PREFIX):
        # /zato/s/to/<name>: dots became underscores, so find the service by its topic's name.
        service = next((s for s in parts.store.names()
                        if normalize(service_topic_name(s)) == normalize(name)), None)
    if service is not None and parts.store.has(service):
        with storage_errors():
            return parts.catalog.ensure_service_topic(service)
    raise TopicNotFound(name)


def subscription_topic(parts: PubSubParts, caller: BasicAuth, topic: str) -> TopicInfo:
    """The topic a caller may subscribe itself to: name, ``sub`` permission, existence, is_api_sub_allowed."""
    validate_topic_name(topic)
    check_permission(parts, caller, SUB, topic)
    info = parts.broker.registry.topic(topic)
    if info is None:
        raise TopicNotFound(topic)
    if not info.is_api_sub_allowed:
        raise Forbidden(f'topic {info.name!r} does not allow subscriptions through the API '
                        f'(is_api_sub_allowed is false)')
    return info


def _publish_options(body: dict[str, Any], default_expiration: float) -> dict[str, Any]:
    """The broker's keyword arguments from a publish body (Zato's leniency for priority and expiration)."""
    priority = body.get('priority', DEFAULT_PRIORITY)
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        priority = DEFAULT_PRIORITY
    expiration = body.get('expiration')
    if expiration is None:
        expiration = default_expiration
    elif isinstance(expiration, bool) or not isinstance(expiration, (int, float)):
        raise InvalidMessage('expiration', f'must be a number of seconds, not {type(expiration).__name__}')
    elif isinstance(expiration, float) and not math.isfinite(expiration):
        raise InvalidMessage('expiration', f'must be a finite number of seconds, not {expiration!r}')
    expiration = max(MIN_EXPIRATION_SECS, expiration)
    ext_pub_time = _pub_time(body.get('pub_time'))
    has_gd = body.get('has_gd')
    if has_gd is not None and not isinstance(has_gd, bool):
        raise InvalidMessage('has_gd', 'must be true or false')
    mime_type = _optional_str(body, 'mime_type')
    if mime_type is not None and len(mime_type) > 100:
        raise InvalidMessage('mime_type', 'must be at most 100 characters')
    return {'priority': priority, 'expiration': expiration, 'has_gd': has_gd, 'mime_type': mime_type,
            'correl_id': _optional_str(body, 'correl_id'), 'in_reply_to': _optional_str(body, 'in_reply_to'),
            'ext_client_id': _optional_str(body, 'ext_client_id'), 'ext_pub_time': ext_pub_time}


def _pub_time(value: Any) -> str | None:
    """The publisher's pub_time as it is kept: an ISO 8601 text verbatim, a Unix time as ISO 8601; None if not sent."""
    if value is None or value == '':
        return None
    if isinstance(value, str):
        if len(value) > MAX_PUB_TIME_CHARS:
            raise InvalidMessage('pub_time', f'must be at most {MAX_PUB_TIME_CHARS} characters')
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise InvalidMessage('pub_time', 'must be an ISO 8601 date and time') from None
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return iso(value)
        except (OverflowError, OSError, ValueError):
            raise InvalidMessage('pub_time', 'is not a Unix time a date can be made of') from None
    raise InvalidMessage('pub_time', 'must be an ISO 8601 date and time')

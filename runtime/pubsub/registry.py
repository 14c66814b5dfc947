"""Topics and subscriptions as one worker holds them in memory, with the pattern index.

The registry is rebuilt from the database whenever the ``pubsub`` sync key moves (see
``runtime.cluster.sync``) and swapped in whole, so a publication always sees one consistent set.
Finding the subscriptions of a topic goes through ``PatternIndex``: its cost depends on the
topic's depth, not on how many pattern subscriptions exist.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from runtime.errors import ConfigError, InvalidTopicName
from runtime.pubsub.options import DeliveryOptions
from runtime.pubsub.topics import PatternIndex, normalize, validate_topic_name

#: Prefix of the topics made for publications to a service.
SERVICE_TOPIC_PREFIX = '/zato/s/to/'

#: The service kind's name: the registry finds the subscription of a service's topic by it (the other
#: kinds' names are their plug-ins', ``runtime.pubsub.subscribers``).
KIND_SERVICE = 'service'


#: Zato 4.1's name of a service's topic is this prefix and the service's name; an alias of the topic above.
SERVICE_TOPIC_ALIAS_PREFIX = 'zato.s.to.'


def service_topic_name(service: str) -> str:
    """The implicit topic of a service: /zato/s/to/<name with dots as underscores>."""
    return SERVICE_TOPIC_PREFIX + service.replace('.', '_')


def aliased_service(name: str) -> str | None:
    """The service a Zato 4.1 service topic name (``zato.s.to.<service name>``) stands for, else None."""
    prefix = SERVICE_TOPIC_ALIAS_PREFIX
    if isinstance(name, str) and len(name) > len(prefix) and name[:len(prefix)].lower() == prefix:
        return name[len(prefix):]
    return None


def _is_topic_name(name: str) -> bool:
    try:
        validate_topic_name(name)
    except InvalidTopicName:
        return False
    return True


def canonical_topic_name(name: str) -> str:
    """A topic name with Zato 4.1's service topic alias replaced by the topic it stands for."""
    service = aliased_service(name)
    return name if service is None else service_topic_name(service)


@dataclass(frozen=True)
class TopicInfo:
    """A topic's attributes."""

    id: int
    name: str
    is_active: bool = True
    has_gd: bool = True
    is_api_sub_allowed: bool = True
    on_no_subs: str = 'accept'
    max_depth_gd: int = 10000
    max_depth_non_gd: int = 1000
    on_max_depth: str = 'overflow'
    depth_check_freq: int = 100
    limit_retention: int = 31536000
    limit_message_expiry: int = 31536000
    #: Seconds a WebSocket subscription may go with no client attached and no activity before the sweeper
    #: deletes it with its queue; 0: never.
    limit_sub_inactivity: int = 86400
    hook_service: str = ''
    is_service_topic: bool = False


#: Topic attributes a user may set (config objects, admin API).
TOPIC_ATTRIBUTES = tuple(f.name for f in fields(TopicInfo) if f.name not in ('id', 'name', 'is_service_topic'))


def check_topic_attributes(attrs: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate user-given topic attributes; returns them typed. ConfigError names the bad one."""
    out: dict[str, Any] = {}
    defaults = TopicInfo(0, '')
    for key, value in attrs.items():
        if key not in TOPIC_ATTRIBUTES:
            raise ConfigError(where, f'unknown topic attribute {key!r}')
        default = getattr(defaults, key)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(where, f'{key} must be true or false')
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(where, f'{key} must be a whole number ≥ 0')
        elif not isinstance(value, str):
            raise ConfigError(where, f'{key} must be a string')
        out[key] = value
    if out.get('on_no_subs', 'accept') not in ('accept', 'drop'):
        raise ConfigError(where, "on_no_subs must be 'accept' or 'drop'")
    if out.get('on_max_depth', 'overflow') not in ('overflow', 'reject'):
        raise ConfigError(where, "on_max_depth must be 'overflow' or 'reject'")
    if out.get('depth_check_freq', 100) < 100:
        raise ConfigError(where, 'depth_check_freq must be at least 100')
    return out


@dataclass(frozen=True)
class SubInfo:
    """A subscription as delivery and publication see it."""

    id: int
    sub_key: str
    pattern: str
    kind: str
    service: str = ''
    security: str = ''
    push_url: str = ''
    is_active: bool = True
    options: DeliveryOptions = field(default_factory=DeliveryOptions)

    @property
    def label(self) -> str:
        """How logs name the subscriber (never the sub_key)."""
        # A push URL may carry a token in its query string or credentials: log only scheme, host and path.
        # (A file target, file:///dir, has no host.)
        try:
            url = urlsplit(self.push_url) if self.push_url else None
            port = f':{url.port}' if url and url.port else ''
        except ValueError:
            url, port = None, ''
        where = f'{url.scheme}://{url.hostname or ""}{port}{url.path}' if url else ''
        who = self.service or self.security or where or '?'
        return f'sub#{self.id}({self.kind}:{who} on {self.pattern})'


def parse_options(raw: str) -> dict[str, Any]:
    """A subscription's stored options."""
    value = json.loads(raw or '{}')
    return value if isinstance(value, dict) else {}


class Registry:
    """An immutable snapshot of topics and subscriptions."""

    def __init__(self, topics: list[TopicInfo] | None = None, subs: list[SubInfo] | None = None) -> None:
        self.topics: dict[str, TopicInfo] = {normalize(t.name): t for t in topics or []}
        self.topics_by_id: dict[int, TopicInfo] = {t.id: t for t in topics or []}
        self.subs: dict[int, SubInfo] = {s.id: s for s in subs or []}
        self.subs_by_key: dict[str, SubInfo] = {s.sub_key: s for s in subs or []}
        self._index: PatternIndex[int] = PatternIndex()
        self._service_subs: dict[str, SubInfo] = {}
        for s in subs or []:
            self._index.add(s.pattern, s.id)
            if s.kind == KIND_SERVICE and normalize(s.pattern) == normalize(service_topic_name(s.service)):
                self._service_subs[s.service] = s
        #: The topics of services that have their topic and implicit subscription, by service name (see
        #: service_topic). Built once per snapshot: publishing to a service then costs one lookup.
        self._service_topics: dict[str, TopicInfo] = {}
        for service in self._service_subs:
            topic = self.topics.get(normalize(service_topic_name(service)))
            if topic is not None and _is_topic_name(service):
                self._service_topics[service] = topic

    def topic(self, name: str) -> TopicInfo | None:
        """A topic by name, case-insensitively; ``zato.s.to.<service>`` finds the service's topic."""
        found = self.topics.get(normalize(name))
        if found is None and aliased_service(name) is not None:
            found = self.topics.get(normalize(canonical_topic_name(name)))
        return found

    def subscribers(self, topic_name: str) -> list[SubInfo]:
        """Active subscriptions whose topic or pattern matches, in id order."""
        return [self.subs[i] for i in sorted(self._index.match(topic_name)) if self.subs[i].is_active]

    def all_subscribers(self, topic_name: str) -> list[SubInfo]:
        """Every subscription (paused ones too) whose topic or pattern matches."""
        return [self.subs[i] for i in sorted(self._index.match(topic_name))]

    def service_topic(self, service: str) -> TopicInfo | None:
        """The topic of a service published to by its name, if it has its topic and implicit subscription.

        None as well for a service whose name is not a valid topic name: publishing to it by that name
        is refused (InvalidTopicName), whatever subscriptions exist.
        """
        return self._service_topics.get(service)

    def service_subscription(self, service: str) -> SubInfo | None:
        """The implicit subscription of a service to its own topic."""
        return self._service_subs.get(service)

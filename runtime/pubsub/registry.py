"""Topics and subscriptions as one worker holds them in memory, with the pattern index.

The registry is rebuilt from the database whenever the ``pubsub`` sync key moves (see
``runtime.cluster.sync``) and swapped in whole, so a publication always sees one consistent set.
Finding the subscriptions of a topic goes through ``PatternIndex``: its cost depends on the
topic's depth, not on how many pattern subscriptions exist.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit

from runtime.config import PubSubSection
from runtime.errors import ConfigError, InvalidTopicName
from runtime.files import naming, writers
from runtime.pubsub.topics import PatternIndex, normalize, validate_topic_name
from runtime.security import secret_refs

#: Prefix of the topics made for publications to a service.
SERVICE_TOPIC_PREFIX = '/zato/s/to/'

#: Subscriber kinds.
KIND_SERVICE = 'service'
KIND_PULL = 'pull'
KIND_REST_PUSH = 'rest_push'
KIND_WEBSOCKET = 'websocket'
KIND_FILE = 'file'
KINDS = (KIND_SERVICE, KIND_PULL, KIND_REST_PUSH, KIND_WEBSOCKET, KIND_FILE)

#: HTTP methods a REST push subscription may use.
PUSH_METHODS = ('POST', 'PUT', 'PATCH')

#: Bodies a REST push subscription may send: Zato 4.1's flat message (the default), or ``{data, meta}``.
PUSH_FORMATS = ('flat', 'envelope')

#: What one file of a file subscription holds: one message, or one delivery batch (of one topic).
FILE_PER = ('message', 'batch')

#: Fields a file subscription's name template (file_name) may use.
FILE_NAME_FIELDS = naming.OUTBOUND_FIELDS

#: Delivery options only file subscriptions take.
FILE_OPTION_PREFIX = 'file_'

#: Options whose values are ${CONDUIT_SECRET_...} references (never shown in errors as given).
SECRET_OPTIONS = ('push_password', 'file_password', 'file_private_key')


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
class DeliveryOptions:
    """How one subscription's messages are delivered."""

    delivery_batch_size: int = 100
    max_attempts: int = 25
    wait_sock_err: float = 10.0
    wait_non_sock_err: float = 3.0
    max_wait_secs: float = 600.0
    err_should_block: bool = True
    max_in_flight: int = 1
    hook_service: str = ''
    # REST push (runtime.pubsub.subscribers.rest_push): method, batching and timeout towards the endpoint.
    push_method: str = 'POST'
    wrap_one_msg_in_list: bool = False
    #: 'flat' (Zato 4.1: msg_id, topic_name, data, ... at the top level) or 'envelope' ({data, meta}).
    push_format: str = 'flat'
    #: False: one message per request, as Zato 4.1 pushes; true: each delivery batch in one request (a list).
    push_batch: bool = False
    push_timeout_secs: float = 10.0
    #: Basic Auth towards the endpoint; the password only as a ${CONDUIT_SECRET_...} reference (see
    #: runtime.security.secret_refs), resolved at delivery.
    push_username: str = ''
    push_password: str = ''
    #: The outgoing_rest definition a subscription from the object files pushes to.
    push_rest_endpoint: str = ''
    #: Unused: security definitions keep only password hashes. Accepted so that options stored by
    #: earlier versions still load; Basic Auth towards the endpoint is push_username/push_password.
    push_security: str = ''
    # File subscribers (runtime.pubsub.subscribers.file): the target directory is the subscription's
    # push_url (file:///abs/dir or sftp://user@host:port/abs/dir).
    #: 'json', 'jsonl' or 'csv' (runtime.files.writers).
    file_format: str = 'json'
    #: 'message': one file per message; 'batch': one file per delivery batch (per topic in it).
    file_per: str = 'message'
    #: The name template, relative to the target directory (fields: FILE_NAME_FIELDS).
    file_name: str = '{topic}-{date}-{msg_id}.{ext}'
    #: CSV columns, comma-separated; '' takes the messages' keys.
    file_csv_columns: str = ''
    #: SFTP credentials, only as ${CONDUIT_SECRET_...} references (runtime.security.secret_refs), resolved at connect.
    file_password: str = ''
    file_private_key: str = ''
    #: The SFTP server's host key ('ssh-ed25519 AAAA...'), or a known_hosts file: one of them is required.
    file_host_key: str = ''
    file_known_hosts: str = ''

    @classmethod
    def from_settings(cls, settings: PubSubSection, overrides: dict[str, Any] | None = None,
                      where: str = 'subscription') -> DeliveryOptions:
        """Server defaults with a subscription's own options on top."""
        base = cls(**{f.name: getattr(settings, f.name) for f in fields(cls) if hasattr(settings, f.name)})
        return base.with_overrides(overrides or {}, where)

    def with_overrides(self, overrides: dict[str, Any], where: str) -> DeliveryOptions:
        """A copy with some options changed; ConfigError names an unknown or mistyped one."""
        typed: dict[str, Any] = {}
        for key, value in overrides.items():
            if not hasattr(self, key):
                raise ConfigError(where, f'unknown delivery option {key!r}')
            default = getattr(self, key)
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, (int, float)):
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
                if ok and isinstance(default, int) and not isinstance(default, bool):
                    ok = float(value).is_integer()
                    value = int(value) if ok else value
            else:
                ok = isinstance(value, str)
            if not ok:
                shown = '(hidden)' if key in SECRET_OPTIONS else repr(value)
                raise ConfigError(where, f'delivery option {key} has an invalid value {shown}')
            typed[key] = value
        result = replace(self, **typed)
        if result.delivery_batch_size < 1 or result.max_attempts < 1 or result.max_in_flight < 1:
            raise ConfigError(where, 'delivery_batch_size, max_attempts and max_in_flight must be at least 1')
        if result.push_method.upper() not in PUSH_METHODS:
            raise ConfigError(where, f'push_method must be one of {", ".join(PUSH_METHODS)}, '
                                     f'not {result.push_method!r}')
        if result.push_format not in PUSH_FORMATS:
            raise ConfigError(where, f'push_format must be one of {", ".join(PUSH_FORMATS)}, '
                                     f'not {result.push_format!r}')
        if result.push_timeout_secs <= 0:
            raise ConfigError(where, 'push_timeout_secs must be more than 0')
        if result.push_password:
            # Stored options are plain JSON in the database: only the reference may go there, and only
            # to a variable meant for it (any other would hand the server's environment to the endpoint).
            secret_refs.reference_name(result.push_password, 'push_password', where)
        if result.push_password and not result.push_username:
            raise ConfigError(where, 'push_password needs push_username')
        if any(key.startswith(FILE_OPTION_PREFIX) for key in typed):
            result._check_file_options(where)
        return result

    def _check_file_options(self, where: str) -> None:
        """ConfigError unless the file_* options are well-formed (the target itself is checked with the kind)."""
        if self.file_format not in writers.FORMATS:
            raise ConfigError(where, f'file_format must be one of {", ".join(writers.FORMATS)}, '
                                     f'not {self.file_format!r}')
        if self.file_per not in FILE_PER:
            raise ConfigError(where, f'file_per must be one of {", ".join(FILE_PER)}, not {self.file_per!r}')
        name = self.file_name
        if not name.strip() or name.startswith('/') or '\x00' in name or len(name) > 1000:
            raise ConfigError(where, 'file_name must be a name template relative to the target directory, '
                                     'e.g. {topic}-{date}-{msg_id}.{ext}')
        naming.check_template(name, FILE_NAME_FIELDS, where)
        writers.check_columns(self.file_csv_columns, where)
        for key in ('file_password', 'file_private_key'):
            if getattr(self, key):
                # Only the reference is stored, and only to a variable meant for it (runtime.security.secret_refs).
                secret_refs.reference_name(getattr(self, key), key, where)
        host_key = self.file_host_key.strip()
        if host_key and (len(host_key.split()) < 2 or any(ord(c) < 32 for c in host_key)):
            raise ConfigError(where, "file_host_key must be the server's public key on one line, "
                                     "e.g. 'ssh-ed25519 AAAA...'")
        known = self.file_known_hosts
        if known and (not known.startswith('/') or any(ord(c) < 32 for c in known)):
            raise ConfigError(where, 'file_known_hosts must be the absolute path of a known_hosts file')


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


def check_kind_options(kind: str, options: dict[str, Any] | None, where: str) -> None:
    """ConfigError if a subscription of kind is given options of another kind (file_* outside kind file)."""
    if kind != KIND_FILE:
        given = sorted(k for k in options or {} if isinstance(k, str) and k.startswith(FILE_OPTION_PREFIX))
        if given:
            raise ConfigError(where, f'{", ".join(given)}: file_* options are for subscriptions of kind file only')


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

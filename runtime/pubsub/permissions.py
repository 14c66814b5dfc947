"""Pub/sub permissions of REST clients: what each security definition may publish to and read from.

A definition holds two ordered lists of topic names or patterns, ``pub`` and ``sub`` (Zato's
``pub=<pattern>`` and ``sub=<pattern>`` lines). A topic is allowed when a name or pattern of the
list matches it: exact names are tried first (one dict lookup), then the patterns in the order
given; the first match wins, and ``match`` says which one it was. Matching is the broker's own
(``runtime.pubsub.topics``): ``*`` one segment, ``**`` any depth, ``.`` and ``/`` alike,
case-insensitive. A definition with no permissions may do nothing.

Services are not REST clients: they always may publish and receive their own messages, so a
subscription without a ``security`` (a service's) is never filtered. A REST subscriber that lacks
``sub`` permission for a topic receives nothing from it, even through a pattern subscription: the
broker asks ``sub_allowed`` for every subscriber of every publication, and pulls check again for
what reached a queue before the permission changed.

Every worker holds the permissions in memory (``Permissions``), reloaded when the sync key
``pubsub_permissions`` moves; they come from the ``pubsub_permission`` section of the object files
(``{security, pub: [...], sub: [...]}``, ``runtime.pubsub.objects``) and from the admin API
(``runtime.pubsub.permission_admin``, which owns their statements).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select

from runtime.cluster.sync import one_reload_at_a_time
from runtime.db.blocking import run_transaction
from runtime.db.models import PubSubPermission
from runtime.errors import InvalidPermission, InvalidTopicName
from runtime.pubsub.topics import covers, is_pattern, matches, normalize, validate_pattern

if TYPE_CHECKING:
    from runtime.pubsub.registry import SubInfo, TopicInfo

_log = logging.getLogger(__name__)

#: Sync key bumped whenever permissions change.
SYNC_KEY = 'pubsub_permissions'

#: The two kinds of permission.
PUB = 'pub'
SUB = 'sub'
ACTIONS = (PUB, SUB)

#: Most (definition, action, topic) answers remembered per worker; the memory is cleared past it.
MAX_CACHED_ANSWERS = 50_000

#: Most names or patterns in one list.
MAX_PATTERNS = 1000


def _match_key(name: str) -> str:
    """The key under which exact names compare: case-insensitive, '.' and '/' alike (as topics match)."""
    return normalize(name).replace('/', '.')


def check_patterns(value: Any, action: str) -> list[str]:
    """A list of names or patterns (or text with one a line), validated; InvalidPermission names the bad one."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [line.strip() for line in value.splitlines() if line.strip()]
    if not isinstance(value, list):
        raise InvalidPermission(action, 'must be a list of topic names or patterns')
    if len(value) > MAX_PATTERNS:
        raise InvalidPermission(action, f'has more than {MAX_PATTERNS} entries')
    out: list[str] = []
    for item in value:
        try:
            out.append(validate_pattern(item))
        except InvalidTopicName as e:
            raise InvalidPermission(action, str(e)) from None
    return out


def parse_lines(text: str) -> dict[str, list[str]]:
    """Zato's permission lines (``pub=orders.*``, ``sub=/customer/**``, one a line) as {pub, sub}."""
    found: dict[str, list[str]] = {PUB: [], SUB: []}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        action, sep, pattern = line.partition('=')
        action = action.strip().lower()
        if not sep or action not in ACTIONS:
            raise InvalidPermission(f'line {number}', 'must start with pub= or sub=')
        found[action].extend(check_patterns([pattern.strip()], f'{action} (line {number})'))
    return found


def parse_grant(item: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The pub and sub lists of a config item or admin API body: ``pub``, ``sub`` and Zato 3's ``patterns`` lines."""
    pub = check_patterns(item.get(PUB), PUB)
    sub = check_patterns(item.get(SUB), SUB)
    lines = item.get('patterns')
    if lines is not None:
        if not isinstance(lines, str):
            raise InvalidPermission('patterns', 'must be text of pub=/sub= lines')
        parsed = parse_lines(lines)
        pub, sub = pub + parsed[PUB], sub + parsed[SUB]
    return pub, sub


class Rules:
    """One ordered list of names and patterns, answering which entry matches a topic first."""

    __slots__ = ('patterns', '_exact', '_wildcards')

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        self._exact: dict[str, str] = {}
        self._wildcards: list[str] = []
        for p in self.patterns:
            if is_pattern(p):
                self._wildcards.append(p)
            else:
                self._exact.setdefault(_match_key(p), p)

    def first_match(self, topic: str) -> str | None:
        """The entry that allows topic (exact names first, then patterns in order), or None."""
        exact = self._exact.get(_match_key(topic))
        if exact is not None:
            return exact
        for pattern in self._wildcards:
            if matches(pattern, topic):
                return pattern
        return None


@dataclass(frozen=True)
class Grant:
    """What one security definition may do."""

    security: str
    pub: Rules
    sub: Rules
    origin: str = 'api'

    def as_dict(self) -> dict[str, Any]:
        """As the admin API shows it."""
        return {'security': self.security, 'pub': list(self.pub.patterns), 'sub': list(self.sub.patterns),
                'origin': self.origin}


def grant_of(row: Any) -> Grant:
    """The permissions of a stored ``conduit_pubsub_permission`` row."""
    return Grant(row.security, Rules(json.loads(row.pub or '[]')), Rules(json.loads(row.sub or '[]')), row.origin)


class Permissions:
    """The permissions of every security definition, as one worker holds them."""

    def __init__(self, engine: Engine | None = None) -> None:
        self._engine = engine  # None: an in-memory twin, filled with replace_all
        self._grants: dict[str, Grant] = {}
        self._answers: dict[tuple[str, str, str], str | None] = {}

    @one_reload_at_a_time
    def reload(self) -> None:
        """Load every definition's permissions from the database and swap them in whole."""
        if self._engine is None:
            return
        rows = run_transaction(self._engine, lambda c: c.execute(select(PubSubPermission)).all(), write=False)
        grants = {}
        for row in rows:
            try:
                grants[row.security] = grant_of(row)
            except (ValueError, TypeError) as e:
                _log.error('pub/sub permissions of %r are unreadable and deny everything: %s', row.security, e)
        self._grants = grants
        self._answers = {}

    def replace_all(self, grants: Iterable[Grant]) -> None:
        """Swap in a set of permissions (tests, and the in-memory twin of reload)."""
        self._grants = {g.security: g for g in grants}
        self._answers = {}

    def get(self, security: str) -> Grant | None:
        """A definition's permissions, if it has any."""
        return self._grants.get(security)

    def match(self, security: str, action: str, topic: str) -> str | None:
        """The name or pattern that lets a definition pub (or sub) on topic, or None if nothing does."""
        key = (security, action, topic)
        try:
            return self._answers[key]
        except KeyError:
            pass
        grant = self._grants.get(security)
        found = None
        if grant is not None:
            found = (grant.pub if action == PUB else grant.sub).first_match(topic)
        if len(self._answers) >= MAX_CACHED_ANSWERS:
            self._answers = {}
        self._answers[key] = found
        return found

    def can_pub(self, security: str, topic: str) -> bool:
        """Whether a definition may publish to topic."""
        return self.match(security, PUB, topic) is not None

    def can_sub(self, security: str, topic: str) -> bool:
        """Whether a definition may receive messages of topic."""
        return self.match(security, SUB, topic) is not None

    def can_sub_pattern(self, security: str, pattern: str) -> bool:
        """Whether a definition may subscribe to a pattern: one of its sub entries covers every topic it matches."""
        if not is_pattern(pattern):
            return self.can_sub(security, pattern)
        grant = self._grants.get(security)
        return grant is not None and any(is_pattern(p) and covers(p, pattern) for p in grant.sub.patterns)

    def sub_allowed(self, sub: SubInfo, topic: TopicInfo) -> bool:
        """Whether a subscription may receive a topic's messages (services always may)."""
        return not sub.security or self.can_sub(sub.security, topic.name)

    def may_read(self, sub: SubInfo, topic_name: str) -> bool:
        """Like sub_allowed, for a topic known by name only."""
        return not sub.security or self.can_sub(sub.security, topic_name)

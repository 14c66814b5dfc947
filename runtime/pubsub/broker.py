"""The broker of one worker: publishing, subscribing, and running the deliveries it owns.

Publishing resolves the target (a topic, or a service and so its implicit topic), checks the
message, finds the subscriptions through the registry's pattern index and stores the message with
its queue entries through the group committer: ``publish`` returns only once that is durable.
Non-GD messages skip storage for the subscriptions this worker delivers: they wait in the
delivery loop's memory and are lost if the worker stops (as documented). Subscriptions delivered by
another process, pull queues and a topic's own backlog get them through the database.

Deliveries: a lease per service or REST push subscription decides which worker delivers it; this
worker runs a ``DeliveryLoop`` for each lease it holds (REST push: in batches, see
``runtime.pubsub.push``) and wakes it on local publications at once, and on other processes'
publications within ``poll_interval_secs`` (a look at the newest queue id).
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import logging
import math
import os
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import gevent
import psycopg
from gevent.event import AsyncResult
from sqlalchemy import Connection, func, select
from sqlalchemy.exc import DBAPIError, IntegrityError

from runtime import json_limits
from runtime.db.blocking import run_transaction
from runtime.db.models import QueueEntry, Subscription
from runtime.errors import (
    ConfigError,
    InvalidMessage,
    MessageTooLarge,
    QueueFull,
    StorageUnavailable,
    SubscriptionNotFound,
    TopicFull,
    TopicInactive,
    TopicNotFound,
    UnrenderableMessage,
)
from runtime.json_limits import DEFAULT_LIMITS, JsonLimits
from runtime.pubsub import store
from runtime.pubsub.dead_letters import DeadLetterer, Moves
from runtime.pubsub.delivery import DeliveryLoop
from runtime.pubsub.group_commit import GroupCommitter
from runtime.pubsub.leases import LeaseManager
from runtime.pubsub.limits import OverflowLog, QueueDepths
from runtime.pubsub.observers import Observers
from runtime.pubsub.push import PushDeliverer, check_push_url
from runtime.pubsub.queue_backend import SqlQueueBackend
from runtime.pubsub.registry import (
    KIND_PULL,
    KIND_REST_PUSH,
    KIND_SERVICE,
    KINDS,
    DeliveryOptions,
    Registry,
    SubInfo,
    TopicInfo,
    aliased_service,
    check_topic_attributes,
    service_topic_name,
)
from runtime.pubsub.retry import REASON_UNRENDERABLE
from runtime.pubsub.store import Delivery, Publication
from runtime.pubsub.topics import validate_pattern, validate_topic_name
from runtime.spawn import killed
from runtime.sync import bump

if TYPE_CHECKING:
    from collections.abc import Callable

    from runtime.core import Runtime

_log = logging.getLogger(__name__)

T = TypeVar('T')

#: Every msg_id starts with it, as Zato 4.1's do (its clients and load scripts check the prefix).
MSG_ID_PREFIX = 'zpsm'

#: Sync key bumped whenever topics or subscriptions change.
SYNC_KEY = 'pubsub'

#: Lease held by the worker that sweeps expired and consumed messages.
SWEEPER_LEASE = 'pubsub:sweeper'

#: Channel name services see when a message is delivered to them.
CHANNEL_PUBSUB = 'pubsub'
CHANNEL_HOOK = 'pubsub-hook'

BASE64_SUFFIX = ';base64'

#: With LISTEN/NOTIFY working, how often PostgreSQL workers still look for missed entries.
PG_SAFETY_POLL_SECS = 1.0

#: Subscriber kinds that workers deliver to (under a lease); pull queues are read by their clients.
DELIVERED_KINDS = (KIND_SERVICE, KIND_REST_PUSH)


class MsgId(str):
    """A message id, as returned to publishers; ``overflowed`` tells that it went to the overflow log."""

    overflowed: bool = False


class SkippedByHook(Exception):
    """A hook service asked for the message to be delivered later."""


@functools.lru_cache(maxsize=4096)
def _iso_second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime('%Y-%m-%dT%H:%M:%S')


def _iso(ts: float) -> str:
    """``datetime.fromtimestamp(ts, UTC).isoformat()``, with the seconds part formatted once per second.

    Every delivery carries three of these; messages of one second share their prefix.
    """
    second = math.floor(ts)
    micros = round((ts - second) * 1e6)  # rounded as datetime rounds
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    if not micros:
        return f'{_iso_second(second)}+00:00'
    return f'{_iso_second(second)}.{micros:06d}+00:00'


def _is_unicode(text: str) -> bool:
    """Whether text can be stored: no lone surrogates (which JSON's \\ud800 escapes can produce)."""
    if text.isascii():
        return True
    try:
        text.encode('utf-8')
    except UnicodeEncodeError:
        return False
    return True


def lease_name(sub_id: int) -> str:
    """The lease of a subscription's delivery."""
    return f'pubsub:sub:{sub_id}'


def encode_data(data: Any, mime_type: str | None, limits: JsonLimits = DEFAULT_LIMITS) -> tuple[str, str]:
    """Data as stored (text) and its mime type; InvalidMessage for what cannot be stored.

    JSON data must be within limits (nesting, integer digits) and finite: NaN and Infinity would
    be stored as text no JSON parser reads, and deep values could not be rendered for subscribers.
    """
    if data is None:
        raise InvalidMessage('data', 'is required')
    if isinstance(data, bytes):
        return base64.b64encode(data).decode('ascii'), (mime_type or 'application/octet-stream') + BASE64_SUFFIX
    if isinstance(data, str) and mime_type != 'application/json':
        return data, mime_type or 'text/plain'
    try:
        json_limits.check(data, limits)
        return json.dumps(data, separators=(',', ':'), ensure_ascii=False, allow_nan=False), 'application/json'
    except json_limits.InvalidJson as e:
        raise InvalidMessage('data', str(e)) from None
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidMessage('data', f'cannot be serialised as JSON: {e}') from None


def decode_data(data: str, mime_type: str, limits: JsonLimits = DEFAULT_LIMITS) -> Any:
    """Data as the publisher gave it; a ValueError when the stored text is not what its mime type says."""
    if mime_type == 'application/json':
        return json_limits.loads(data, limits)
    if mime_type.endswith(BASE64_SUFFIX):
        return base64.b64decode(data)
    return data


def message_meta(d: Delivery, sub: SubInfo, limits: JsonLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The message and its metadata as a subscriber sees it (request.raw_request), or UnrenderableMessage."""
    mime = d.mime_type[:-len(BASE64_SUFFIX)] if d.mime_type.endswith(BASE64_SUFFIX) else d.mime_type
    try:
        data = decode_data(d.data, d.mime_type, limits)
    except ValueError as e:  # stored past the checks of publish (an older version, an edit, the database itself)
        raise UnrenderableMessage(d.msg_id, f'its data {e}') from None
    meta = {'msg_id': d.msg_id, 'topic_name': d.topic_name, 'data': data,
            'mime_type': mime, 'priority': d.priority, 'size': d.size, 'has_gd': d.has_gd,
            'pub_time': d.pub_time, 'pub_time_iso': d.ext_pub_time or _iso(d.pub_time),
            'expiration': round(d.expiration_time - d.pub_time, 3), 'expiration_time_iso': _iso(d.expiration_time),
            'recv_time_iso': _iso(d.recv_time), 'publisher': d.publisher, 'correl_id': d.correl_id,
            'in_reply_to': d.in_reply_to, 'ext_client_id': d.ext_client_id, 'delivery_count': d.delivery_count,
            'sub_key': sub.sub_key}
    return meta


class Broker:
    """Publish/subscribe for one worker."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self.settings = runtime.settings.pubsub
        self.engine = runtime.engine
        self.registry = Registry()
        self.leases = LeaseManager(self.engine, self.settings.lease_ttl_secs, self.settings.lease_renew_secs)
        self._loops: dict[int, tuple[DeliveryLoop, gevent.Greenlet]] = {}
        self._committer: GroupCommitter | None = None
        self._since_depth_check: dict[int, int] = {}
        self._depths: dict[int, int] = {}
        self._last_queue_id = 0
        self._overflow_log = OverflowLog(runtime.settings.path(self.settings.overflow_dir),
                                         self.settings.max_overflow_bytes)
        #: Depths of subscription queues, for the topics' max depths (see runtime.pubsub.limits).
        self._queue_depths = QueueDepths(self._read_queue_depths)
        self._listening = False
        #: Observers of publications and deliveries (metrics, archive): see runtime.pubsub.observers.
        self.observers = Observers()
        #: Every dead letter, whatever makes it, is written and announced to the observers through it.
        self.dead_letterer = DeadLetterer(self.observers, lambda sub_id: self.registry.subs.get(sub_id))
        self._backend = SqlQueueBackend(self.engine, self.dead_letterer)
        #: What JSON data may hold (nesting, integer digits), at publication and when rendered for subscribers.
        self.json_limits = JsonLimits.from_settings(runtime.settings.http)
        #: Entry ids of in-memory (non-GD) queue entries: negative, so they never clash with stored ones.
        self._ram_ids = itertools.count(-1, -1)
        #: Whether a subscription may receive a topic's messages (pub/sub permissions, set by the runtime);
        #: None lets every subscription have them.
        self.sub_allowed: Callable[[SubInfo, TopicInfo], bool] | None = None

    @property
    def hooks(self) -> Observers:
        """The former name of ``observers``."""
        return self.observers

    # Lifecycle

    def start(self, background: bool = True) -> None:
        """Load topics and subscriptions; start committing, leasing, polling and sweeping."""
        self.reload()
        self._last_queue_id = run_transaction(self.engine, lambda c: c.execute(
            select(func.coalesce(func.max(QueueEntry.id), 0))).scalar_one(), write=False)
        spawn = self._runtime.spawner.spawn
        self._committer = GroupCommitter(self.engine, self.settings.group_commit_max, spawn, self._committed,
                                         self._claim_loops)
        self._backend.writer = self._committer.run
        self.observers.emit('on_start')
        if background:
            spawn(self.leases.run, self._wanted_leases, self._leases_changed, name='pubsub-leases')
            if self.engine.dialect.name == 'postgresql':
                spawn(self._listen, name='pubsub-listener')
            spawn(self._poll_queues, name='pubsub-poller')
            spawn(self._sweep_forever, name='pubsub-sweeper')

    def stop(self) -> None:
        """Stop delivering and hand the leases back so another worker takes over at once."""
        for _loop, greenlet in list(self._loops.values()):
            greenlet.kill(block=False)
        self._loops.clear()
        self.observers.emit('on_stop')
        try:
            self.leases.release_all()
        except Exception as e:
            _log.warning('releasing leases failed: %s', e)

    def reload(self) -> None:
        """Reload topics and subscriptions from the database."""
        self.registry = run_transaction(self.engine, lambda c: store.load_registry(c, self.settings), write=False)
        self._depths.clear()  # a new subscription may have taken a topic's backlog: count again
        self._queue_depths.invalidate(self.registry.subs.keys())  # and queues may have been purged or removed
        for sub_id, (loop, _greenlet) in list(self._loops.items()):
            sub = self.registry.subs.get(sub_id)
            if sub is None or not sub.is_active:
                self._stop_loop(sub_id)
            else:
                loop.sub = sub

    def _changed(self) -> None:
        """This worker changed topics or subscriptions: reload here now (others follow by sync)."""
        self.reload()

    # Topics

    def create_topic(self, name: str, origin: str = 'api', **attrs: Any) -> TopicInfo:
        """Create a topic with the given attributes."""
        validate_topic_name(name)
        attrs = check_topic_attributes(attrs, f'topic {name!r}')

        def work(conn: Connection) -> None:
            store.create_topic(conn, name, attrs, origin=origin)
            bump(conn, SYNC_KEY)
        try:
            run_transaction(self.engine, work)
        except IntegrityError:
            raise ConfigError(f'topic {name!r}', 'a topic of that name already exists') from None
        self._changed()
        topic = self.registry.topic(name)
        assert topic is not None
        return topic

    def resolve(self, target: str, publisher: str = '') -> TopicInfo:
        """The topic a publication goes to: a topic by name, else a service's own topic."""
        topic = self.registry.topic(target) if isinstance(target, str) else None
        if topic is not None:
            return topic
        validate_topic_name(target)
        if self._runtime.store.has(target):
            return self.ensure_service_topic(target)
        service = aliased_service(target)
        if service is not None and self._runtime.store.has(service):
            return self.ensure_service_topic(service)
        if self.settings.auto_create_topics:
            try:
                return self.create_topic(target)
            except ConfigError:
                self._changed()  # created meanwhile by another worker
                topic = self.registry.topic(target)
                if topic is not None:
                    return topic
                raise
        raise TopicNotFound(target)

    def ensure_service_topic(self, service: str) -> TopicInfo:
        """The implicit topic of a service and its subscription, made on first use."""
        name = service_topic_name(service)
        topic = self.registry.topic(name)
        if topic is not None and self.registry.service_subscription(service) is not None:
            return topic

        def work(conn: Connection) -> None:
            registry = store.load_registry(conn, self.settings)
            if registry.topic(name) is None:
                store.create_topic(conn, name, {'has_gd': True}, is_service_topic=True, origin='service')
                registry = store.load_registry(conn, self.settings)
            if registry.service_subscription(service) is None:
                store.create_subscription(conn, registry, name, KIND_SERVICE, service=service, origin='service')
            bump(conn, SYNC_KEY)
        try:
            run_transaction(self.engine, work)
        except IntegrityError:
            pass  # another worker made them at the same moment
        self._changed()
        topic = self.registry.topic(name)
        if topic is None:
            raise TopicNotFound(name)
        return topic

    # Publishing

    def publish(self, target: str, data: Any, *, priority: int = 5, expiration: float | None = None,
                has_gd: bool | None = None, correl_id: str | None = None, in_reply_to: str | None = None,
                ext_client_id: str | None = None, mime_type: str | None = None, publisher: str = '',
                sub_filter: Any = None, ext_pub_time: str | None = None) -> MsgId:
        """Publish a message to a topic or a service; returns its msg_id once stored.

        ext_pub_time is the publisher's own time, kept verbatim and shown to subscribers as
        pub_time_iso; ordering and expiry use the server's clock.
        """
        topic = self.resolve(target, publisher)
        if not topic.is_active:
            raise TopicInactive(topic.name)
        if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
            raise InvalidMessage('priority', f'must be a whole number from 0 to 9, not {priority!r}')
        if expiration is None:
            expiration = self.settings.default_expiration_secs
        if (isinstance(expiration, bool) or not isinstance(expiration, (int, float)) or expiration <= 0
                or (isinstance(expiration, float) and not math.isfinite(expiration))):
            raise InvalidMessage('expiration', f'must be a positive, finite number of seconds, not {expiration!r}')
        expiration = min(expiration, topic.limit_message_expiry)
        text, mime = encode_data(data, mime_type, self.json_limits)
        if not _is_unicode(text):
            raise InvalidMessage('data', 'is not valid Unicode (it has a lone surrogate)')
        size = len(text.encode('utf-8')) if not text.isascii() else len(text)
        if size > self.settings.max_message_size:
            raise MessageTooLarge(size, self.settings.max_message_size)
        # PostgreSQL cannot store U+0000 in text, and one such row would fail a whole group commit.
        if '\x00' in text:
            raise InvalidMessage('data', 'contains a NUL character (U+0000); publish it as JSON or bytes')
        for name, value, limit in (('correl_id', correl_id, 200), ('in_reply_to', in_reply_to, 200),
                                   ('ext_client_id', ext_client_id, 200), ('pub_time', ext_pub_time, 64)):
            if value is not None and (not isinstance(value, str) or len(value) > limit or '\x00' in value
                                      or not _is_unicode(value)):
                raise InvalidMessage(name, f'must be a string of at most {limit} characters, without NUL')
        gd = True if topic.is_service_topic else (topic.has_gd if has_gd is None else bool(has_gd))
        # A paused subscription (is_active false) still queues: only its delivery waits.
        subs = self.registry.all_subscribers(topic.name)
        if sub_filter is not None:
            subs = [s for s in subs if sub_filter(s)]
        if self.sub_allowed is not None and subs:
            subs = [s for s in subs if self.sub_allowed(s, topic)]
        now = time.time()
        msg_id = MsgId(MSG_ID_PREFIX + os.urandom(12).hex())
        pub = Publication(msg_id=msg_id, topic_id=topic.id, topic_name=topic.name, data=text, mime_type=mime,
                          priority=priority, pub_time=now, expiration_time=now + expiration, publisher=publisher,
                          correl_id=correl_id, in_reply_to=in_reply_to, ext_client_id=ext_client_id, has_gd=gd,
                          size=size, sub_ids=[s.id for s in subs], ext_pub_time=ext_pub_time or None)
        if not subs:
            if topic.on_no_subs == 'drop':
                _log.debug('message %s to %s dropped: no subscribers', msg_id, topic.name)
                return msg_id
            pub.in_topic = True
            if self._topic_full(topic, gd):
                if topic.on_max_depth == 'reject':
                    raise TopicFull(topic.name, self._depths.get(topic.id, 0))
                self._overflow(pub)
                msg_id.overflowed = True
                self.observers.emit('after_publish', pub, True)
                return msg_id
        # Service queues are not limited: the runtime drains them itself, and a message published to a
        # service must survive until it is processed (an overflowed copy is never delivered).
        limited = [s for s in subs if s.kind != KIND_SERVICE]
        if limited:
            subs = self._within_queue_limits(topic, pub, subs, limited, gd)
            if not subs:  # every copy went to the overflow log
                msg_id.overflowed, pub.sub_ids = True, []
                self.observers.emit('after_publish', pub, True)
                return msg_id
            msg_id.overflowed = len(subs) < len(pub.sub_ids)
            pub.sub_ids = [s.id for s in subs]
        reserved = [s.id for s in subs if s.kind != KIND_SERVICE]
        if reserved:
            self._queue_depths.reserve(reserved)
        unstored = reserved
        try:
            if not gd and subs:
                remote = self._hold_in_memory(pub, subs)
                unstored = [i for i in reserved if i in remote]
                if not remote:
                    self.observers.emit('after_publish', pub, msg_id.overflowed)
                    return msg_id
                pub.sub_ids = remote
            assert self._committer is not None, 'broker not started'
            self._committer.submit(pub)
            unstored = []
        finally:
            if reserved:
                self._queue_depths.release(reserved, failed=unstored)
        self.observers.emit('after_publish', pub, msg_id.overflowed)
        if pub.in_topic:
            self._depths[topic.id] = self._depths.get(topic.id, 0) + 1
        return msg_id

    def _within_queue_limits(self, topic: TopicInfo, pub: Publication, subs: list[SubInfo],
                             limited: list[SubInfo], gd: bool) -> list[SubInfo]:
        """The subscriptions whose queues may take the publication; overflowed copies are logged.

        QueueFull (reject) or OverflowLogFull (overflow, log at its cap) refuse the whole publication.
        """
        limit = topic.max_depth_gd if gd else topic.max_depth_non_gd
        full = self._queue_depths.full(limited, limit, topic.depth_check_freq)
        if not full:
            return subs
        if topic.on_max_depth == 'reject':
            sub, depth = full[0]
            # Named by id only: the publisher may not learn who else subscribes (label: security
            # definition, service, push host).
            raise QueueFull(topic.name, depth, f'sub#{sub.id}')
        overflowed = {sub.id for sub, _depth in full}
        self._overflow(pub, sorted(overflowed))
        return [s for s in subs if s.id not in overflowed]

    def _read_queue_depths(self, sub_ids: list[int]) -> dict[int, int]:
        """Depths of queues: stored entries plus the non-GD ones this worker's loops hold in memory."""
        try:
            depths = run_transaction(self.engine, lambda c: store.queue_depths(c, sub_ids), write=False)
        except DBAPIError as e:
            raise StorageUnavailable(f'storage unavailable, nothing was stored: {type(e.orig).__name__}') from None
        for sub_id in sub_ids:
            entry = self._loops.get(sub_id)
            if entry is not None and entry[0].ram_depth:
                depths[sub_id] = depths.get(sub_id, 0) + entry[0].ram_depth
        return depths

    def _hold_in_memory(self, pub: Publication, subs: list[SubInfo]) -> list[int]:
        """Queue a non-GD message in the RAM of the loops this worker runs; returns the other subs.

        Another process's memory cannot be reached, so subscriptions delivered elsewhere (or by
        nobody yet, or pulled by clients) get the message through the database instead.
        """
        remote = []
        for sub in subs:
            entry = self._loops.get(sub.id)
            if entry is None or not self.leases.owns(lease_name(sub.id)):
                remote.append(sub.id)
                continue
            entry[0].push(Delivery(
                entry_id=next(self._ram_ids), sub_id=sub.id, delivery_count=0, next_attempt_at=0.0, last_error='',
                recv_time=pub.pub_time, message_id=0, msg_id=pub.msg_id, topic_name=pub.topic_name, data=pub.data,
                mime_type=pub.mime_type, priority=pub.priority, pub_time=pub.pub_time,
                expiration_time=pub.expiration_time, publisher=pub.publisher, correl_id=pub.correl_id,
                in_reply_to=pub.in_reply_to, ext_client_id=pub.ext_client_id, has_gd=False, size=pub.size,
                topic_id=pub.topic_id, ext_pub_time=pub.ext_pub_time))
        return remote

    def _topic_full(self, topic: TopicInfo, gd: bool) -> bool:
        limit = topic.max_depth_gd if gd else topic.max_depth_non_gd
        count = self._since_depth_check.get(topic.id, topic.depth_check_freq)
        if topic.id not in self._depths or count >= topic.depth_check_freq:
            self._depths[topic.id] = run_transaction(self.engine, lambda c: store.topic_depth(c, topic.id, gd),
                                                     write=False)
            count = 0
        self._since_depth_check[topic.id] = count + 1
        return self._depths[topic.id] >= limit

    def _overflow(self, pub: Publication, sub_ids: list[int] | None = None) -> None:
        """Append a publication past a max depth (the topic's, or these queues') to its overflow log.

        Written before the publication's commit: OverflowLogFull (the log at its cap) must refuse it
        before anything is stored.
        """
        path = self._overflow_log.append(pub, sub_ids)
        if sub_ids is None:
            _log.warning('topic %s is at its max depth: message %s written to %s', pub.topic_name, pub.msg_id, path)
        else:
            _log.warning('topic %s: the queues of %s are at the max depth: their copies of message %s written to %s',
                         pub.topic_name, ', '.join(f'sub#{i}' for i in sub_ids), pub.msg_id, path)

    def _claim_loops(self, pubs: list[Publication]) -> list[tuple[Callable[[Connection], Any], AsyncResult]]:
        """The next-batch work of this worker's idle loops that these publications feed."""
        claims, seen = [], set()
        for pub in pubs:
            for sub_id in pub.sub_ids:
                if sub_id in seen:
                    continue
                seen.add(sub_id)
                entry = self._loops.get(sub_id)
                if entry is None:
                    continue
                try:
                    claim = entry[0].claim()
                except Exception:  # the loop then runs its own cycle when woken, as without a claim
                    _log.exception('%s: taking the next batch in the publishers\' commit failed', entry[0].sub.label)
                    continue
                if claim is not None:
                    claims.append(claim)
        return claims

    def _committed(self, pubs: list[Publication]) -> None:
        for pub in pubs:
            for sub_id in pub.sub_ids:
                entry = self._loops.get(sub_id)
                if entry is not None:
                    entry[0].wake()

    # Subscriptions

    def subscribe(self, pattern: str, kind: str = KIND_SERVICE, *, service: str = '', security: str = '',
                  push_url: str = '', options: dict[str, Any] | None = None, origin: str = 'api') -> SubInfo:
        """Subscribe to a topic or pattern; messages the topics held for a subscriber are handed over."""
        validate_pattern(pattern)
        if kind not in KINDS:
            raise ConfigError('subscription', f'kind must be one of {", ".join(KINDS)}, not {kind!r}')
        if kind == KIND_SERVICE and not service:
            raise ConfigError('subscription', 'a service subscription needs the service to invoke')
        if kind == KIND_REST_PUSH:
            check_push_url(push_url, f'subscription to {pattern!r}')
        DeliveryOptions.from_settings(self.settings, options, f'subscription to {pattern!r}')

        def work(conn: Connection) -> str:
            registry = store.load_registry(conn, self.settings)
            _sub_id, sub_key = store.create_subscription(conn, registry, pattern, kind, service=service,
                                                         security=security, push_url=push_url, options=options,
                                                         origin=origin)
            bump(conn, SYNC_KEY)
            return sub_key
        sub_key = run_transaction(self.engine, work)
        self._changed()
        sub = self.registry.subs_by_key[sub_key]
        self._poll_once()  # the handed-over backlog, if this worker delivers it
        return sub

    def unsubscribe(self, sub_key: str) -> None:
        """Remove a subscription with its queue."""
        sub = self.registry.subs_by_key.get(sub_key)
        if sub is None:
            self._changed()
            sub = self.registry.subs_by_key.get(sub_key)
            if sub is None:
                raise SubscriptionNotFound()

        def work(conn: Connection) -> None:
            store.delete_subscription(conn, sub.id)
            bump(conn, SYNC_KEY)
        run_transaction(self.engine, work)
        self._changed()

    def set_active(self, sub_key: str, is_active: bool) -> None:
        """Pause or resume a subscription's delivery."""
        sub = self.registry.subs_by_key.get(sub_key)
        if sub is None:
            raise SubscriptionNotFound()

        def work(conn: Connection) -> None:
            conn.execute(Subscription.__table__.update().where(Subscription.id == sub.id).values(is_active=is_active))
            bump(conn, SYNC_KEY)
        run_transaction(self.engine, work)
        self._changed()

    def get_messages(self, sub_key: str, max_messages: int = 50) -> list[dict[str, Any]]:
        """Take up to max_messages from a pull subscription's queue (removed as they are handed over)."""
        sub = self.registry.subs_by_key.get(sub_key)
        if sub is None or sub.kind != KIND_PULL:
            raise SubscriptionNotFound('pull subscription')

        def work(conn: Connection, moves: Moves) -> list[tuple[Delivery, dict[str, Any]]]:
            batch = store.fetch_batch(conn, sub.id, max(1, min(max_messages, 1000)), due_before=time.time())
            now = time.time()
            taken = []
            for d in batch:
                if d.expiration_time <= now:  # never handed over: dead-lettered, as the sweeper does
                    moves.add(conn, d, 'expired', d.last_error or 'the message expired unread', sub)
                    continue
                d.delivery_count += 1
                # Decoded before the ack: a message that cannot be must not cost the others theirs.
                try:
                    taken.append((d, message_meta(d, sub, self.json_limits)))
                except UnrenderableMessage as e:
                    moves.add(conn, d, REASON_UNRENDERABLE, str(e), sub, log=True)
            store.ack(conn, [d.entry_id for d, _meta in taken])
            return taken
        taken = self.dead_letterer.run(self._transaction, work)
        # Handed over and acked: delivered, as a REST client's pull is.
        for d, _meta in taken:
            self.observers.emit('after_deliver', sub, d, True, None, 0.0)
        return [meta for _d, meta in taken]

    def _transaction(self, work: Callable[[Connection], T]) -> T:
        """Run work in a write transaction of its own."""
        return run_transaction(self.engine, work)

    def queue_depth(self, sub_key: str) -> int:
        """How many messages wait in a subscription's queue."""
        sub = self.registry.subs_by_key.get(sub_key)
        if sub is None:
            raise SubscriptionNotFound()
        return run_transaction(self.engine, lambda c: store.queue_depth(c, sub.id), write=False)

    def dead_letters(self, sub_key: str) -> list[dict[str, Any]]:
        """A subscription's dead letters with their errors."""
        sub = self.registry.subs_by_key.get(sub_key)
        if sub is None:
            raise SubscriptionNotFound()
        return run_transaction(self.engine, lambda c: store.dead_letters(c, sub.id), write=False)

    # Delivery

    def _wanted_leases(self) -> set[str]:
        wanted = {lease_name(s.id) for s in self.registry.subs.values() if s.kind in DELIVERED_KINDS and s.is_active}
        wanted.add(SWEEPER_LEASE)
        return wanted

    def _leases_changed(self, gained: set[str], lost: set[str]) -> None:
        for name in lost:
            if name.startswith('pubsub:sub:'):
                self._stop_loop(int(name.rsplit(':', 1)[1]))
        for name in gained:
            if name.startswith('pubsub:sub:'):
                sub = self.registry.subs.get(int(name.rsplit(':', 1)[1]))
                if sub is not None and sub.is_active:  # paused while the lease was being taken
                    self._start_loop(sub)

    def _start_loop(self, sub: SubInfo) -> None:
        if sub.id in self._loops:
            return
        name = lease_name(sub.id)

        def owns() -> bool:
            return self.leases.owns(name)
        if sub.kind == KIND_REST_PUSH:
            # One HTTP session per subscription, closed with its loop.
            pusher = PushDeliverer(self._prepare, self.json_limits)
            loop = DeliveryLoop(sub, self._backend, None, owns, self.observers, deliver_batch=pusher.deliver_batch)
        else:
            pusher = None
            loop = DeliveryLoop(sub, self._backend, self._deliver_to_service, owns, self.observers)
        greenlet = self._runtime.spawner.spawn(loop.run, name=f'delivery:{sub.label}')
        greenlet.link(lambda _g, sub_id=sub.id: self._loop_ended(sub_id, greenlet))
        if pusher is not None:
            greenlet.link(lambda _g: pusher.close())
        self._loops[sub.id] = (loop, greenlet)
        _log.info('delivering %s in this worker', sub.label)

    def _loop_ended(self, sub_id: int, greenlet: gevent.Greenlet) -> None:
        entry = self._loops.get(sub_id)
        if entry is not None and entry[1] is greenlet:
            del self._loops[sub_id]
            self.leases.held.discard(lease_name(sub_id))  # taken again at the next refresh if still ours

    def _stop_loop(self, sub_id: int) -> None:
        entry = self._loops.pop(sub_id, None)
        if entry is not None:
            entry[1].kill(block=False)
        # Forgotten as held, so that the next refresh reports the lease as gained if it is still ours and
        # wanted (a subscription paused and resumed between two refreshes), and the loop starts again.
        self.leases.held.discard(lease_name(sub_id))

    def _deliver_to_service(self, sub: SubInfo, d: Delivery) -> bool | None:
        """Invoke a subscribed service with one message; raises on failure."""
        meta = self._prepare(sub, d)
        if meta is None:
            return False
        self._runtime.invoker.run(self._runtime.store.get(sub.service), meta['data'], channel=CHANNEL_PUBSUB,
                                  raw_request=meta)
        return None

    def _prepare(self, sub: SubInfo, d: Delivery) -> dict[str, Any] | None:
        """The message as the subscriber gets it, after the topic's and subscription's hook services.

        None when a hook deleted it; SkippedByHook when a hook wants it delivered later.
        """
        topic = self.registry.topic(d.topic_name)
        if self.sub_allowed is not None and topic is not None and not self.sub_allowed(sub, topic):
            # A backlog handed to a pattern subscription is not filtered when handed over.
            _log.info('%s: message %s not delivered: no sub permission for %s', sub.label, d.msg_id, topic.name)
            return None
        meta = message_meta(d, sub, self.json_limits)
        invoker = self._runtime.invoker
        for hook in (topic.hook_service if topic else '', sub.options.hook_service):
            if hook:
                answer = invoker.run(self._runtime.store.get(hook), {'data': meta['data'], 'meta': meta},
                                     channel=CHANNEL_HOOK).response.payload or {}
                action = answer.get('action', 'deliver') if isinstance(answer, dict) else 'deliver'
                if action == 'delete':
                    _log.info('%s: message %s deleted by hook %s', sub.label, d.msg_id, hook)
                    return None
                if action == 'skip':
                    raise SkippedByHook(f'skipped by hook service {hook!r}')
                if isinstance(answer, dict) and 'data' in answer:
                    meta['data'] = answer['data']
        return meta

    def _listen(self) -> None:
        """PostgreSQL: wake local loops as soon as another process commits entries for them."""
        url = self.engine.url.set(drivername='postgresql').render_as_string(hide_password=False)
        while True:
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f'LISTEN {store.NOTIFY_CHANNEL}')
                    self._listening = True
                    for note in conn.notifies():
                        self._wake_listed(note.payload)
            except gevent.GreenletExit:
                raise
            except Exception as e:
                _log.warning('LISTEN connection failed (%s: %s); polling until it is back', type(e).__name__, e)
            finally:
                self._listening = False
            gevent.sleep(1.0)

    def _wake_listed(self, payload: str) -> None:
        if payload == '*':
            for loop, _greenlet in list(self._loops.values()):
                loop.wake()
            return
        for part in payload.split(','):
            entry = self._loops.get(int(part)) if part.isdigit() else None
            if entry is not None:
                entry[0].wake()

    def _poll_queues(self) -> None:
        """Wake local loops for entries other processes queued (one indexed look per interval).

        On PostgreSQL, LISTEN/NOTIFY does this at once and the poll is only a slow safety net.
        """
        while True:
            gevent.sleep(self.settings.poll_interval_secs if not self._listening else PG_SAFETY_POLL_SECS)
            try:
                self._poll_once()
            except gevent.GreenletExit:
                raise
            except Exception as e:
                _log.warning('queue poll failed: %s: %s', type(e).__name__, e)

    def _poll_once(self) -> None:
        if not self._loops:
            return
        last = self._last_queue_id
        rows = run_transaction(self.engine, lambda c: c.execute(
            select(QueueEntry.sub_id, func.max(QueueEntry.id)).where(QueueEntry.id > last)
            .group_by(QueueEntry.sub_id)).all(), write=False)
        for sub_id, max_id in rows:
            self._last_queue_id = max(self._last_queue_id, max_id)
            entry = self._loops.get(sub_id)
            if entry is not None:
                entry[0].wake()

    # Sweeping

    def _sweep_forever(self) -> None:
        while True:
            gevent.sleep(self.settings.sweep_interval_secs)
            if not self.leases.owns(SWEEPER_LEASE):
                continue
            try:
                self.sweep()
            except gevent.GreenletExit:
                raise
            except Exception as e:
                if killed(e):
                    return  # stopping: the kill landed in a database call
                _log.warning('sweep failed: %s: %s', type(e).__name__, e)

    def sweep(self) -> dict[str, int]:
        """Dead-letter expired queue entries; delete expired, over-retention and consumed messages."""
        now = time.time()
        registry = self.registry
        delivered = {s.id for s in registry.subs.values() if s.kind in DELIVERED_KINDS and s.is_active}

        def work(conn: Connection, moves: Moves) -> dict[str, int]:
            expired = store.expired_entries(conn, now, skip_sub_ids=delivered)
            for d in expired:
                moves.add(conn, d, 'expired', d.last_error or 'the message expired before delivery')
            counts = {'expired_in_queues': len(expired)}
            retained = 0
            for topic in registry.topics.values():
                retained += store.retention_expired_in_topic(conn, topic.id, now - topic.limit_retention)
            counts['over_retention'] = retained
            counts.update(store.sweep(conn, now))
            return counts
        counts = self.dead_letterer.run(self._transaction, work)
        if any(counts.values()):
            _log.info('pub/sub sweep: %s', counts)
        return counts

"""The broker of one worker: publishing, and running the deliveries it owns (under leases).

Publishing resolves the target (a topic, or a service and so its implicit topic), checks the
message, finds the subscriptions through the registry's pattern index and stores the message with
its queue entries through the group committer: ``publish`` returns only once that is durable.
``prepare`` and ``store_prepared`` split that in two for callers that must commit publications
together with writes of their own (a file channel stores a batch of records with the progress of
its file: ``runtime.files.processor``). Non-GD messages skip storage for the subscriptions this
worker delivers: they wait in the delivery loop's memory and are lost if the worker stops (as
documented). Subscriptions delivered by another process, pull queues and a topic's own backlog get
them through the database.

A lease per delivered subscription decides which worker delivers it; this worker competes for
the leases the plug-in of each subscription's kind wants it to (``wants_delivery``: any worker for
a service or REST push subscription, only the one its client is attached to for a WebSocket one),
runs a ``DeliveryLoop`` for each lease it holds, calling what that plug-in builds
(``runtime.pubsub.subscribers``), and wakes it on local publications at once (on other
processes' through ``wakeups``). ``want_delivery`` asks for the leases to be refreshed now, and
``release_delivery`` stops one loop and hands its lease back at once (a WebSocket client left).
The leases of the kinds any worker may deliver are spread over the live workers (the plug-in's
``spread``): a lease above this worker's fair share is handed back the same way, once its loop has
stored the outcome of its current batch. Each loop stores through a ``FencedQueue`` holding the lease
version it was started with, so that a loop whose lease was lost meanwhile stores nothing.
``catalog`` administers topics and subscriptions, ``sweeper`` removes what nobody will read;
pulls go through ``runtime.pubsub.subscribers.pull``.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import gevent
from gevent.event import AsyncResult
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from runtime.cluster.sync import one_reload_at_a_time
from runtime.config import PubSubSection
from runtime.db.blocking import run_transaction
from runtime.errors import ConfigError, StorageUnavailable, TopicFull, TopicInactive, TopicNotFound
from runtime.pubsub import message, statements
from runtime.pubsub.catalog import Catalog
from runtime.pubsub.dead_letters import DeadLetterer
from runtime.pubsub.delivery import DeliveryLoop
from runtime.pubsub.group_commit import GroupCommitter
from runtime.pubsub.kinds import Kinds
from runtime.pubsub.leases import LeaseManager
from runtime.pubsub.limits import OverflowLog, QueueDepths, TopicDepths, within_queue_limits
from runtime.pubsub.message import MSG_ID_PREFIX, MsgId, Publication
from runtime.pubsub.observers import Observers
from runtime.pubsub.queue_backend import FencedQueue, SqlQueueBackend
from runtime.pubsub.queue_vacuum import QueueVacuum
from runtime.pubsub.registry import Registry, SubInfo, TopicInfo, aliased_service
from runtime.pubsub.subscribers.base import Context, Subscriber
from runtime.pubsub.sweeper import SWEEPER_LEASE, Sweeper
from runtime.pubsub.topics import validate_topic_name
from runtime.pubsub.wakeups import Wakeups
from runtime.pubsub.watchers import QueueWatchers
from runtime.util.json_limits import DEFAULT_LIMITS, JsonLimits
from runtime.util.random_ids import random_hex

_log = logging.getLogger(__name__)

T = TypeVar('T')

#: Starts a named background greenlet: spawn(func, *args, name=...).
Spawn = Callable[..., gevent.Greenlet]

#: How long release_delivery lets a loop store the outcome of its last batch before it is killed.
RELEASE_GRACE_SECS = 2.0


def lease_name(sub_id: int) -> str:
    """The lease of a subscription's delivery."""
    return f'pubsub:sub:{sub_id}'


class Broker:
    """Publish/subscribe for one worker."""

    def __init__(self, engine: Engine, settings: PubSubSection, *, subscribers: Sequence[Subscriber],
                 spawn: Spawn, has_service: Callable[[str], bool], overflow_dir: Path,
                 observers: Observers | None = None, json_limits: JsonLimits = DEFAULT_LIMITS,
                 sub_allowed: Callable[[SubInfo, TopicInfo], bool] | None = None, owner: str | None = None) -> None:
        self.settings = settings
        self.engine = engine
        self._spawn = spawn
        self._has_service = has_service
        self.registry = Registry()
        #: The plug-in of each subscriber kind (runtime.pubsub.subscribers).
        self.subscribers: dict[str, Subscriber] = {s.kind: s for s in subscribers}
        #: The same by kind name, with the delivery options they declare.
        self.kinds = Kinds(subscribers)
        self._spread_kinds = frozenset(k for k, s in self.subscribers.items() if s.delivered and s.spread)
        self._limited_kinds = frozenset(k for k, s in self.subscribers.items() if s.queue_limited)
        #: owner: this worker's id, which its leases name (a new one when not given).
        self.leases = LeaseManager(engine, settings.lease_ttl_secs, settings.lease_renew_secs, owner)
        #: The delivery loops of this worker by subscription id, and their greenlets.
        self.loops: dict[int, DeliveryLoop] = {}
        self._greenlets: dict[int, gevent.Greenlet] = {}
        #: Subscriptions whose delivery release_delivery is stopping: their loops no longer own them.
        self._releasing: set[int] = set()
        self._committer: GroupCommitter | None = None
        self._topic_depths = TopicDepths(lambda topic_id, gd: run_transaction(
            engine, lambda c: statements.topic_depth(c, topic_id, gd), write=False))
        self._overflow_log = OverflowLog(overflow_dir, settings.max_overflow_bytes)
        #: Depths of subscription queues, for the topics' max depths (see runtime.pubsub.limits).
        self._queue_depths = QueueDepths(self._read_queue_depths)
        #: Observers of publications and deliveries (metrics, archive): see runtime.pubsub.observers.
        self.observers = observers if observers is not None else Observers()
        #: Every dead letter, whatever makes it, is written and announced to the observers through it.
        self.dead_letterer = DeadLetterer(self.observers, lambda sub_id: self.registry.subs.get(sub_id))
        self._backend = SqlQueueBackend(engine, self.dead_letterer)
        #: What JSON data may hold (nesting, integer digits), at publication and when rendered for subscribers.
        self.json_limits = json_limits
        #: Entry ids of in-memory (non-GD) queue entries: negative, so they never clash with stored ones.
        self._ram_ids = itertools.count(-1, -1)
        #: Whether a subscription may receive a topic's messages (pub/sub permissions); None lets all have them.
        self.sub_allowed = sub_allowed
        self._context = Context(lambda name: self.registry.topic(name), sub_allowed, json_limits)
        #: Requests of this worker waiting for entries (long-polling pulls), woken as the loops are.
        self.watchers = QueueWatchers()
        self.wakeups = Wakeups(engine, settings.poll_interval_secs, self.loops, self.watchers)
        self.sweeper = Sweeper(self._transaction, lambda: self.registry, self.dead_letterer, self.kinds,
                               settings.sweep_interval_secs, lambda: self.leases.owns(SWEEPER_LEASE),
                               observers=self.observers, lease_ttl_secs=settings.lease_ttl_secs,
                               changed=self.reload)
        #: On PostgreSQL, vacuums the queue table once enough of it is dead (see runtime.pubsub.queue_vacuum).
        self.queue_vacuum = QueueVacuum(engine, settings.queue_vacuum_secs, settings.queue_vacuum_dead_rows)
        #: Topic and subscription administration.
        self.catalog = Catalog(engine, settings, lambda: self.registry, self.kinds, self.reload,
                               self.wakeups.poll_once)

    @property
    def hooks(self) -> Observers:
        """The former name of ``observers``."""
        return self.observers

    @property
    def committer(self) -> GroupCommitter | None:
        """The group committer of publications and loop cycles (None until started)."""
        return self._committer

    def delivering(self, sub_id: int) -> bool:
        """Whether this worker runs the delivery loop of a subscription."""
        return sub_id in self.loops

    # Lifecycle

    def start(self, background: bool = True) -> None:
        """Load topics and subscriptions; start committing, leasing, polling and sweeping."""
        self.reload()
        self.wakeups.start()
        self._committer = GroupCommitter(self.engine, self.settings.group_commit_max, self._spawn, self._committed,
                                         self._claim_loops, one_trip=self.settings.one_trip_commits)
        self._backend.writer = self._committer.run
        self._backend.nudge = self._committer.nudge
        self.observers.emit('on_start')
        if background:
            self._spawn(self.leases.run, self._wanted_leases, self.leases_changed, self._spread_leases,
                        self._busy_leases, self._give_back, name='pubsub-leases')
            if self.engine.dialect.name == 'postgresql':
                self._spawn(self.wakeups.listen, name='pubsub-listener')
            self._spawn(self.wakeups.poll_forever, name='pubsub-poller')
            self._spawn(self.sweeper.run, name='pubsub-sweeper')
            if self.queue_vacuum.enabled:
                self._spawn(self.queue_vacuum.run, name='pubsub-queue-vacuum')

    def stop(self) -> None:
        """Stop delivering and hand the leases back so another worker takes over at once."""
        self.watchers.close()
        for greenlet in list(self._greenlets.values()):
            greenlet.kill(block=False)
        self.loops.clear()
        self._greenlets.clear()
        self.observers.emit('on_stop')
        try:
            self.leases.release_all()
        except Exception as e:
            _log.warning('releasing leases failed: %s', e)

    @one_reload_at_a_time
    def reload(self) -> None:
        """Reload topics and subscriptions from the database."""
        options = self.kinds.options
        self.registry = run_transaction(self.engine, lambda c: statements.load_registry(c, self.settings, options),
                                        write=False)
        self._topic_depths.clear()  # a new subscription may have taken a topic's backlog: count again
        self._queue_depths.invalidate(self.registry.subs.keys())  # and queues may have been purged or removed
        for sub_id, loop in list(self.loops.items()):
            sub = self.registry.subs.get(sub_id)
            if sub is None or not sub.is_active:
                self._stop_loop(sub_id)
            else:
                loop.sub = sub

    def resolve(self, target: str, publisher: str = '') -> TopicInfo:
        """The topic a publication goes to: a topic by name, else a service's own topic."""
        if isinstance(target, str):
            registry = self.registry
            topic = registry.topic(target)
            if topic is not None:
                return topic
            # Publishing to a service whose topic is made, the usual case, in one lookup: what
            # catalog.ensure_service_topic would find after the checks below.
            topic = registry.service_topic(target)
            if topic is not None and self._has_service(target):
                return topic
        validate_topic_name(target)
        if self._has_service(target):
            return self.catalog.ensure_service_topic(target)
        service = aliased_service(target)
        if service is not None and self._has_service(service):
            return self.catalog.ensure_service_topic(service)
        if self.settings.auto_create_topics:
            try:
                return self.catalog.create_topic(target)
            except ConfigError:
                self.reload()  # created meanwhile by another worker
                topic = self.registry.topic(target)
                if topic is not None:
                    return topic
                raise
        raise TopicNotFound(target)

    # Publishing

    def _publication(self, target: str, data: Any, *, priority: int, expiration: float | None,
                     has_gd: bool | None, correl_id: str | None, in_reply_to: str | None,
                     ext_client_id: str | None, mime_type: str | None, publisher: str, sub_filter: Any,
                     ext_pub_time: str | None) -> tuple[TopicInfo, Publication, list[SubInfo]]:
        """The checks every publication passes, and what it becomes: its topic, itself, its subscriptions."""
        topic = self.resolve(target, publisher)
        if not topic.is_active:
            raise TopicInactive(topic.name)
        priority = message.check_priority(priority)
        if expiration is None:
            expiration = self.settings.default_expiration_secs
        expiration = min(message.check_expiration(expiration), topic.limit_message_expiry)
        text, mime, size = message.stored_data(data, mime_type, self.json_limits, self.settings.max_message_size)
        if correl_id is not None or in_reply_to is not None or ext_client_id is not None or ext_pub_time is not None:
            message.check_fields(correl_id=(correl_id, 200), in_reply_to=(in_reply_to, 200),
                                 ext_client_id=(ext_client_id, 200), pub_time=(ext_pub_time, 64))
        gd = True if topic.is_service_topic else (topic.has_gd if has_gd is None else bool(has_gd))
        # A paused subscription (is_active false) still queues: only its delivery waits.
        subs = self.registry.all_subscribers(topic.name)
        if sub_filter is not None:
            subs = [s for s in subs if sub_filter(s)]
        if self.sub_allowed is not None and subs:
            subs = [s for s in subs if self.sub_allowed(s, topic)]
        now = time.time()
        msg_id = MsgId(MSG_ID_PREFIX + random_hex(12))
        pub = Publication(msg_id=msg_id, topic_id=topic.id, topic_name=topic.name, data=text, mime_type=mime,
                          priority=priority, pub_time=now, expiration_time=now + expiration, publisher=publisher,
                          correl_id=correl_id, in_reply_to=in_reply_to, ext_client_id=ext_client_id, has_gd=gd,
                          size=size, sub_ids=[s.id for s in subs], ext_pub_time=ext_pub_time or None)
        return topic, pub, subs

    def publish(self, target: str, data: Any, *, priority: int = 5, expiration: float | None = None,
                has_gd: bool | None = None, correl_id: str | None = None, in_reply_to: str | None = None,
                ext_client_id: str | None = None, mime_type: str | None = None, publisher: str = '',
                sub_filter: Any = None, ext_pub_time: str | None = None) -> MsgId:
        """Publish a message to a topic or a service; returns its msg_id once stored.

        ext_pub_time is the publisher's own time, kept verbatim and shown to subscribers as
        pub_time_iso; ordering and expiry use the server's clock.
        """
        topic, pub, subs = self._publication(
            target, data, priority=priority, expiration=expiration, has_gd=has_gd, correl_id=correl_id,
            in_reply_to=in_reply_to, ext_client_id=ext_client_id, mime_type=mime_type, publisher=publisher,
            sub_filter=sub_filter, ext_pub_time=ext_pub_time)
        msg_id, gd = cast(MsgId, pub.msg_id), pub.has_gd
        if not subs:
            if topic.on_no_subs == 'drop':
                _log.debug('message %s to %s dropped: no subscribers', msg_id, topic.name)
                return msg_id
            pub.in_topic = True
            if self._topic_depths.full(topic, gd):
                if topic.on_max_depth == 'reject':
                    raise TopicFull(topic.name, self._topic_depths.depth(topic.id))
                self._overflow_log.overflow(pub)
                msg_id.overflowed = True
                self.observers.emit('after_publish', pub, True)
                return msg_id
        # Some queues are not limited (services': the runtime drains them itself, and a message published
        # to a service must survive until it is processed; an overflowed copy is never delivered).
        limited = [s for s in subs if s.kind in self._limited_kinds]
        if limited:
            subs = within_queue_limits(self._queue_depths, self._overflow_log, topic, pub, subs, limited, gd)
            if not subs:  # every copy went to the overflow log
                msg_id.overflowed, pub.sub_ids = True, []
                self.observers.emit('after_publish', pub, True)
                return msg_id
            msg_id.overflowed = len(subs) < len(pub.sub_ids)
            pub.sub_ids = [s.id for s in subs]
        reserved = [s.id for s in subs if s.kind in self._limited_kinds]
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
            self._topic_depths.added(topic.id)
        return msg_id

    def prepare(self, target: str, data: Any, *, priority: int = 5, expiration: float | None = None,
                correl_id: str | None = None, in_reply_to: str | None = None, ext_client_id: str | None = None,
                mime_type: str | None = None, publisher: str = '') -> Publication | None:
        """Check a GD publication as publish() does, without storing it: store it with store_prepared().

        None when the topic drops it (no subscribers and on_no_subs = drop) or every copy went to the
        overflow log. Limits are decided here as far as they can be before the commit: a topic or queue
        at its max depth refuses it (reject) or has the copy written to the overflow log at once
        (overflow), so that a prepared publication that is never stored may still have left an
        overflow line. Depth counts take the publication in once it is stored.
        """
        topic, pub, subs = self._publication(
            target, data, priority=priority, expiration=expiration, has_gd=True, correl_id=correl_id,
            in_reply_to=in_reply_to, ext_client_id=ext_client_id, mime_type=mime_type, publisher=publisher,
            sub_filter=None, ext_pub_time=None)
        if not subs:
            if topic.on_no_subs == 'drop':
                return None
            pub.in_topic = True
            if self._topic_depths.full(topic, True):
                if topic.on_max_depth == 'reject':
                    raise TopicFull(topic.name, self._topic_depths.depth(topic.id))
                self._overflow_log.overflow(pub)
                self.observers.emit('after_publish', pub, True)
                return None
        limited = [s for s in subs if s.kind in self._limited_kinds]
        if limited:
            subs = within_queue_limits(self._queue_depths, self._overflow_log, topic, pub, subs, limited, True)
            if not subs:
                pub.sub_ids = []
                self.observers.emit('after_publish', pub, True)
                return None
            cast(MsgId, pub.msg_id).overflowed = len(subs) < len(pub.sub_ids)
            pub.sub_ids = [s.id for s in subs]
        return pub

    def store_prepared(self, pubs: Sequence[Publication], work: Callable[[Connection], T] | None = None) -> T | None:
        """Store prepared publications and run work(conn) in one transaction; returns what work returned.

        Either both are committed or neither (work raising, or the database failing, stores no
        publication and re-raises). Goes through the group committer, so that many callers share
        commits; subscribers are woken and observers told once it is durable.
        """
        assert self._committer is not None, 'broker not started'
        committer = self._committer
        pubs = list(pubs)

        def in_transaction(conn: Connection) -> T | None:
            if pubs:
                committer.write_publications(conn, pubs)
            return work(conn) if work is not None else None
        result = committer.run(in_transaction)
        if not pubs:
            return result
        limited = {s.id for s in self.registry.subs.values() if s.kind in self._limited_kinds}
        for pub in pubs:
            counted = [i for i in pub.sub_ids if i in limited]
            if counted:  # reserved and released at once: publish() reserves before the commit instead
                self._queue_depths.reserve(counted)
                self._queue_depths.release(counted)
            if pub.in_topic:
                self._topic_depths.added(pub.topic_id)
            self.observers.emit('after_publish', pub, getattr(pub.msg_id, 'overflowed', False))
        self._committed(pubs)
        return result

    def _read_queue_depths(self, sub_ids: list[int]) -> dict[int, int]:
        """Depths of queues: stored entries plus the non-GD ones this worker's loops hold in memory."""
        try:
            depths = run_transaction(self.engine, lambda c: statements.queue_depths(c, sub_ids), write=False)
        except DBAPIError as e:
            raise StorageUnavailable(f'storage unavailable, nothing was stored: {type(e.orig).__name__}') from None
        for sub_id in sub_ids:
            loop = self.loops.get(sub_id)
            if loop is not None and loop.ram_depth:
                depths[sub_id] = depths.get(sub_id, 0) + loop.ram_depth
        return depths

    def _hold_in_memory(self, pub: Publication, subs: list[SubInfo]) -> list[int]:
        """Queue a non-GD message in the RAM of the loops this worker runs; returns the other subs.

        Another process's memory cannot be reached, so subscriptions delivered elsewhere (or by
        nobody yet, or pulled by clients) get the message through the database instead.
        """
        remote = []
        for sub in subs:
            loop = self.loops.get(sub.id)
            if loop is None or not self.leases.owns(lease_name(sub.id)):
                remote.append(sub.id)
                continue
            loop.push(message.held_delivery(pub, sub.id, next(self._ram_ids)))
        return remote

    def _claim_loops(self, pubs: list[Publication]) -> list[tuple[Callable[[Connection], Any], AsyncResult]]:
        """The next-batch work of this worker's idle loops that these publications feed."""
        claims, seen = [], set()
        for pub in pubs:
            for sub_id in pub.sub_ids:
                if sub_id in seen:
                    continue
                seen.add(sub_id)
                loop = self.loops.get(sub_id)
                if loop is None:
                    continue
                try:
                    claim = loop.claim()
                except Exception:  # the loop then runs its own cycle when woken, as without a claim
                    _log.exception('%s: taking the next batch in the publishers\' commit failed', loop.sub.label)
                    continue
                if claim is not None:
                    claims.append(claim)
        return claims

    def _committed(self, pubs: list[Publication]) -> None:
        watchers = self.watchers
        for pub in pubs:
            for sub_id in pub.sub_ids:
                loop = self.loops.get(sub_id)
                if loop is not None:
                    loop.wake()
                if watchers:
                    watchers.wake(sub_id)

    def _transaction(self, work: Callable[[Connection], T]) -> T:
        """Run work in a write transaction of its own."""
        return run_transaction(self.engine, work)

    # Delivery

    def _wants(self, sub: SubInfo) -> bool:
        """Whether this worker should hold a subscription's lease now (its plug-in decides)."""
        plugin = self.subscribers.get(sub.kind)
        return plugin is not None and plugin.delivered and sub.is_active and plugin.wants_delivery(sub)

    def _wanted_leases(self) -> set[str]:
        wanted = {lease_name(s.id) for s in self.registry.subs.values() if self._wants(s)}
        wanted.add(SWEEPER_LEASE)
        return wanted

    def _spread_leases(self) -> set[str]:
        """The wanted leases shared out among the live workers (not a WebSocket subscription's)."""
        return {lease_name(s.id) for s in self.registry.subs.values()
                if s.kind in self._spread_kinds and self._wants(s)}

    def _busy_leases(self) -> set[str]:
        """The leases of subscriptions with messages waiting: in their stored queues or in a loop's memory."""
        sub_ids = run_transaction(self.engine, statements.subs_with_work, write=False)
        sub_ids.update(sub_id for sub_id, loop in list(self.loops.items()) if loop.ram_depth)
        return {lease_name(sub_id) for sub_id in sub_ids}

    def _give_back(self, names: set[str]) -> None:
        """Hand back leases above this worker's share, each once its loop has settled its current batch."""
        for name in names:
            if name.startswith('pubsub:sub:'):
                self._spawn(self.release_delivery, int(name.rsplit(':', 1)[1]), self.settings.lease_ttl_secs,
                            name=f'give-back:{name}')
            else:
                self.leases.release(name)

    def want_delivery(self) -> None:
        """The leases this worker wants changed (a WebSocket client attached here): refresh them now."""
        self.leases.kick()

    def release_delivery(self, sub_id: int, grace_secs: float = RELEASE_GRACE_SECS) -> None:
        """Stop delivering a subscription in this worker now and hand its lease back at once.

        The loop may store the outcome of the batch it is in (acks, messages due again) for up to
        grace_secs, then it is killed; the lease row is deleted after, so that no other worker
        starts delivering while this one still settles.
        """
        self._releasing.add(sub_id)
        try:
            loop, greenlet = self.loops.get(sub_id), self._greenlets.get(sub_id)
            if loop is not None:
                loop.wake()  # a waiting loop looks at once, sees it no longer owns the lease, and ends
            if greenlet is not None and greenlet is not gevent.getcurrent():
                greenlet.join(timeout=grace_secs)
            self._stop_loop(sub_id)
            self.leases.release(lease_name(sub_id))
        finally:
            self._releasing.discard(sub_id)

    def leases_changed(self, gained: set[str], lost: set[str]) -> None:
        """Start delivering the subscriptions whose leases this worker gained; stop those it lost."""
        for name in lost:
            if name.startswith('pubsub:sub:'):
                self._stop_loop(int(name.rsplit(':', 1)[1]))
        for name in gained:
            if name.startswith('pubsub:sub:'):
                sub = self.registry.subs.get(int(name.rsplit(':', 1)[1]))
                if sub is not None and self._wants(sub):
                    self._start_loop(sub)
                else:
                    # Paused, or (a WebSocket client) detached, while the lease was being taken. Forgotten as
                    # held, so that the next refresh reports it as gained again if it is wanted by then (the
                    # client back already: else no loop would ever start), or hands it back if it is not.
                    self.leases.held.discard(name)

    def _start_loop(self, sub: SubInfo) -> None:
        if sub.id in self.loops:
            return
        name = lease_name(sub.id)
        fence = self.leases.fence(name)
        if fence is None:  # not (or no longer) held: the next refresh reports it if it is taken
            self.leases.held.discard(name)
            return

        def owns() -> bool:
            return sub.id not in self._releasing and self.leases.owns(name)
        deliverer = self.subscribers[sub.kind].deliverer(self._context, sub)
        loop = DeliveryLoop(sub, FencedQueue(self._backend, fence), deliverer.deliver, owns, self.observers,
                            deliver_batch=deliverer.deliver_batch, on_wake=deliverer.wake)
        if deliverer.progress is not None:
            deliverer.progress(loop.settled)
        greenlet = self._spawn(loop.run, name=f'delivery:{sub.label}')
        greenlet.link(lambda _g, sub_id=sub.id: self._loop_ended(sub_id, greenlet))
        if deliverer.close is not None:
            close = deliverer.close
            greenlet.link(lambda _g: close())
        self.loops[sub.id] = loop
        self._greenlets[sub.id] = greenlet
        _log.info('delivering %s in this worker', sub.label)

    def _loop_ended(self, sub_id: int, greenlet: gevent.Greenlet) -> None:
        if self._greenlets.get(sub_id) is greenlet:
            del self._greenlets[sub_id]
            self.loops.pop(sub_id, None)
            self.leases.held.discard(lease_name(sub_id))  # taken again at the next refresh if still ours

    def _stop_loop(self, sub_id: int) -> None:
        self.loops.pop(sub_id, None)
        greenlet = self._greenlets.pop(sub_id, None)
        if greenlet is not None:
            greenlet.kill(block=False)
        # Forgotten as held, so that the next refresh reports the lease as gained if it is still ours and
        # wanted (a subscription paused and resumed between two refreshes), and the loop starts again.
        self.leases.held.discard(lease_name(sub_id))

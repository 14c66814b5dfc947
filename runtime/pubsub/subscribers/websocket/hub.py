"""The WebSocket hub: the one thing the HTTP side calls to subscribe, attach, resume and detach.

A WebSocket subscription is an ordinary subscription of kind ``websocket`` owned by a security
definition, with a ``conduit_ws_client`` row saying which worker holds its client's connection
(``owner``, this worker's lease-owner id; '' while no client is attached) and its last activity.
A client attaches a subscription to its connection (``attach``: a new subscription, or one it
resumes after a reconnect); the subscription's delivery lease then follows it to this worker
(``runtime.pubsub.subscribers.websocket``: only this worker wants it), and its delivery loop sends
batches over that connection. When the connection closes, ``detach`` stops the loop at once and
hands the lease back, and the messages the client had not acknowledged are due again at once.

Resuming moves a subscription: on this worker the previous connection is told at once
(``Attached.taken_over``); on another worker, its heartbeat finds the row owned by someone else
and does the same there, then hands its lease back, which this worker's next lease refresh takes.
The heartbeat (``run``, every ``heartbeat_secs``: the lease renewal interval) also writes the last
activity and the unacknowledged count of every subscription attached here; a worker that stops
writing it for long enough is taken as dead, and the sweeper may then delete its subscriptions
once inactive (``clients.sweep_inactive``). The client rows' statements are in ``clients``, the
rest in ``runtime.pubsub.statements``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from weakref import WeakValueDictionary

import gevent
import gevent.lock
from sqlalchemy import Connection, Engine

from runtime.db.blocking import run_transaction
from runtime.errors import ConfigError, InvalidTopicName, SubscriptionLimitReached, SubscriptionNotFound
from runtime.pubsub import statements
from runtime.pubsub.subscribers.websocket import clients
from runtime.pubsub.subscribers.websocket.kind import KIND_WEBSOCKET
from runtime.util.spawn import killed

if TYPE_CHECKING:
    from runtime.pubsub.catalog import Catalog
    from runtime.pubsub.registry import Registry, SubInfo
    from runtime.pubsub.subscribers.websocket.kind import Attached, Attachments

_log = logging.getLogger(__name__)


class _Lock:
    """A lock that a WeakValueDictionary can hold: alive while a ``with`` block (or a waiter) holds it."""

    __slots__ = ('_lock', '__weakref__')

    def __init__(self) -> None:
        self._lock = gevent.lock.Semaphore()

    def __enter__(self) -> _Lock:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class WebSocketHub:
    """Subscribes, attaches, resumes and detaches this worker's WebSocket subscriptions; writes their heartbeat.

    ``owner`` is this worker's lease-owner id; ``want_delivery`` asks for the leases to be refreshed
    now and ``release_delivery(sub_id)`` stops a subscription's delivery loop here and hands its lease
    back (both the broker's); ``registry`` and ``reload`` are the broker's registry and its reload.
    ``max_per_definition`` is the most WebSocket subscriptions one security definition may hold
    (``[websocket] max_subscriptions_per_definition``; 0: no limit).
    """

    def __init__(self, engine: Engine, attachments: Attachments, *, catalog: Catalog,
                 registry: Callable[[], Registry], reload: Callable[[], None], owner: str,
                 want_delivery: Callable[[], None], release_delivery: Callable[[int], None],
                 heartbeat_secs: float, max_per_definition: int = 200) -> None:
        self._engine = engine
        self._attachments = attachments
        self._catalog = catalog
        self._registry = registry
        self._reload = reload
        self._owner = owner
        self._want_delivery = want_delivery
        self._release_delivery = release_delivery
        self._heartbeat_secs = heartbeat_secs
        self.max_per_definition = max_per_definition
        #: When each subscription attached here was last active (attach, ack), for whoever asks.
        self.last_activity: dict[int, float] = {}
        #: The row lock of each subscription someone is using (forgotten once nobody holds it).
        self._locks: WeakValueDictionary[int, _Lock] = WeakValueDictionary()

    # Subscriptions

    def subscribe(self, security: str, pattern: str, window: int) -> SubInfo:
        """A new WebSocket subscription of a security definition, delivering window messages at a time.

        ConfigError when the pattern is not a valid topic name or pattern; SubscriptionLimitReached (409)
        when the definition holds max_per_definition subscriptions already. Subscriptions outlive their
        connections (until the sweeper finds them inactive), and each is one more queue row written per
        publication to its topics: without a limit one credential could make them by the thousand.
        Resuming one (``find``, then ``attach``) makes none and is never refused by it.
        """
        limit = self.max_per_definition

        def check(conn: Connection) -> None:
            # In the inserting transaction, under a lock (statements.count_subscriptions): concurrent
            # subscribes of one definition on any workers cannot overshoot the limit together.
            if statements.count_subscriptions(conn, KIND_WEBSOCKET, security) >= limit:
                raise SubscriptionLimitReached(security, 'WebSocket', limit,
                                               '[websocket] max_subscriptions_per_definition')
        try:
            return self._catalog.subscribe(pattern, KIND_WEBSOCKET, security=security,
                                           options={'delivery_batch_size': window},
                                           check=check if limit > 0 else None)
        except InvalidTopicName as e:
            raise ConfigError('subscription', str(e)) from None

    def find(self, security: str, sub_key: str) -> SubInfo:
        """A security definition's own WebSocket subscription by sub_key; SubscriptionNotFound otherwise."""
        sub = self._registry().subs_by_key.get(sub_key)
        if sub is None and run_transaction(self._engine, lambda c: statements.subscription_exists(c, sub_key),
                                           write=False):
            self._reload()  # made by another worker since this one's last sync
            sub = self._registry().subs_by_key.get(sub_key)
        if sub is None or sub.kind != KIND_WEBSOCKET or sub.security != security:
            raise SubscriptionNotFound('WebSocket subscription')
        return sub

    def unsubscribe(self, sub: SubInfo) -> None:
        """Remove a subscription with its queue and client row; its delivery loop here stops with it."""
        attached = self._attachments.get(sub.id)
        if attached is not None:
            # Nothing more is sent; the reload that follows the removal stops the loop at once (nothing of
            # its queue is left to settle), and the next lease refresh drops the lease.
            self._attachments.detach(sub.id, attached)
        self.last_activity.pop(sub.id, None)
        self._catalog.unsubscribe(sub.sub_key)

    def queue_depth(self, sub: SubInfo) -> int:
        """How many messages wait in a subscription's queue (those its client holds unacknowledged among them)."""
        return run_transaction(self._engine, lambda c: statements.queue_depth(c, sub.id), write=False)

    # Clients

    def _row_lock(self, sub_id: int) -> _Lock:
        """One subscription's client-row writes of this worker, one at a time: a detach that ends after
        a resume on this worker must not blank the row the resume wrote."""
        lock = self._locks.get(sub_id)
        if lock is None:
            lock = self._locks[sub_id] = _Lock()
        return lock

    def attach(self, sub: SubInfo, attached: Attached, peer: str) -> int:
        """Deliver a subscription over this connection from now on; returns its queue depth.

        A connection it was attached to before is told (``taken_over``): at once on this worker, at
        the next heartbeat on another. SubscriptionNotFound if it was removed meanwhile.
        """
        now = time.time()

        def work(conn: Connection) -> int | None:
            if not clients.attach(conn, sub.id, self._owner, peer, now):
                return None
            return statements.queue_depth(conn, sub.id)
        with self._row_lock(sub.id):
            depth = run_transaction(self._engine, work)
            if depth is None:
                raise SubscriptionNotFound('WebSocket subscription')
            previous = self._attachments.attach(sub.id, attached)
        self.last_activity[sub.id] = now
        if previous is not None:
            _log.info('%s: resumed on another connection of this worker', sub.label)
            self._taken_over(previous, sub.id)
        self._want_delivery()  # the lease follows the client now, not at the next renewal
        return depth

    def detach(self, sub_id: int, attached: Attached) -> None:
        """This connection no longer holds the subscription: stop delivering it here and hand its lease back.

        Nothing happens if the subscription was attached to another connection meanwhile.
        """
        if not self._attachments.detach(sub_id, attached):
            return
        self.last_activity.pop(sub_id, None)
        try:
            self._release_delivery(sub_id)
        except Exception as e:  # the lease then lapses: unwanted, the next refresh drops it
            _log.warning('sub#%d: handing its delivery lease back failed: %s: %s', sub_id, type(e).__name__, e)
        now = time.time()
        try:
            with self._row_lock(sub_id):
                if sub_id in self._attachments:
                    return  # resumed on another connection of this worker meanwhile: the row is its client's
                run_transaction(self._engine, lambda c: clients.detach(c, sub_id, self._owner, now))
        except Exception as e:
            # The row keeps this worker as owner: once the heartbeat has not written it for long enough,
            # the sweeper treats the subscription as a dead worker's.
            _log.warning('sub#%d: recording that its client left failed: %s: %s', sub_id, type(e).__name__, e)

    def activity(self, sub_id: int) -> None:
        """The client acknowledged messages (while attached, every heartbeat writes the activity)."""
        if sub_id in self._attachments:
            self.last_activity[sub_id] = time.time()

    # Heartbeat

    def run(self) -> None:
        """Write the heartbeat every heartbeat_secs; until killed."""
        while True:
            gevent.sleep(self._heartbeat_secs)
            try:
                self.heartbeat()
            except gevent.GreenletExit:
                raise
            except Exception as e:
                if killed(e):
                    return  # stopping: the kill landed in a database call
                _log.warning('WebSocket heartbeat failed: %s: %s', type(e).__name__, e)

    def heartbeat(self) -> list[int]:
        """Write activity and unacknowledged counts of the subscriptions attached here; detach those moved away.

        Returns the subscriptions detached because another connection resumed them (or they were removed).
        """
        attached = dict(self._attachments.items())
        if not attached:
            return []
        in_flight = {sub_id: self._in_flight(a) for sub_id, a in attached.items()}
        now = time.time()
        lost = run_transaction(self._engine, lambda c: clients.heartbeat(c, self._owner, in_flight, now))
        moved = []
        for sub_id in sorted(lost):
            connection = attached[sub_id]
            if not self._attachments.detach(sub_id, connection):
                continue  # detached, or attached to another connection here, meanwhile
            self.last_activity.pop(sub_id, None)
            moved.append(sub_id)
            sub = self._registry().subs.get(sub_id)
            _log.info('%s: resumed on another worker or removed; detached here',
                      sub.label if sub is not None else f'sub#{sub_id}')
            # Told first: the batch it is waiting on ends (ClientGone), so its loop settles and stops quickly.
            self._taken_over(connection, sub_id)
            try:
                self._release_delivery(sub_id)
            except Exception as e:
                _log.warning('sub#%d: handing its delivery lease back failed: %s: %s', sub_id, type(e).__name__, e)
        return moved

    def stop(self) -> None:
        """This worker is stopping: its clients' rows no longer name it (the connections close with it)."""
        for sub_id, attached in self._attachments.items():
            self._attachments.detach(sub_id, attached)
        self.last_activity.clear()
        try:
            run_transaction(self._engine, lambda c: clients.release_all(c, self._owner, time.time()))
        except Exception as e:
            _log.warning('recording that this worker\'s WebSocket clients left failed: %s: %s', type(e).__name__, e)

    @staticmethod
    def _in_flight(attached: Attached) -> int:
        try:
            return int(attached.in_flight)
        except Exception:  # a connection breaking meanwhile must not stop the heartbeat of the others
            return 0

    @staticmethod
    def _taken_over(attached: Attached, sub_id: int) -> None:
        try:
            attached.taken_over(sub_id)
        except Exception:
            _log.exception('sub#%d: telling the previous connection that it lost the subscription failed', sub_id)

"""The WebSocket kind's table, ``conduit_ws_client``: who holds each subscription's client, and the sweep of idle ones.

One row per WebSocket subscription, added with it (``add``) and deleted with it (the core deletes
every row that references a subscription): ``owner`` is the lease-owner id of the worker holding
the client's connection ('' while none is attached), with the client's address, when it attached,
its last activity and the messages it held unacknowledged at the worker's last heartbeat. The hub
(``hub``) writes it; the admin API and the dashboard read it (``websocket_clients``, shown with
``shown_client``; ``admin_fields`` adds the client to the admin API's subscription views); the sweeper
asks the kind which subscriptions it delivers not now and which are idle past their limit.

The idle ones are those with no client attached and no activity for their topic's
``limit_sub_inactivity`` seconds (0: never; for a pattern subscription the largest limit among the
topics it matches now, the default when it matches none), and those whose client's worker stopped
writing its heartbeat for that long or for three lease TTLs, whichever is longer (the worker died
without detaching its clients).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update

from runtime.db.models import QueueEntry, Subscription, WsClient
from runtime.pubsub import statements
from runtime.pubsub.options import DeliveryOptions
from runtime.pubsub.registry import Registry, SubInfo, TopicInfo, parse_options
from runtime.pubsub.subscribers.base import Read
from runtime.util.timefmt import iso, iso_or_none

#: The limit of a WebSocket subscription that matches no topic now.
DEFAULT_INACTIVITY_SECS = TopicInfo(0, '').limit_sub_inactivity

_WS = WsClient.__table__


def add(conn: Connection, sub_id: int, now: float) -> None:
    """The row of a new WebSocket subscription: no client attached, active now."""
    conn.execute(insert(WsClient).values(sub_id=sub_id, owner='', peer='', connected_at=None,
                                         last_active_at=now, in_flight=0))


def attach(conn: Connection, sub_id: int, owner: str, peer: str, now: float) -> bool:
    """Record that a worker (owner) holds the client of a subscription now; False if the subscription is gone."""
    return conn.execute(update(WsClient).where(WsClient.sub_id == sub_id).values(
        owner=owner, peer=peer[:100], connected_at=now, last_active_at=now, in_flight=0)).rowcount == 1


def detach(conn: Connection, sub_id: int, owner: str, now: float) -> bool:
    """No client attached any more, if owner still held it (else another worker has it now); whether it did."""
    return conn.execute(update(WsClient).where(WsClient.sub_id == sub_id, WsClient.owner == owner).values(
        owner='', peer='', connected_at=None, last_active_at=now, in_flight=0)).rowcount == 1


def release_all(conn: Connection, owner: str, now: float) -> int:
    """Detach every client a worker holds (it is stopping); how many it held."""
    return conn.execute(update(WsClient).where(WsClient.owner == owner).values(
        owner='', peer='', connected_at=None, last_active_at=now, in_flight=0)).rowcount


def heartbeat(conn: Connection, owner: str, in_flight: dict[int, int], now: float) -> set[int]:
    """Activity of the clients a worker holds (sub_id -> unacked messages); returns those it no longer holds.

    A subscription is no longer held when another worker's client resumed it (the row names that
    worker) or when it was removed (no row).
    """
    if not in_flight:
        return set()
    conn.execute(update(_WS).where(_WS.c.sub_id == bindparam('b_sub_id'), _WS.c.owner == owner)
                 .values(last_active_at=now, in_flight=bindparam('b_in_flight')),
                 [{'b_sub_id': sub_id, 'b_in_flight': count} for sub_id, count in in_flight.items()])
    held = set(conn.execute(select(WsClient.sub_id).where(WsClient.sub_id.in_(list(in_flight)),
                                                          WsClient.owner == owner)).scalars())
    return set(in_flight) - held


def activity(conn: Connection) -> dict[int, tuple[str, float]]:
    """Every WebSocket subscription's client owner ('' = none attached) and last activity, by subscription id."""
    return {r.sub_id: (r.owner, r.last_active_at)
            for r in conn.execute(select(WsClient.sub_id, WsClient.owner, WsClient.last_active_at)).all()}


def unattached(conn: Connection) -> set[int]:
    """The WebSocket subscriptions with no client attached: no delivery loop runs for them."""
    return {sub_id for sub_id, (owner, _) in activity(conn).items() if not owner}


def delete_if_inactive(conn: Connection, sub_id: int, owner: str, before: float) -> bool:
    """Delete a WebSocket subscription with its queue if its client row still says owner and no activity since before.

    The row is checked and deleted in one statement, so that a client attaching meanwhile keeps it.
    """
    claimed = conn.execute(delete(WsClient).where(WsClient.sub_id == sub_id, WsClient.owner == owner,
                                                  WsClient.last_active_at < before)).rowcount
    if claimed:
        statements.delete_subscription(conn, sub_id)
    return bool(claimed)


def websocket_clients(conn: Connection) -> list[dict[str, Any]]:
    """Every WebSocket subscription with its client: who, since when, last activity, unacked and queued messages."""
    depth = (select(QueueEntry.sub_id, func.count().label('depth'))
             .where(QueueEntry.sub_id.in_(select(WsClient.sub_id))).group_by(QueueEntry.sub_id).subquery())
    rows = conn.execute(
        select(WsClient.sub_id, WsClient.owner, WsClient.peer, WsClient.connected_at, WsClient.last_active_at,
               WsClient.in_flight, Subscription.sub_key, Subscription.security, Subscription.pattern,
               Subscription.is_active, Subscription.options, func.coalesce(depth.c.depth, 0).label('queue_depth'))
        .join(Subscription, Subscription.id == WsClient.sub_id)
        .outerjoin(depth, depth.c.sub_id == WsClient.sub_id)
        .order_by(WsClient.sub_id)).all()
    default_window = DeliveryOptions().delivery_batch_size
    clients = []
    for r in rows:
        try:
            window = parse_options(r.options).get('delivery_batch_size', default_window)
        except ValueError:
            window = default_window
        clients.append({'sub_id': r.sub_id, 'sub_key': r.sub_key, 'security': r.security, 'pattern': r.pattern,
                        'is_active': bool(r.is_active), 'window': window, 'owner': r.owner, 'peer': r.peer,
                        'connected': r.owner != '', 'connected_at': r.connected_at,
                        'last_active_at': r.last_active_at, 'in_flight': r.in_flight,
                        'queue_depth': int(r.queue_depth)})
    return clients


def shown_client(client: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """A row of ``websocket_clients`` as the admin API shows a client: times also in ISO 8601, and its idle time."""
    now = time.time() if now is None else now
    return {'connected': client['connected'], 'owner': client['owner'], 'peer': client['peer'],
            'window': client['window'], 'in_flight': client['in_flight'],
            'connected_at': client['connected_at'], 'connected_at_iso': iso_or_none(client['connected_at']),
            'last_active_at': client['last_active_at'], 'last_active_at_iso': iso(client['last_active_at']),
            'idle_secs': round(max(0.0, now - client['last_active_at']), 3)}


def admin_fields(read: Read, subs: list[SubInfo]) -> dict[int, dict[str, Any]]:
    """Each subscription's ``client`` (null when its row is missing), all read in one transaction."""
    if not subs:
        return {}
    rows = {c['sub_id']: c for c in read(websocket_clients)}
    now = time.time()
    return {s.id: {'client': shown_client(rows[s.id], now) if s.id in rows else None} for s in subs}


# Sweeping


def inactivity_limits(registry: Registry, subs: Iterable[SubInfo]) -> dict[int, int | None]:
    """Each subscription's limit_sub_inactivity in seconds, or None for never.

    A subscription to one topic has that topic's; a pattern subscription the largest among the
    topics it matches (0, "never", is the largest of all), or the default when it matches none.
    """
    limits: dict[int, int | None] = {}
    found: dict[int, list[int]] = {}
    for sub in subs:
        topic = registry.topic(sub.pattern)  # topic names have no wildcards: found means exact
        if topic is not None:
            limits[sub.id] = topic.limit_sub_inactivity or None
        else:
            found[sub.id] = []
    if found:
        # One pass over the topics through the pattern index, rather than every pattern against every topic.
        for topic in registry.topics.values():
            for sub in registry.all_subscribers(topic.name):
                if sub.id in found:
                    found[sub.id].append(topic.limit_sub_inactivity)
        for sub_id, values in found.items():
            if not values:
                limits[sub_id] = DEFAULT_INACTIVITY_SECS
            else:
                limits[sub_id] = None if 0 in values else max(values)
    return limits


def sweep_inactive(conn: Connection, registry: Registry, subs: list[SubInfo], now: float,
                   dead_owner_secs: float) -> list[tuple[SubInfo, str]]:
    """Delete the subscriptions idle past their limit with their queues; each with why, for the log."""
    by_id = {s.id: s for s in subs}
    limits = inactivity_limits(registry, subs)
    gone = []
    for sub_id, (owner, last_active_at) in activity(conn).items():
        sub, limit = by_id.get(sub_id), limits.get(sub_id)
        if sub is None or limit is None:  # made since this worker's last reload, or never expires
            continue
        before = now - (max(limit, dead_owner_secs) if owner else limit)
        if last_active_at < before and delete_if_inactive(conn, sub_id, owner, before):
            gone.append((sub, f'no client and no activity for {now - last_active_at:.0f} s (limit_sub_inactivity)'))
    return gone

"""WebSocket publishers and subscribers at ``GET /pubsub/ws`` (docs/websockets.md has the protocol).

- ``handshake``: the upgrade request's checks and the 101 answer; the marker that tells the gunicorn
  worker the socket was taken over.
- ``connection``: RFC 6455 frames over the taken-over socket (wsproto does the framing): bounded
  messages, pings and dead-peer detection, one writer at a time.
- ``session``: the JSON protocol of one connection (hello, publish, subscribe, ack, unsubscribe, ping)
  and its subscriptions' windows, which the pub/sub layer's delivery loops send through.
- ``resource``: the falcon resource that authenticates the upgrade and runs a session.

The HTTP side only speaks the protocol: subscriptions, leases, presence and delivery belong to
``runtime.pubsub`` (``WebSocketHub``, the ``websocket`` subscriber plug-in).
"""

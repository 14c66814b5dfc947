"""The WebSocket subscriber kind: its plug-in (``kind``), its table (``clients``), the hub HTTP calls (``hub``).

What other modules use is re-exported here.
"""

from runtime.pubsub.subscribers.websocket.clients import shown_client
from runtime.pubsub.subscribers.websocket.hub import WebSocketHub
from runtime.pubsub.subscribers.websocket.kind import (
    KIND_WEBSOCKET,
    AckTimeout,
    Attached,
    Attachments,
    ClientGone,
    WebSocketSubscriber,
)

__all__ = ['KIND_WEBSOCKET', 'AckTimeout', 'Attached', 'Attachments', 'ClientGone', 'WebSocketHub',
           'WebSocketSubscriber', 'shown_client']

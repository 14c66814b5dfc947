"""What the WebSocket side tells the metrics: connections opened and closed, frames received.

``WebSocketMetrics`` is the protocol the HTTP side (and the hub) call; ``runtime.observability.metrics.Metrics``
implements it, and ``NoWebSocketMetrics`` is the no-op for code running without metrics (tests,
tools). This module imports nothing of Conduit, so any layer may depend on it without tying
itself to prometheus_client or to the metrics' database reads.

The frame counter's ``action`` label takes only the values in ``FRAME_ACTIONS``: anything else a
client sends counts as ``INVALID_ACTION``, so that no client can add series. Two more values count
the frames that closed a connection for breaking a limit: ``RATE_LIMITED`` (more frames per second
than allowed, 1008) and ``TOO_LARGE`` (a message over the size allowed, 1009).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ['FRAME_ACTIONS', 'INVALID_ACTION', 'RATE_LIMITED', 'TOO_LARGE', 'NoWebSocketMetrics', 'WebSocketMetrics',
           'frame_action']

#: Label of a frame that is not one of the protocol's client actions (not JSON, unknown action, binary...).
INVALID_ACTION = 'invalid'

#: Label of the frame that closed its connection for coming faster than the connection's frame rate allows.
RATE_LIMITED = 'rate_limited'

#: Label of the frame that closed its connection for making a message larger than the connection allows.
TOO_LARGE = 'too_large'

#: Every value the frames counter's action label may take.
FRAME_ACTIONS = frozenset(('hello', 'publish', 'subscribe', 'ack', 'unsubscribe', 'ping', INVALID_ACTION,
                           RATE_LIMITED, TOO_LARGE))


def frame_action(action: object) -> str:
    """The label of a client frame's action: the action itself when the protocol knows it, else 'invalid'."""
    return action if isinstance(action, str) and action in FRAME_ACTIONS else INVALID_ACTION


class WebSocketMetrics(Protocol):
    """What a WebSocket connection reports: it opened, it closed, it received a frame."""

    def websocket_opened(self) -> None:
        """A WebSocket connection was accepted by this worker (the upgrade succeeded)."""

    def websocket_closed(self) -> None:
        """A connection websocket_opened counted has ended, whatever ended it (called once per connection)."""

    def websocket_frame(self, action: str) -> None:
        """A client frame was received; action is its ``action`` field, or 'invalid' when it has none."""


class NoWebSocketMetrics:
    """A WebSocketMetrics that counts nothing."""

    def websocket_opened(self) -> None:
        """Nothing to count."""

    def websocket_closed(self) -> None:
        """Nothing to count."""

    def websocket_frame(self, action: str) -> None:
        """Nothing to count."""

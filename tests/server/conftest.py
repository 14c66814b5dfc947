"""Fixtures the server tests share: WebSocket peers closed at the end of each test."""

from __future__ import annotations

from typing import Any

import pytest

from tests.live_server import LiveServer
from tests.websocket_peer import Peer


@pytest.fixture
def peers() -> Any:
    """Connections a test opens with open_peer(); all closed at the end."""
    made: list[Peer] = []

    def open_peer(server: LiveServer, **kwargs: Any) -> Peer:
        peer = Peer.connect(server, **kwargs)
        made.append(peer)
        return peer

    yield open_peer
    for peer in made:
        peer.close()

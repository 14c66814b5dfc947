"""Built-in services shipped with every server."""

from runtime import Service


class Ping(Service):
    """Answers pong: a liveness check that goes through the whole service machinery."""

    name = 'conduit.ping'

    def handle(self):
        self.response.payload = {'pong': True, 'cid': self.cid}

"""The Conduit side of the REST benchmark: a trivial JSON service behind a channel with Basic Auth."""

from runtime import Service


class Echo(Service):
    """Answers its JSON input back."""

    name = 'bench.rest.echo'

    def handle(self) -> None:
        self.response.payload = self.request.payload

import http.server
import socket
import threading


def test_server_answers_health_and_ping(server):
    assert server.request('GET', '/health').json()['is_ok'] is True
    assert server.invoke('conduit.ping')['pong'] is True


#: Services of the demo's modules (services/demo/), one per module.
DEMO_SERVICES = {'crm.customer.create', 'payroll.reconcile', 'procurement.invoice.receive'}


def _service_names(server) -> set[str]:
    r = server.request('GET', '/admin/services', auth=server.admin)
    assert r.status_code == 200, r.text
    return {s['name'] for s in r.json()['services']}


def test_demo_services_are_deployed_only_with_demo(server_factory):
    plain = server_factory(name='plain').start()
    names = _service_names(plain)
    assert 'conduit.ping' in names and not names & DEMO_SERVICES, names
    plain.stop()
    demo = server_factory(name='demo', demo=True).start()
    assert {'conduit.ping', *DEMO_SERVICES} <= _service_names(demo)


HEAP_PROBE = '''import gc

from runtime import Service


class HeapProbe(Service):
    """How many objects the worker it runs in froze once started."""

    name = 'test.heap'

    def handle(self):
        self.response.payload = {'frozen': gc.get_freeze_count()}
'''


def test_a_started_worker_freezes_its_heap(server_factory):
    # Its full garbage collections then skip the ~155,000 objects of start-up: unfrozen, each paused
    # the whole worker for 80–135 ms, every request and delivery in flight with it.
    server = server_factory()
    server.write_module('heap_probe.py', HEAP_PROBE)
    server.start()
    assert server.invoke('test.heap')['frozen'] > 50_000


def test_a_test_server_whose_port_was_taken_meanwhile_starts_on_another(server_factory):
    # free_port() is a guess: in the suite's parallel processes another server took one between the
    # guess and the start, and the test failed with "already running? ... is in use by another process".
    server = server_factory()
    taken = server.port
    with socket.socket() as squatter:
        squatter.bind(('127.0.0.1', taken))
        squatter.listen()
        server.start()
    assert server.port != taken
    assert server.request('GET', '/health').json()['is_ok'] is True


class _Impostor(http.server.BaseHTTPRequestHandler):
    """Another test's server: answers every GET 200."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b'{"is_ok": true}'
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # type: ignore[no-untyped-def]
        pass


def test_a_test_server_does_not_take_another_servers_health_answer_for_its_own(server_factory):
    # CI: another test process's server held the port; it answered this server's /health before
    # this one found the port taken and exited, so the test went on against a server that then
    # stopped (connection refused).
    server = server_factory()
    taken = server.port
    impostor = http.server.HTTPServer(('127.0.0.1', taken), _Impostor)
    thread = threading.Thread(target=impostor.serve_forever, daemon=True)
    thread.start()
    try:
        server.start()
    finally:
        impostor.shutdown()
        impostor.server_close()
    assert server.port != taken
    assert server.invoke('conduit.ping')['pong'] is True

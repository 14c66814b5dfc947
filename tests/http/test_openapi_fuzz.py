"""/openapi.json describes every endpoint, and a fuzzer driven by it finds no server error.

schemathesis generates requests from the live server's own document: valid ones (positive) and
ones that break the schema (negative), for every operation: the admin API with the admin
credentials, /pubsub with a security definition allowed everything, the rest as they are. A
bounded, derandomised number of examples keeps the run short and the same from run to run;
CONDUIT_FUZZ_EXAMPLES raises it for a deeper search. ``make test`` fuzzes on PostgreSQL (whose
types are the stricter: an integer out of range, a NUL in text); ``make chaos`` on SQLite as well.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from requests.auth import _basic_auth_str
from schemathesis import GenerationMode

from tests.live_server import LiveServer

#: Examples per operation and generation mode.
EXAMPLES = int(os.environ.get('CONDUIT_FUZZ_EXAMPLES', '6'))

OBJECTS = '''
security:
  - name: fuzz
    username: fuzz
    password: fuzz-password
pubsub_permission:
  - security: fuzz
    pub: ['**']
    sub: ['**']
pubsub_topic:
  - name: fuzz.topic
  - name: orders.created
'''

# A pull's wait is capped at a fifth of a second: the fuzzer sends many pulls that find nothing.
FAST = '''
[pubsub]
wait_non_sock_err = 0.05
poll_interval_secs = 0.05
max_pull_wait_secs = 0.2
'''


def _auth_for(server: LiveServer, path: str) -> dict[str, str]:
    if path.startswith('/admin'):
        return {'Authorization': _basic_auth_str(*server.admin)}
    if path.startswith('/pubsub'):
        return {'Authorization': _basic_auth_str('fuzz', 'fuzz-password')}
    return {}


def _fuzz(server: LiveServer, session: requests.Session, operation: Any, mode: Any, failures: list[str]) -> int:
    """Call one operation with generated requests; returns how many were sent."""
    headers = _auth_for(server, operation.path)
    calls = 0

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def call(case: Any) -> None:
        nonlocal calls
        calls += 1
        response = case.call(base_url=server.url, session=session, headers=headers, timeout=30)
        if os.environ.get('CONDUIT_FUZZ_TRACE'):
            print('FUZZ', case.method, operation.path, response.status_code, repr(case.body)[:80], case.query)
        if response.status_code >= 500:
            failures.append(f'{case.method} {case.formatted_path} query={case.query} body={case.body!r}'
                            f' -> {response.status_code}: {response.text[:300]}')
    try:
        call()
    except Unsatisfiable:
        pass  # nothing in this operation can be made invalid (e.g. GET /health)
    return calls


def test_every_route_is_documented_with_schemas(server: LiveServer) -> None:
    doc = server.request('GET', '/openapi.json', auth=server.admin).json()
    assert doc['openapi'].startswith('3.1')
    paths = doc['paths']
    for expected in ('/health', '/metrics', '/openapi.json', '/admin/topics', '/admin/topics/{name}',
                     '/admin/queues/{sub_id}/messages/{msg_id}', '/admin/security/{name}/password',
                     '/admin/channels/{name}', '/admin/jobs', '/admin/spark/jobs', '/pubsub/topic/{topic}',
                     '/admin/dashboard/sessions'):
        assert expected in paths, expected
    for path, ops in paths.items():
        for method, op in ops.items():
            assert op.get('summary'), f'{method} {path} has no summary'
            assert op['responses'], f'{method} {path} has no responses'
            if path.startswith('/admin'):
                assert op['security'] == [{'adminAuth': []}], f'{method} {path}'
                assert '401' in op['responses'], f'{method} {path}'
            # A resource without an openapi entry gets a minimal operation: none may be left.
            assert 'Not documented' not in op.get('description', ''), f'{method} {path} is not documented'
    schemathesis.openapi.from_dict(doc).validate()


@pytest.mark.chaos(backend='sqlite')
def test_fuzzing_every_operation_finds_no_server_error(server_factory) -> None:
    server = server_factory(extra_config=FAST)
    server.write_objects('fuzz.yaml', OBJECTS)
    server.start()
    admin = server.admin
    # Objects for the generated ids and names to hit: small integers are what hypothesis tries first.
    for body in ({'topic': 'fuzz.topic', 'kind': 'service', 'service': 'conduit.ping'},
                 {'topic': 'fuzz.**', 'kind': 'pull', 'security': 'fuzz'}):
        assert server.request('POST', '/admin/subscriptions', json=body, auth=admin).status_code == 201
    for n in range(3):
        assert server.request('POST', '/admin/publish', json={'topic': 'fuzz.topic', 'data': {'n': n}},
                              auth=admin).status_code == 200

    schema = schemathesis.openapi.from_dict(server.request('GET', '/openapi.json', auth=server.admin).json())
    session = requests.Session()
    failures: list[str] = []
    calls = 0
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            calls += _fuzz(server, session, operation, mode, failures)
    elapsed = time.monotonic() - started
    assert not failures, '\n'.join(failures[:20])
    assert calls > 100
    # Its length is bounded by the number of examples, not asserted: a timing fails on a busy machine.
    print(f'fuzz: {calls} requests in {elapsed:.0f} s')
    # Still serving, and nothing blew up unseen.
    assert server.request('GET', '/health').status_code == 200
    unhandled = re.findall(r'cid \w+: [A-Z]+ \S+ failed.*', server.log())
    assert not unhandled, unhandled[:10]

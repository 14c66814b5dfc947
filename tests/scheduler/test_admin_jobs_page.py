"""Scheduler and Spark jobs a page at a time: limit, offset and a search (the dashboard's lists)."""

from __future__ import annotations

import time

from sqlalchemy import create_engine, insert

from runtime.db.engine import normalize_url
from runtime.db.models import SparkJob
from tests.live_server import LiveServer


def _create(server: LiveServer, name: str, service: str = 'conduit.ping') -> None:
    r = server.request('POST', '/admin/jobs', auth=server.admin,
                       json={'name': name, 'service': service, 'job_type': 'interval_based', 'hours': 1,
                             'is_active': False})
    assert r.status_code == 201, r.text


def test_jobs_are_listed_a_page_at_a_time_and_searched(server: LiveServer) -> None:
    for i in range(7):
        _create(server, f'sync.crm{i}')
    _create(server, 'nightly_report')
    _create(server, 'a%b_c')

    whole = server.request('GET', '/admin/jobs', auth=server.admin).json()
    assert len(whole['jobs']) == 9 and 'total' not in whole, 'without page parameters: every job, as before'

    first = server.request('GET', '/admin/jobs?limit=3', auth=server.admin).json()
    assert [j['name'] for j in first['jobs']] == ['a%b_c', 'nightly_report', 'sync.crm0']
    assert first['total'] == 9 and first['next_offset'] == 3
    last = server.request('GET', '/admin/jobs?limit=3&offset=6', auth=server.admin).json()
    assert [j['name'] for j in last['jobs']] == ['sync.crm4', 'sync.crm5', 'sync.crm6']
    assert last['next_offset'] is None

    found = server.request('GET', '/admin/jobs?search=CRM&limit=5', auth=server.admin).json()
    assert found['total'] == 7 and len(found['jobs']) == 5
    by_service = server.request('GET', '/admin/jobs', params={'search': 'ping'}, auth=server.admin).json()
    assert by_service['total'] == 9
    # LIKE wildcards in the search are plain characters.
    literal = server.request('GET', '/admin/jobs', params={'search': '%b_'}, auth=server.admin).json()
    assert [j['name'] for j in literal['jobs']] == ['a%b_c']
    none = server.request('GET', '/admin/jobs', params={'search': '_'}, auth=server.admin).json()
    assert [j['name'] for j in none['jobs']] == ['a%b_c', 'nightly_report']


def test_bad_page_and_search_parameters_are_refused(server: LiveServer) -> None:
    for query in ('limit=0', 'limit=100000', 'limit=x', 'offset=-1', 'offset=1e99', 'search=' + 'x' * 201,
                  'search=%00', 'search=a%0Ab'):
        r = server.request('GET', f'/admin/jobs?{query}', auth=server.admin)
        assert r.status_code == 400, (query, r.status_code, r.text)
        assert r.json()['is_ok'] is False and 'Traceback' not in r.text
    assert server.request('GET', '/admin/jobs?limit=5').status_code == 401


def test_spark_jobs_are_listed_a_page_at_a_time(server: LiveServer) -> None:
    engine = create_engine(normalize_url(server.db_url))
    with engine.begin() as conn:
        conn.execute(insert(SparkJob), [
            {'job_id': f'{i:012x}', 'pipeline': 'traffic' if i % 2 else 'procurement', 'master': 'local[2]',
             'status': 'succeeded', 'submitted_at': time.time() - 100 + i} for i in range(5)])
    engine.dispose()
    first = server.request('GET', '/admin/spark/jobs?limit=2', auth=server.admin).json()
    assert [j['job_id'] for j in first['jobs']] == ['000000000004', '000000000003'] and first['next_offset'] == 2
    rest = server.request('GET', '/admin/spark/jobs?limit=2&offset=4', auth=server.admin).json()
    assert [j['job_id'] for j in rest['jobs']] == ['000000000000'] and rest['next_offset'] is None
    traffic = server.request('GET', '/admin/spark/jobs?pipeline=traffic&offset=1', auth=server.admin).json()
    assert [j['job_id'] for j in traffic['jobs']] == ['000000000001']
    for query in ('offset=-1', 'offset=x', 'offset=99999999999999'):
        r = server.request('GET', f'/admin/spark/jobs?{query}', auth=server.admin)
        assert r.status_code == 400, (query, r.text)

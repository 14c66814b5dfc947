"""Database calls must not freeze other greenlets of a worker."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# psycopg imported BEFORE gevent patches (as in gunicorn's master), then the worker's order.
SCRIPT = textwrap.dedent('''
    import sys, time
    import psycopg, sqlalchemy
    from gevent import monkey
    monkey.patch_all()
    import gevent
    from runtime.db.engine import make_engine, make_psycopg_cooperative
    from sqlalchemy import text
    make_psycopg_cooperative()
    engine = make_engine(sys.argv[1])
    slips = []
    def ticker():
        last = time.monotonic()
        while True:
            gevent.sleep(0.02)
            now = time.monotonic()
            slips.append(now - last - 0.02)
            last = now
    t = gevent.spawn(ticker)
    with engine.connect() as conn:
        conn.execute(text('SELECT pg_sleep(0.6)'))
    t.kill()
    print(max(slips))
''')


# sqlite3 never cooperates; the runtime runs its long statements in the thread pool (runtime.db.blocking).
@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_slow_postgresql_query_leaves_other_greenlets_running(db_url):
    out = subprocess.run([sys.executable, '-c', SCRIPT, db_url], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # Frozen, the ticker would slip by the whole 0.6 s query.
    assert float(out.stdout.strip()) < 0.3

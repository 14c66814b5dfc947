"""Unit tests of the shipped pipelines (spark_pipeline/) on small local DataFrames, in-process.

One local Spark session serves the module (its start-up is the bulk of the time). The archive
format test writes lines with the archive's own encoder, so the writer and the readers agree.
"""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

pytest.importorskip('pyspark')

from pyspark.sql import SparkSession  # noqa: E402

from runtime.pubsub.archive import encode_record  # noqa: E402
from spark_pipeline import procurement_spend, traffic_analytics  # noqa: E402
from spark_pipeline._archive import ARCHIVE_SCHEMA, partition_dirs, read_archive, schema_with_data  # noqa: E402

T0 = 1_795_000_000.0  # 2026-11-18T11:06:40Z


@pytest.fixture(scope='module')
def spark():
    session = (SparkSession.builder.master('local[1]').appName('conduit pipeline tests')
               .config('spark.ui.enabled', 'false').config('spark.sql.shuffle.partitions', '1')
               .config('spark.sql.session.timeZone', 'UTC').config('spark.driver.host', '127.0.0.1')
               .config('spark.driver.bindAddress', '127.0.0.1').config('spark.sql.codegen.wholeStage', 'false')
               .config('spark.driver.extraJavaOptions', '-XX:TieredStopAtLevel=1').getOrCreate())
    yield session
    session.stop()


def _record(topic, subscriber, outcome, latency_ms=None, msg_id='m', data=None, **extra):
    rec = dict.fromkeys(ARCHIVE_SCHEMA.fieldNames())
    rec.update(topic=topic, subscriber=subscriber, outcome=outcome, msg_id=msg_id, pub_time=T0,
               latency_ms=latency_ms, delivery_time=T0 + (latency_ms or 0) / 1000, attempts=1, **extra)
    if data is not None:
        rec['data'] = data
    return rec


def test_traffic_analytics_counts_and_latency_percentiles(spark):
    rows = ([_record('orders.created', 'a', 'delivered', ms) for ms in (40.0, 10.0, 30.0, 20.0)]
            + [_record('orders.created', 'a', 'failed'), _record('orders.created', 'a', 'failed'),
               _record('orders.created', 'a', 'dead_letter'), _record('orders.created', 'b', 'delivered', 5.0),
               _record('crm.sync', 'a', 'dead_letter')])
    by_sub, by_topic = traffic_analytics.analyse(spark.createDataFrame(rows, ARCHIVE_SCHEMA))
    subs = [r.asDict() for r in by_sub.collect()]
    assert [(r['topic'], r['subscriber']) for r in subs] == [('crm.sync', 'a'), ('orders.created', 'a'),
                                                              ('orders.created', 'b')]
    crm, a, b = subs
    assert (crm['delivered'], crm['failed_attempts'], crm['dead_letters'], crm['latency_p50_ms']) == (0, 0, 1, None)
    assert (a['delivered'], a['failed_attempts'], a['dead_letters']) == (4, 2, 1)
    assert (a['latency_p50_ms'], a['latency_p90_ms'], a['latency_p99_ms'], a['latency_max_ms']) == (20, 40, 40, 40)
    assert a['latency_avg_ms'] == 25.0
    assert a['first_delivery'] == '2026-11-18T11:06:40.010Z' and a['last_delivery'] == '2026-11-18T11:06:40.040Z'
    assert (b['delivered'], b['latency_p50_ms']) == (1, 5.0)
    topics = {r['topic']: r.asDict() for r in by_topic.collect()}
    orders = topics['orders.created']
    assert (orders['subscribers'], orders['delivered'], orders['failed_attempts'], orders['dead_letters']) == \
        (2, 5, 2, 1)
    assert orders['latency_p50_ms'] == 20.0 and orders['latency_max_ms'] == 40.0
    by_sub, _ = traffic_analytics.analyse(spark.createDataFrame(rows, ARCHIVE_SCHEMA), topics=['CRM.sync'])
    assert [r['topic'] for r in by_sub.collect()] == ['crm.sync']


def test_procurement_spend_per_department_and_supplier(spark):
    def invoice(n, department, supplier, amount, currency='EUR', **kw):
        return {'invoice_id': f'INV-{n}', 'department': department, 'supplier': supplier, 'amount': amount,
                'currency': currency}
    rows = [
        _record('invoice.received', 'book', 'delivered', 1.0, 'm1', invoice(1, 'IT', 'Dell', 1000.10)),
        _record('invoice.received', 'audit', 'delivered', 1.0, 'm1', invoice(1, 'IT', 'Dell', 1000.10)),  # same msg
        _record('invoice.received', 'book', 'delivered', 1.0, 'm2', invoice(2, 'IT', 'Dell', 0.20)),
        _record('invoice.received', 'book', 'delivered', 1.0, 'm3', invoice(3, 'IT', 'HP', 99.99, 'usd')),
        _record('invoice.received', 'book', 'delivered', 1.0, 'm4', invoice(4, 'HR', 'Staples', 12.5)),
        _record('invoice.received', 'book', 'delivered', 1.0, 'm5', invoice(5, None, 'Staples', 7.0)),
        _record('invoice.received', 'book', 'delivered', 1.0, 'm6', invoice(6, 'HR', 'Staples', None)),  # rejected
        _record('invoice.received', 'book', 'failed', None, 'm7', invoice(7, 'HR', 'Staples', 1.0)),  # not counted
        _record('invoice.paid', 'book', 'delivered', 1.0, 'm8', invoice(8, 'HR', 'Staples', 1.0)),  # other topic
    ]
    df = spark.createDataFrame(rows, schema_with_data(procurement_spend.INVOICE))
    invoices = procurement_spend.invoices(df)
    assert invoices.count() == 6
    by_pair, by_department = procurement_spend.spend(invoices)
    assert [tuple(r) for r in by_pair.collect()] == [
        ('HR', 'Staples', 'EUR', 1, Decimal('12.50')),
        ('IT', 'Dell', 'EUR', 2, Decimal('1000.30')),
        ('IT', 'HP', 'USD', 1, Decimal('99.99')),
        ('unknown', 'Staples', 'EUR', 1, Decimal('7.00')),
    ]
    assert [tuple(r) for r in by_department.collect()] == [
        ('HR', 'EUR', 1, 1, Decimal('12.50')),
        ('IT', 'EUR', 2, 1, Decimal('1000.30')),
        ('IT', 'USD', 1, 1, Decimal('99.99')),
        ('unknown', 'EUR', 1, 1, Decimal('7.00')),
    ]


def test_pipelines_read_what_the_archive_writes(spark, tmp_path):
    now = time.time()
    day_dir = tmp_path / 'invoice.received' / 'date=2026-11-18'
    day_dir.mkdir(parents=True)
    (tmp_path / 'invoice.received' / 'date=2026-11-20').mkdir()
    lines = [encode_record(('delivered', 1, 'service', 'book', f'msg.{n}', 'invoice.received', 1, now - 0.01, 5,
                            60, 'svc', None, 'application/json',
                            f'{{"invoice_id":"I{n}","department":"IT","supplier":"Dell","amount":{n}.5}}',
                            now, 0.002, None, None), True) for n in range(2)]
    # A line still being written by the server is skipped.
    (day_dir / 'part-1-0.jsonl').write_text('\n'.join(lines) + '\n{"msg_id": "half', encoding='utf-8')
    assert partition_dirs(str(tmp_path), since='2026-11-19') == [str(tmp_path / 'invoice.received' / 'date=2026-11-20')]
    assert partition_dirs(str(tmp_path), until='2026-11-18') == [str(day_dir)]
    records = read_archive(spark, str(tmp_path), schema=schema_with_data(procurement_spend.INVOICE))
    rows = sorted(records.collect(), key=lambda r: r['msg_id'])
    assert [(r['msg_id'], r['data']['amount'], r['subscriber'], r['outcome']) for r in rows] == [
        ('msg.0', 0.5, 'book', 'delivered'), ('msg.1', 1.5, 'book', 'delivered')]
    assert abs(rows[0]['latency_ms'] - 10.0) < 0.01
    assert read_archive(spark, str(tmp_path / 'nothing')).count() == 0

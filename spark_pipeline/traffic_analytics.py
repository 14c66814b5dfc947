"""Pub/sub traffic analytics: per topic and subscriber, what the broker delivered and how fast.

Reads the message archive and writes two results under ``--output``:

- ``by_subscriber/``: one row per (topic, subscriber) — ``delivered`` (successful deliveries),
  ``failed_attempts``, ``dead_letters``, delivery latency (publication to handler done, ms)
  ``latency_avg_ms``, ``latency_p50_ms``, ``latency_p90_ms``, ``latency_p99_ms``,
  ``latency_max_ms``, and ``first_delivery``/``last_delivery`` (ISO 8601, UTC);
- ``by_topic/``: the same per topic, plus ``subscribers``.

Percentiles are ``percentile_approx`` with accuracy 10,000 (exact for small groups, relative
error 1/10,000 beyond). The archive is at-least-once, so a delivery repeated after a crash
counts twice — as it happened twice. Options: ``--topic NAME`` (repeatable; default every
topic), ``--since``/``--until`` (days, YYYY-MM-DD), ``--format json|parquet``.

    spark-submit spark_pipeline/traffic_analytics.py --archive var/archive --output /tmp/traffic
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

try:
    from spark_pipeline._archive import DEAD_LETTER, DELIVERED, FAILED, add_common_arguments, read_archive, write
except ImportError:  # run directly with spark-submit, beside _archive.py
    from _archive import DEAD_LETTER, DELIVERED, FAILED, add_common_arguments, read_archive, write  # type: ignore

#: percentile_approx accuracy: 1/ACCURACY is the relative error on large groups.
ACCURACY = 10000

#: Columns the analysis needs (everything else in the archive is left unread).
_COLUMNS = ('topic', 'subscriber', 'outcome', 'latency_ms', 'delivery_time')


def _metrics() -> list[Column]:
    delivered = F.col('outcome') == DELIVERED
    latency = F.when(delivered, F.col('latency_ms'))
    pct = F.percentile_approx(latency, F.array(F.lit(0.5), F.lit(0.9), F.lit(0.99)), ACCURACY)
    return [
        F.count(F.when(delivered, 1)).alias('delivered'),
        F.count(F.when(F.col('outcome') == FAILED, 1)).alias('failed_attempts'),
        F.count(F.when(F.col('outcome') == DEAD_LETTER, 1)).alias('dead_letters'),
        F.round(F.avg(latency), 3).alias('latency_avg_ms'),
        pct.alias('_pct'),
        F.max(latency).alias('latency_max_ms'),
        F.min(F.when(delivered, F.col('delivery_time'))).alias('_first'),
        F.max(F.when(delivered, F.col('delivery_time'))).alias('_last'),
    ]


def _finish(df: DataFrame) -> DataFrame:
    def iso(c: str) -> Column:
        return F.date_format(F.timestamp_seconds(F.col(c)), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")
    return (df.withColumn('latency_p50_ms', F.col('_pct')[0])
              .withColumn('latency_p90_ms', F.col('_pct')[1])
              .withColumn('latency_p99_ms', F.col('_pct')[2])
              .withColumn('first_delivery', iso('_first'))
              .withColumn('last_delivery', iso('_last'))
              .drop('_pct', '_first', '_last'))


def analyse(records: DataFrame, topics: list[str] | None = None) -> tuple[DataFrame, DataFrame]:
    """(by_subscriber, by_topic) figures from archive records, sorted by topic and subscriber.

    Both come from one aggregation (a rollup over topic and subscriber), so the records are read
    exactly once; its result — a few rows per topic — is brought to the driver and turned back
    into the two small DataFrames.
    """
    records = records.select(*_COLUMNS)
    if topics:
        records = records.where(F.lower('topic').isin([t.lower() for t in topics]))
    figures = _finish(records.rollup('topic', 'subscriber').agg(*_metrics(), F.grouping_id().alias('_level')))
    rows = [r.asDict() for r in figures.where(F.col('_level') < 3).collect()]  # level 3: the grand total
    fields = [f for f in figures.schema.fields if f.name != '_level']
    per_sub = sorted((r for r in rows if r['_level'] == 0), key=lambda r: (r['topic'], r['subscriber']))
    per_topic = sorted((r for r in rows if r['_level'] == 1), key=lambda r: r['topic'])
    subscribers = Counter(r['topic'] for r in per_sub)
    spark = records.sparkSession
    by_subscriber = spark.createDataFrame([tuple(r[f.name] for f in fields) for r in per_sub], StructType(fields))
    topic_fields = [fields[0], StructField('subscribers', LongType())] + fields[2:]
    by_topic = spark.createDataFrame([(r['topic'], subscribers[r['topic']], *(r[f.name] for f in fields[2:]))
                                      for r in per_topic], StructType(topic_fields))
    return by_subscriber, by_topic


def main(args: list[str]) -> dict[str, Any]:
    """Analyse the archive; returns the output location and per-topic totals."""
    parser = argparse.ArgumentParser(prog='traffic_analytics', description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument('--topic', action='append', help='only this topic (repeatable)')
    opts = parser.parse_args(args)
    if not opts.output:
        parser.error('--output is required when not run by Conduit')
    spark = SparkSession.builder.getOrCreate()  # spark-submit names the application (conduit:<pipeline>:<job>)
    # Only a handful of groups: a few shuffle partitions beat the default 200 on any cluster size.
    spark.conf.set('spark.sql.shuffle.partitions', str(spark.sparkContext.defaultParallelism))
    spark.conf.set('spark.sql.session.timeZone', 'UTC')
    records = read_archive(spark, opts.archive, opts.since, opts.until)
    by_subscriber, by_topic = analyse(records, opts.topic)
    write(by_subscriber, f'{opts.output}/by_subscriber', opts.format)
    write(by_topic, f'{opts.output}/by_topic', opts.format)
    totals = {r['topic']: {'delivered': r['delivered'], 'failed_attempts': r['failed_attempts'],
                           'dead_letters': r['dead_letters'], 'subscribers': r['subscribers']}
              for r in by_topic.collect()}  # a few local rows
    return {'output': opts.output, 'topics': totals}


if __name__ == '__main__':
    main(sys.argv[1:])

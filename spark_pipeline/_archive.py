"""Reading the message archive that Conduit writes (runtime/pubsub/archive.py) into a DataFrame.

The archive is JSON Lines under ``<dir>/<topic>/date=YYYY-MM-DD/part-*.jsonl``, one record per
delivery attempt (``delivered``/``failed``) or dead letter. Reading uses an explicit schema (no
inference pass over the data) and ``DROPMALFORMED``, which skips a line still being written.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, DoubleType, LongType, StringType, StructField, StructType

#: Every field of an archive record but ``data``, whose shape depends on the topic.
ARCHIVE_SCHEMA = StructType([
    StructField('msg_id', StringType()),
    StructField('topic', StringType()),
    StructField('subscriber', StringType()),
    StructField('sub_id', LongType()),
    StructField('sub_kind', StringType()),
    StructField('outcome', StringType()),
    StructField('attempts', LongType()),
    StructField('pub_time', DoubleType()),
    StructField('pub_time_iso', StringType()),
    StructField('delivery_time', DoubleType()),
    StructField('delivery_time_iso', StringType()),
    StructField('latency_ms', DoubleType()),
    StructField('duration_ms', DoubleType()),
    StructField('error', StringType()),
    StructField('reason', StringType()),
    StructField('priority', LongType()),
    StructField('size', LongType()),
    StructField('publisher', StringType()),
    StructField('correl_id', StringType()),
    StructField('mime_type', StringType()),
])

#: Outcomes of archive records.
DELIVERED, FAILED, DEAD_LETTER = 'delivered', 'failed', 'dead_letter'


def schema_with_data(data_type: DataType) -> StructType:
    """The archive schema with a ``data`` field of the given type (e.g. a struct of invoice fields)."""
    return StructType(ARCHIVE_SCHEMA.fields + [StructField('data', data_type)])


def partition_dirs(directory: str, since: str | None = None, until: str | None = None) -> list[str]:
    """The ``<topic>/date=...`` directories of the archive whose day is within [since, until]."""
    root = Path(directory)
    if not root.is_dir():
        return []
    found = []
    for topic_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for day_dir in sorted(p for p in topic_dir.iterdir() if p.is_dir() and p.name.startswith('date=')):
            day = day_dir.name[len('date='):]
            if (since is None or day >= since) and (until is None or day <= until):
                found.append(str(day_dir))
    return found


def read_archive(spark: SparkSession, directory: str, since: str | None = None, until: str | None = None,
                 schema: StructType = ARCHIVE_SCHEMA) -> DataFrame:
    """The archive's records of days since..until (inclusive, YYYY-MM-DD), with the given schema."""
    dirs = partition_dirs(directory, since, until)
    if not dirs:
        return spark.createDataFrame([], schema)
    # The directories are on the driver's disk and already listed: a Spark job to list them is waste.
    spark.conf.set('spark.sql.sources.parallelPartitionDiscovery.threshold', str(max(32, len(dirs) + 1)))
    return spark.read.schema(schema).option('mode', 'DROPMALFORMED').json(dirs)


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """--archive, --output, --since, --until and --format, defaulting to what the runtime passes."""
    parser.add_argument('--archive', default=os.environ.get('CONDUIT_ARCHIVE_DIR', 'var/archive'),
                        help='the message archive directory (default: the server\'s [archive] dir)')
    parser.add_argument('--output', default=os.environ.get('CONDUIT_SPARK_OUTPUT'),
                        help='where to write the results (default: the job\'s output location)')
    parser.add_argument('--since', help='first day to read, YYYY-MM-DD (default: all)')
    parser.add_argument('--until', help='last day to read, YYYY-MM-DD (default: all)')
    parser.add_argument('--format', choices=('json', 'parquet'), default='json', help='format of the results')


def write(df: DataFrame, path: str, fmt: str) -> None:
    """Write a small result as one file (JSON Lines keeps nulls, so readers see every field)."""
    writer = df.coalesce(1).write.mode('overwrite')
    if fmt == 'json':
        writer.option('ignoreNullFields', 'false').json(path)
    else:
        writer.parquet(path)

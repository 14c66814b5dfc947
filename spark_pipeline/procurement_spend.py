"""Procurement demo: spend per department and supplier, from the invoices the flow received.

Reads ``invoice.received`` messages from the message archive — each message once, however many
subscribers it was delivered to (records of outcome ``delivered``, deduplicated by ``msg_id``) —
whose data is ``{invoice_id, department, supplier, amount, currency}``, and writes under
``--output``:

- ``by_department_supplier/``: ``department, supplier, currency, invoices, total``;
- ``by_department/``: ``department, currency, invoices, suppliers, total``.

Amounts are summed as decimal(18,2), so totals are exact to the cent. Invoices without an amount
are left out and counted as ``rejected`` in the summary; a missing department or supplier is
``unknown``. Options: ``--topic`` (default ``invoice.received``), ``--since``/``--until``,
``--format json|parquet``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

try:
    from spark_pipeline._archive import DELIVERED, add_common_arguments, read_archive, schema_with_data, write
except ImportError:  # run directly with spark-submit, beside _archive.py
    from _archive import DELIVERED, add_common_arguments, read_archive, schema_with_data, write  # type: ignore

#: The data of an invoice.received message.
INVOICE = StructType([
    StructField('invoice_id', StringType()),
    StructField('department', StringType()),
    StructField('supplier', StringType()),
    StructField('amount', DoubleType()),
    StructField('currency', StringType()),
])

DEFAULT_TOPIC = 'invoice.received'


def invoices(records: DataFrame, topic: str = DEFAULT_TOPIC) -> DataFrame:
    """One row per invoice message: invoice_id, department, supplier, amount (decimal), currency."""
    delivered = records.where((F.lower('topic') == topic.lower()) & (F.col('outcome') == DELIVERED))
    return (delivered.dropDuplicates(['msg_id'])
            .select(F.col('data.invoice_id').alias('invoice_id'),
                    F.coalesce(F.col('data.department'), F.lit('unknown')).alias('department'),
                    F.coalesce(F.col('data.supplier'), F.lit('unknown')).alias('supplier'),
                    F.col('data.amount').cast('decimal(18,2)').alias('amount'),
                    F.upper(F.coalesce(F.col('data.currency'), F.lit('EUR'))).alias('currency')))


def spend(invoice_rows: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(by_department_supplier, by_department) totals of invoices that have an amount."""
    valid = invoice_rows.where(F.col('amount').isNotNull())
    by_pair = (valid.groupBy('department', 'supplier', 'currency')
               .agg(F.count('*').alias('invoices'), F.sum('amount').alias('total'))
               .orderBy('department', 'supplier', 'currency'))
    by_department = (valid.groupBy('department', 'currency')
                     .agg(F.count('*').alias('invoices'), F.countDistinct('supplier').alias('suppliers'),
                          F.sum('amount').alias('total'))
                     .orderBy('department', 'currency'))
    return by_pair, by_department


def main(args: list[str]) -> dict[str, Any]:
    """Compute spend; returns the output location, invoice counts and totals per currency."""
    parser = argparse.ArgumentParser(prog='procurement_spend', description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument('--topic', default=DEFAULT_TOPIC, help='topic of the invoices (default: %(default)s)')
    opts = parser.parse_args(args)
    if not opts.output:
        parser.error('--output is required when not run by Conduit')
    spark = SparkSession.builder.getOrCreate()  # spark-submit names the application (conduit:<pipeline>:<job>)
    spark.conf.set('spark.sql.shuffle.partitions', str(spark.sparkContext.defaultParallelism))
    rows = invoices(read_archive(spark, opts.archive, opts.since, opts.until, schema_with_data(INVOICE)),
                    opts.topic).cache()
    by_pair, by_department = spend(rows)
    write(by_pair, f'{opts.output}/by_department_supplier', opts.format)
    write(by_department, f'{opts.output}/by_department', opts.format)
    counts = rows.agg(F.count('*').alias('all'), F.count('amount').alias('valid')).first()
    totals = {r['currency']: str(r['total']) for r in by_pair.groupBy('currency').agg(F.sum('total').alias('total'))
              .collect()}
    rows.unpersist()
    return {'output': opts.output, 'invoices': counts['valid'], 'rejected': counts['all'] - counts['valid'],
            'total_by_currency': totals}


if __name__ == '__main__':
    main(sys.argv[1:])

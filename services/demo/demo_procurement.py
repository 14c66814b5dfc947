"""Demo procurement flow: invoices come in, Spark works out spend per department and supplier.

1. ``procurement.invoice.receive`` (REST: ``POST /api/procurement/invoice``) checks an invoice
   and publishes it to the topic ``invoice.received``; ``procurement.invoice.generate`` makes a
   few random ones on a schedule, so the demo has traffic of its own.
2. ``procurement.invoice.book`` is subscribed to ``invoice.received``: every invoice it gets is
   also written to the message archive (var/archive/invoice.received/date=.../*.jsonl).
3. ``procurement.spend.report``, a ``SparkService`` run by the scheduler, submits the pipeline
   ``spark_pipeline/procurement_spend.py`` over that archive.
4. ``procurement.spend.read`` is subscribed to ``spark.job.completed``: it reads the pipeline's
   output and keeps the latest figures, which ``GET /api/procurement/spend`` returns.

The objects (topic, subscriptions, channels, jobs) are in config/demo/procurement.yaml. The latest
figures live in this worker's memory (the demo runs one worker).
"""

import glob
import json
import os
import random

from runtime import Service
from runtime.spark import SparkService

INVOICE_TOPIC = 'invoice.received'
_DEPARTMENTS = ('IT', 'HR', 'Finance', 'Facilities')
_SUPPLIERS = ('Dell', 'Staples', 'Acme Cleaning', 'Lyreco', 'AWS')

_latest = {}


class ReceiveInvoice(Service):
    """Accepts an invoice and publishes it to invoice.received; answers with its msg_id."""

    name = 'procurement.invoice.receive'
    input = 'invoice_id', 'department', 'supplier', 'amount', '-currency'

    def handle(self):
        invoice = dict(self.request.input)
        try:
            amount = round(float(invoice['amount']), 2)
        except (TypeError, ValueError):
            amount = None
        if amount is None or amount <= 0:
            self.response.status_code = 400
            self.response.payload = {'error': f"amount must be a positive number, not {invoice['amount']!r}"}
            return
        invoice['amount'] = amount
        invoice['currency'] = (invoice.get('currency') or 'EUR').upper()
        msg_id = self.publish(INVOICE_TOPIC, invoice, correl_id=str(invoice['invoice_id'])[:200])
        self.response.payload = {'invoice_id': invoice['invoice_id'], 'msg_id': msg_id}


class GenerateInvoices(Service):
    """Makes up a few invoices (payload {count}), as a supplier portal would send them."""

    name = 'procurement.invoice.generate'

    def handle(self):
        options = self.request.payload if isinstance(self.request.payload, dict) else {}
        count = int(options.get('count', 5))
        for _ in range(count):
            self.invoke(ReceiveInvoice, {'invoice_id': f'INV-{random.randrange(10 ** 8):08d}',
                                         'department': random.choice(_DEPARTMENTS),
                                         'supplier': random.choice(_SUPPLIERS),
                                         'amount': round(random.uniform(20, 2000), 2)})
        self.response.payload = {'generated': count}


class BookInvoice(Service):
    """Books each received invoice (here: logs it); its deliveries are what the archive keeps."""

    name = 'procurement.invoice.book'

    def handle(self):
        invoice = self.request.payload
        self.logger.info('booked invoice %s: %s %s from %s for %s', invoice.get('invoice_id'), invoice.get('amount'),
                         invoice.get('currency'), invoice.get('supplier'), invoice.get('department'))


class SpendReport(SparkService):
    """Submits the spend pipeline over the archive of invoice.received (scheduled in the demo)."""

    name = 'procurement.spend.report'
    pipeline = 'procurement_spend'
    arguments = {'topic': INVOICE_TOPIC}
    timeout = 600


class ReadSpend(Service):
    """Receives spark.job.completed events and keeps the latest spend figures of the procurement pipeline."""

    name = 'procurement.spend.read'

    def handle(self):
        event = self.request.payload
        if event.get('pipeline') != 'procurement_spend':
            return
        figures = {'job_id': event['job_id'], 'computed_at': event['ended_at'], 'result': event['result'],
                   'by_department': _read_rows(event['output_location'], 'by_department'),
                   'by_department_supplier': _read_rows(event['output_location'], 'by_department_supplier')}
        _latest.clear()
        _latest.update(figures)
        self.logger.info('spend report of job %s: %s', event['job_id'],
                         ', '.join(f"{r['department']} {r['total']} {r['currency']}" for r in figures['by_department']))


class GetSpend(Service):
    """Answers with the latest spend figures (REST: GET /api/procurement/spend)."""

    name = 'procurement.spend.get'

    def handle(self):
        self.response.payload = dict(_latest) if _latest else {'job_id': None, 'by_department': [],
                                                               'by_department_supplier': []}


def _read_rows(output, name):
    """The JSON Lines rows the pipeline wrote under output/name (a few small files)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(output, name, '*.json'))):
        with open(path, encoding='utf-8') as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    return rows

"""Demo payroll flow: a scheduled job reconciles the payroll ledger against the bank's transfers.

In production this runs nightly (e.g. cron ``0 2 * * *`` in the HR system's time zone); the demo
(config/demo/demo.yaml) runs it every 30 seconds, so that its runs show in ``conduit job runs``.
The ledger and the transfers are a small fixed sample; a real flow would fetch both.
"""

from runtime import Service

# What payroll says it paid, and what the bank says went out, per employee.
_LEDGER = {'E-1001': 4200.00, 'E-1002': 3850.50, 'E-1003': 5120.00, 'E-1004': 2990.75}
_TRANSFERS = {'E-1001': 4200.00, 'E-1002': 3850.50, 'E-1003': 5102.00, 'E-1005': 1200.00}


class ReconcilePayroll(Service):
    """Compares ledger and transfers; answers with the totals and every mismatch."""

    name = 'payroll.reconcile'

    def before_job(self):
        self.logger.info('payroll reconciliation starting (job %s, run %s)', self.request.raw_request['job_name'],
                         self.request.raw_request['run_id'])

    def handle(self):
        options = self.request.payload if isinstance(self.request.payload, dict) else {}
        tolerance = float(options.get('tolerance', 0.01))
        mismatches = []
        for employee in sorted(set(_LEDGER) | set(_TRANSFERS)):
            paid, sent = _LEDGER.get(employee), _TRANSFERS.get(employee)
            if paid is None or sent is None or abs(paid - sent) > tolerance:
                mismatches.append({'employee': employee, 'ledger': paid, 'bank': sent})
        self.response.payload = {'employees': len(set(_LEDGER) | set(_TRANSFERS)),
                                 'ledger_total': round(sum(_LEDGER.values()), 2),
                                 'bank_total': round(sum(_TRANSFERS.values()), 2), 'mismatches': mismatches}

    def after_job(self):
        mismatches = self.response.payload['mismatches']
        self.logger.info('payroll reconciliation done: %d mismatch(es)%s', len(mismatches),
                         ': ' + ', '.join(m['employee'] for m in mismatches) if mismatches else '')

"""Celery 5 app of the peers benchmark: one no-op task, late acks, no results."""

from __future__ import annotations

import os

from celery import Celery

from bench.peer_apps import Tally

QUEUE = 'conduit-bench-celery'

app = Celery('conduit_bench', broker=os.environ.get('BENCH_BROKER_URL', 'amqp://guest:guest@127.0.0.1:5672//'))
app.conf.update(
    task_acks_late=True,  # the message leaves the queue only after the handler returned
    task_ignore_result=True,
    task_default_queue=QUEUE,
    task_default_delivery_mode='persistent',
    worker_prefetch_multiplier=int(os.environ.get('BENCH_PREFETCH', '16')),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
    # BENCH_CONFIRM=1: a send returns only once RabbitMQ has taken the persistent message (publisher
    # confirms), as a Conduit publish returns only once the message is committed.
    broker_transport_options={'confirm_publish': os.environ.get('BENCH_CONFIRM') == '1'},
)

TALLY = Tally()


@app.task(name='bench.noop', ignore_result=True)
def noop(payload: dict) -> None:
    """The no-op handler."""
    TALLY.handle(payload)

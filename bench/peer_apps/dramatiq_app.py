"""Dramatiq actors of the peers benchmark: one no-op actor, acked after it returns, no results."""

from __future__ import annotations

import os

import dramatiq

from bench.peer_apps import Tally

QUEUE = 'conduit-bench-dramatiq'
URL = os.environ.get('BENCH_BROKER_URL', 'amqp://guest:guest@127.0.0.1:5672//')

if URL.startswith('redis'):
    from dramatiq.brokers.redis import RedisBroker
    broker = RedisBroker(url=URL)
else:
    from dramatiq.brokers.rabbitmq import RabbitmqBroker
    # pika reads the default vhost only percent-encoded ('/%2F'), Celery's '//' form names an empty one.
    # BENCH_CONFIRM=1: a send returns only once RabbitMQ confirmed the persistent message.
    broker = RabbitmqBroker(url=URL[:-2] + '/%2F' if URL.endswith('//') else URL,
                            confirm_delivery=os.environ.get('BENCH_CONFIRM') == '1')
dramatiq.set_broker(broker)

TALLY = Tally()


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def noop(payload: dict) -> None:
    """The no-op handler."""
    TALLY.handle(payload)

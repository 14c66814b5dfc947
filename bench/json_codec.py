"""CPU per message spent in JSON on the publish → deliver path, measured with the runtime's own functions.

A typical integration event (an order: nested objects, a list, floats, non-ASCII text; about 300
bytes) goes through every JSON step a message takes on the hot path, each timed on its own in CPU
time (``time.process_time``, best of several runs so that other processes on the machine count
less):

- ``body``: a REST publish body parsed within the limits (``runtime.http.body.parse_json``);
- ``encode``: the data checked and stored as text (``runtime.pubsub.message.encode_data``);
- ``decode``: the stored text parsed for a service subscriber (``decode_data``);
- ``pull``: a pull subscriber's message rendered (``render_pull``);
- ``push``: a REST push body rendered (``runtime.util.json_limits.dumps`` of the push view);
- ``total``: the sum, the JSON cost of one message published over REST and delivered once.

    .venv/bin/python bench/json_codec.py [--iterations 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.http.body import parse_json  # noqa: E402
from runtime.pubsub.message import Delivery, decode_data, encode_data, render_pull  # noqa: E402
from runtime.util import json_limits  # noqa: E402

#: The data of the typical message.
DATA = {'order_id': 1234567, 'customer': {'id': 'C-981', 'name': 'Zoë Müller', 'vip': True},
        'lines': [{'sku': 'A-1', 'qty': 2, 'price': 9.99}, {'sku': 'B-7', 'qty': 1, 'price': 120.0},
                  {'sku': 'C-3', 'qty': 12, 'price': 0.5}],
        'total': 145.98, 'currency': 'EUR', 'paid': True, 'note': None, 'tags': ['web', 'priority']}


def _delivery(stored: str) -> Delivery:
    return Delivery(entry_id=1, sub_id=1, delivery_count=0, next_attempt_at=0.0, last_error='',
                    recv_time=1_700_000_000.001, message_id=1, msg_id='m' * 24, topic_name='orders.created',
                    data=stored, mime_type='application/json', priority=5, pub_time=1_700_000_000.0,
                    expiration_time=1_700_086_400.0, publisher='crm', correl_id=None, in_reply_to=None,
                    ext_client_id=None, has_gd=True, size=len(stored), topic_id=1)


def _best_us(step: Callable[[], object], iterations: int, repeat: int) -> float:
    best = float('inf')
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(iterations):
            step()
        best = min(best, time.process_time() - started)
    return best / iterations * 1e6


def measure(iterations: int, repeat: int) -> dict[str, float]:
    """Microseconds of CPU per call of each step, and their total."""
    body = json_limits.dumps({'data': DATA, 'priority': 5, 'expiration': 3600}).encode()
    stored, _mime = encode_data(DATA, None)
    delivery = _delivery(stored)
    steps: dict[str, Callable[[], object]] = {
        'body': lambda: parse_json(body),
        'encode': lambda: encode_data(DATA, None),
        'decode': lambda: decode_data(stored, 'application/json'),
        'pull': lambda: render_pull(delivery, 'sk.x', 1_700_000_000.5),
        'push': lambda: json_limits.dumps({'msg_id': delivery.msg_id, 'topic_name': delivery.topic_name,
                                           'data': DATA, 'priority': 5, 'pub_time_iso': '2023-11-14T22:13:20Z'}),
    }
    figures = {name: _best_us(step, iterations, repeat) for name, step in steps.items()}
    figures['total'] = sum(figures.values())
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iterations', type=int, default=20_000)
    parser.add_argument('--repeat', type=int, default=5)
    args = parser.parse_args(argv)
    codec = getattr(json_limits, 'CODEC', 'json (standard library)')
    print(f'message data: {len(json_limits.dumps(DATA).encode())} bytes of JSON; codec: {codec}; '
          f'CPU µs per call, best of {args.repeat} x {args.iterations}')
    for name, us in measure(args.iterations, args.repeat).items():
        print(f'{name:>8}: {us:7.2f} µs')
    return 0


if __name__ == '__main__':
    sys.exit(main())

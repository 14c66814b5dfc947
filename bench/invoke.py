"""Cost of ``self.invoke`` of a no-op service, as µs per call and as a ratio to a plain method call.

The target is at most 20 µs. The runtime is a real, started ``Runtime`` (from
``runtime.testing``) on a temporary SQLite database, under gevent monkey patching as gunicorn's
gevent worker runs it. Each figure is timed like ``timeit``: several rounds of many calls, with
min/median/max per call over the rounds (the minimum is the least disturbed by the machine).

Run it with ``make bench`` or::

    .venv/bin/python bench/invoke.py [--rounds 7] [--number 100000]

(it patches itself; ``.venv/bin/python -m gevent.monkey bench/invoke.py`` gives the same figures).
"""

from gevent import monkey

# Patch before anything else is imported, as the server does.
monkey.patch_all()

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import timeit  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from runtime.service import Service  # noqa: E402
from runtime.testing import TestRuntime, make_settings  # noqa: E402

#: Rounds and calls per round when not given on the command line.
DEFAULT_ROUNDS = 7
DEFAULT_NUMBER = 100_000


class Noop(Service):
    """The callee: does nothing."""

    name = 'bench.noop'

    def handle(self) -> None:
        pass


class Caller(Service):
    """The caller: its instance is the ``self`` whose ``self.invoke`` is timed."""

    name = 'bench.caller'

    def handle(self) -> None:
        pass

    def plain(self, payload: object = None) -> None:
        """A plain method, the unit the invoke cost is reported in."""


def _per_call_us(func: Callable[[], object], rounds: int, number: int) -> list[float]:
    timer = timeit.Timer(func)
    return [t / number * 1e6 for t in timer.repeat(repeat=rounds, number=number)]


def _fmt(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def main(argv: list[str] | None = None) -> None:
    """Time self.invoke and a plain method call; print a markdown table row and the command."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=DEFAULT_ROUNDS)
    parser.add_argument('--number', type=int, default=DEFAULT_NUMBER, help='calls per round')
    parser.add_argument('--no-write', action='store_true', help='print only; do not write bench/results')
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix='conduit-bench-') as tmp:
        rt = TestRuntime(make_settings(Path(tmp)))
        rt.start(watch=False)
        try:
            rt.deploy(Noop, Caller)
            # A caller instance as the invoker makes one, so self.invoke goes through the real path.
            caller = rt.invoker.run(Caller, None)
            payload = {'a': 1}
            invoke = caller.invoke
            plain = caller.plain
            assert invoke('bench.noop', payload) is None

            # Both go through an identical lambda, so the ratio compares the calls, not the harness.
            invoke_us = _per_call_us(lambda: invoke('bench.noop', payload), args.rounds, args.number)
            plain_us = _per_call_us(lambda: plain(payload), args.rounds, args.number)
        finally:
            rt.stop()

    imin, imed, imax = _fmt(invoke_us)
    pmin, pmed, pmax = _fmt(plain_us)
    ratio = imin / pmin
    command = common.command_line('invoke.py', [f'--rounds {args.rounds}', f'--number {args.number}'])
    section = '\n'.join([
        '## `self.invoke` of a no-op service (target: ≤ 20 µs)', '',
        '| figure | min µs | median µs | max µs | ratio to a plain method call (min/min) | target |',
        '|---|---|---|---|---|---|',
        f'| `self.invoke` of a no-op service | {imin:.2f} | {imed:.2f} | {imax:.2f} | {ratio:.0f}× | ≤ 20 µs |',
        f'| plain method call (reference) | {pmin:.3f} | {pmed:.3f} | {pmax:.3f} | 1× | |', '',
        f'{args.rounds} rounds × {args.number:,} calls, per call; Python {platform.python_version()} '
        f'({sys.implementation.name}), gevent monkey-patched, a started runtime on SQLite in a temporary directory.',
        '', f'Command: `{command}`'])
    if args.no_write:
        print(section)
        return
    common.write_result('invoke', section, {
        'invoke_us': invoke_us, 'plain_us': plain_us, 'ratio_min': ratio,
        'summary': [{'figure': '`self.invoke` of a no-op service', 'target': '≤ 20 µs',
                     'measured': f'{imed:.2f} µs median ({ratio:.0f}× a plain method call)', 'met': imed <= 20}]})


if __name__ == '__main__':
    main()

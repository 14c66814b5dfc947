"""Invocation patterns available as ``self.patterns``: fan-out/fan-in, parallel, invoke-retry, async.

All of them run in this worker's memory (greenlets), like ``invoke_async``: a restart loses what
is in flight. Callback services receive a dict; the keys are listed on each pattern below and in
the README ("Invocation patterns").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import gevent

from runtime.errors import SelfInvocation
from runtime.service.context import CHANNEL_CALLBACK, new_cid

if TYPE_CHECKING:
    from runtime.service.context import Invoker

_log = logging.getLogger(__name__)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


def _as_list(callbacks: Any) -> list[Any]:
    if callbacks is None:
        return []
    if isinstance(callbacks, (str, type)):
        return [callbacks]
    return list(callbacks) if isinstance(callbacks, Iterable) else [callbacks]


def _fresh_copy(data: dict[str, Any]) -> dict[str, Any]:
    # New dicts for every callback, so that one changing its payload cannot change what the next one,
    # or on_final, receives. Responses are not copied, as invoke() does not copy them either.
    fresh = dict(data)
    if 'data' in fresh:
        fresh['data'] = {target: dict(result) for target, result in fresh['data'].items()}
    return fresh


class _ParallelBase:
    """Runs several targets in parallel greenlets and reports each result to callbacks."""

    def __init__(self, invoker: Invoker, spawn: Callable[..., gevent.Greenlet], source: Any) -> None:
        self._invoker = invoker
        self._spawn = spawn
        self._source = source

    def _start(self, targets: dict[str, Any], on_final: Any, on_target: Any, cid: str | None) -> str:
        if not isinstance(targets, dict) or not targets:
            raise ValueError('targets must be a non-empty dict of {service name: payload}')
        store = self._invoker.store
        classes = {name: store.get(name) for name in targets}  # unknown target -> ServiceNotFound now
        final, per_target = _as_list(on_final), _as_list(on_target)
        for cb in final + per_target:
            store.get(cb)
        cid = cid or new_cid()
        self._spawn(self._run, classes, targets, final, per_target, cid, name=f'patterns:{cid}')
        return cid

    def _run(self, classes: dict[str, Any], targets: dict[str, Any], final: list[Any], per_target: list[Any],
             cid: str) -> None:
        req_ts = _now_iso()
        spawn = self._spawn
        jobs = [spawn(self._one, name, classes[name], payload, per_target, cid, name=f'patterns:{cid}:{name}')
                for name, payload in targets.items()]
        gevent.joinall(jobs)
        if not final:
            return
        results = {job.value['target']: job.value for job in jobs if job.successful() and job.value}
        data = {'phase': 'on_final', 'source': self._source.name, 'cid': cid, 'data': results,
                'ok': all(r['ok'] for r in results.values()), 'req_ts_utc': req_ts, 'resp_ts_utc': _now_iso()}
        self._callbacks(final, data)

    def _one(self, name: str, cls: Any, payload: Any, per_target: list[Any], cid: str) -> dict[str, Any]:
        req_ts = _now_iso()
        try:
            response = self._invoker.run(cls, payload, channel='parallel').response.payload
            ok, exception = True, None
        except gevent.GreenletExit:
            raise
        except Exception as e:
            _log.warning('target %s of parallel invocation %s failed: %s', name, cid, e)
            response, ok, exception = None, False, f'{type(e).__name__}: {e}'
        result = {'phase': 'on_target', 'source': self._source.name, 'target': name, 'cid': cid,
                  'response': response, 'ok': ok, 'exception': exception,
                  'req_ts_utc': req_ts, 'resp_ts_utc': _now_iso()}
        self._callbacks(per_target, result)
        return result

    def _callbacks(self, callbacks: list[Any], data: dict[str, Any]) -> None:
        store = self._invoker.store
        for cb in callbacks:
            try:
                self._invoker.run(store.get(cb), _fresh_copy(data), channel=CHANNEL_CALLBACK)
            except Exception:
                _log.exception('callback %s of parallel invocation %s failed', cb, data['cid'])


class FanOut(_ParallelBase):
    """Fan-out/fan-in: run targets in parallel, call on_target per result and on_final with all."""

    def invoke(self, targets: dict[str, Any], on_final: Any = None, on_target: Any = None,
               cid: str | None = None) -> str:
        """Start the targets; return the cid shared by every callback."""
        if not on_final:
            raise ValueError('fan-out needs at least one on_final callback')
        return self._start(targets, on_final, on_target, cid)


class Parallel(_ParallelBase):
    """Parallel execution: run targets at once and call on_target for each result."""

    def invoke(self, targets: dict[str, Any], on_target: Any = None, on_final: Any = None,
               cid: str | None = None) -> str:
        """Start the targets; return the cid shared by every callback."""
        return self._start(targets, on_final, on_target, cid)


class InvokeRetry:
    """Invoke a service, retrying on error, in place or handed over to the background."""

    def __init__(self, invoker: Invoker, spawn: Callable[..., gevent.Greenlet], source: Any) -> None:
        self._invoker = invoker
        self._spawn = spawn
        self._source = source

    def invoke(self, target: str, payload: Any = None, repeats: int = 3, seconds: float | None = None,
               minutes: float | None = None, async_fallback: bool = False, callback: Any = None,
               context: Any = None) -> Any:
        """Invoke target up to ``repeats`` times, waiting between attempts.

        Without async_fallback it blocks and returns the response, or re-raises the last error.
        With async_fallback, only the first attempt runs in place: on failure the remaining ones
        run in the background, None is returned, and each callback gets ``{cid, source, target,
        ok, response, exception, attempts, context}`` when it ends.
        """
        if repeats < 1:
            raise ValueError('repeats must be at least 1')
        if seconds is not None and minutes is not None:
            raise ValueError('give seconds or minutes, not both')
        wait = seconds if seconds is not None else (minutes * 60 if minutes is not None else 1.0)
        if wait < 0:
            raise ValueError('the wait between attempts must not be negative')
        cls = self._invoker.store.get(target)
        if cls.name == self._source.name:
            # Checked before the first attempt: retrying cannot fix it, nor may the background hide it.
            raise SelfInvocation(cls.name)
        callbacks = _as_list(callback)
        for cb in callbacks:
            self._invoker.store.get(cb)
        if async_fallback and not callbacks:
            raise ValueError('async_fallback needs a callback to report the outcome to')

        try:
            return self._invoker.invoke(cls, payload, caller=self._source)
        except Exception as e:
            if repeats == 1 and not async_fallback:
                raise
            _log.info('invoke_retry: attempt 1/%d of %s failed: %s', repeats, target, e)
            first_error = e

        if not async_fallback:
            return self._retry_in_place(cls, payload, repeats, wait)
        cid = new_cid()
        self._spawn(self._retry_in_background, cls, payload, repeats, wait, callbacks, context, cid, first_error,
                    name=f'invoke-retry:{cid}')
        return None

    def _retry_in_place(self, cls: Any, payload: Any, repeats: int, wait: float) -> Any:
        for attempt in range(2, repeats + 1):
            gevent.sleep(wait)
            try:
                return self._invoker.invoke(cls, payload, caller=self._source)
            except Exception as e:
                if attempt == repeats:
                    raise
                _log.info('invoke_retry: attempt %d/%d of %s failed: %s', attempt, repeats, cls.name, e)
        raise AssertionError('unreachable')

    def _retry_in_background(self, cls: Any, payload: Any, repeats: int, wait: float, callbacks: list[Any],
                             context: Any, cid: str, error: Exception) -> None:
        result: dict[str, Any] = {'cid': cid, 'source': self._source.name, 'target': cls.name, 'ok': False,
                                  'response': None, 'exception': None, 'attempts': 1, 'context': context}
        for attempt in range(2, repeats + 1):
            gevent.sleep(wait)
            result['attempts'] = attempt
            try:
                result['response'] = self._invoker.invoke(cls, payload, caller=self._source)
                result['ok'] = True
                break
            except gevent.GreenletExit:
                raise
            except Exception as e:
                error = e
        if not result['ok']:
            result['exception'] = f'{type(error).__name__}: {error}'
        for cb in callbacks:
            try:
                # A copy each, so that a callback changing its payload cannot change the next one's.
                self._invoker.run(self._invoker.store.get(cb), dict(result), channel=CHANNEL_CALLBACK)
            except Exception:
                _log.exception('callback %s of invoke_retry %s failed', cb, cid)


class Patterns:
    """The patterns of one service instance: ``self.patterns``.

    source is the calling service (a ``runtime.service.base.Service``, not imported here: it imports this
    module); spawn starts the greenlets, the runtime's ``Spawner.spawn``.
    """

    def __init__(self, invoker: Invoker, spawn: Callable[..., gevent.Greenlet], source: Any) -> None:
        self._invoker = invoker
        self._source = source
        self.fanout = FanOut(invoker, spawn, source)
        self.parallel = Parallel(invoker, spawn, source)
        self.invoke_retry = InvokeRetry(invoker, spawn, source)

    def invoke_async(self, target: str, payload: Any = None, callback: Any = None) -> str:
        """Async invocation with a callback: the same as self.invoke_async."""
        return self._invoker.invoke_async(target, payload, callback=callback, caller=self._source)

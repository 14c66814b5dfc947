"""``self.patterns``: fan-out/fan-in, parallel, invoke-retry and async, in-process.

``pat.source`` runs whichever pattern its payload names, so every callback sees a real source
service. Callbacks record what they received in the test's recorder (``events``); background results
are awaited with ``runtime.testing.wait_until``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import gevent
import pytest

from runtime.errors import SelfInvocation, ServiceNotFound
from runtime.service import Service
from runtime.service.invoke import CHANNEL_CALLBACK
from runtime.testing import wait_until
from tests.recorder import Recorder

# The services below are deployed bound to the test's recorder (recorder.bind): what they saw or did
# goes, in order, to 'events'; Flaky records its attempts (their cids) to 'attempts' and every
# exception it raised to 'raised'.


class Source(Service):
    """Runs the pattern named by payload['kind'] with the rest of the payload as keyword arguments."""

    name = 'pat.source'

    def handle(self) -> None:
        kwargs = dict(self.request.payload)
        kind = kwargs.pop('kind')
        patterns = self.patterns
        run = {'fanout': patterns.fanout.invoke, 'parallel': patterns.parallel.invoke,
               'retry': patterns.invoke_retry.invoke, 'async': patterns.invoke_async}[kind]
        self.response.payload = run(**kwargs)


class Double(Service):
    """Answers twice its payload."""

    name = 'pat.double'

    def handle(self) -> None:
        self.response.payload = self.request.payload * 2


class Failing(Service):
    """Always raises."""

    name = 'pat.failing'

    def handle(self) -> None:
        raise ValueError(f'bad {self.request.payload!r}')


class Flaky(Service):
    """Fails until attempt payload['succeed_on'] (never, if it is 0); each failure a new exception."""

    name = 'pat.flaky'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('attempts', self.cid)
        attempt = self.recorder.count('attempts')
        if attempt != self.request.payload['succeed_on']:
            error = RuntimeError(f'attempt {attempt} failed')
            self.recorder.add('raised', error)
            raise error
        self.response.payload = {'attempt': attempt}


def _callback(service_name: str, tag: str) -> type[Service]:
    def handle(self: Any) -> None:
        self.recorder.add('events', (tag, self.channel, self.request.payload))

    return type(tag.title().replace('_', ''), (Service,), {'name': service_name, 'handle': handle})


OnTarget = _callback('pat.on-target', 'on_target')
OnTarget2 = _callback('pat.on-target2', 'on_target2')
OnFinal = _callback('pat.on-final', 'on_final')
RetryCallback = _callback('pat.retry-callback', 'retry_callback')
AsyncCallback = _callback('pat.async-callback', 'async_callback')


class GreedyCallback(Service):
    """A callback that empties the dict it was given."""

    name = 'pat.greedy'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('events', ('greedy', self.channel, dict(self.request.payload)))
        self.request.payload.clear()


ALL = (Source, Double, Failing, Flaky, OnTarget, OnTarget2, OnFinal, RetryCallback, AsyncCallback,
       GreedyCallback)


def _events(recorder: Recorder, tag: str) -> list[dict[str, Any]]:
    return [e[2] for e in recorder['events'] if e[0] == tag]


def _pop_timestamps(data: dict[str, Any]) -> dict[str, Any]:
    """Check the two timestamps are ISO 8601 and in order; return the rest of the dict."""
    data = dict(data)
    req = datetime.fromisoformat(data.pop('req_ts_utc'))
    resp = datetime.fromisoformat(data.pop('resp_ts_utc'))
    assert req.tzinfo is not None and req <= resp
    return data


# Fan-out/fan-in


def test_fanout_reports_each_target_and_then_all_of_them(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    cid = rt.invoke('pat.source', {'kind': 'fanout', 'targets': {'pat.double': 2, 'pat.failing': 'x'},
                                   'on_target': ['pat.on-target'], 'on_final': ['pat.on-final']})
    [final] = wait_until(lambda: _events(recorder, 'on_final'))

    assert [e[0] for e in recorder['events']] == ['on_target', 'on_target', 'on_final']  # on_final comes last
    assert {e[1] for e in recorder['events']} == {CHANNEL_CALLBACK}
    per_target = {d['target']: _pop_timestamps(d) for d in _events(recorder, 'on_target')}
    expected = {
        'pat.double': {'phase': 'on_target', 'source': 'pat.source', 'target': 'pat.double', 'cid': cid,
                       'response': 4, 'ok': True, 'exception': None},
        'pat.failing': {'phase': 'on_target', 'source': 'pat.source', 'target': 'pat.failing', 'cid': cid,
                        'response': None, 'ok': False, 'exception': "ValueError: bad 'x'"},
    }
    assert per_target == expected

    final = _pop_timestamps(final)
    assert {t: _pop_timestamps(d) for t, d in final.pop('data').items()} == expected
    assert final == {'phase': 'on_final', 'source': 'pat.source', 'cid': cid, 'ok': False}


def test_fanout_all_ok(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    cid = rt.invoke('pat.source', {'kind': 'fanout', 'targets': {'pat.double': 'ab'},
                                   'on_final': 'pat.on-final'})
    [final] = wait_until(lambda: _events(recorder, 'on_final'))
    assert (final['cid'], final['ok']) == (cid, True)
    assert final['data']['pat.double']['response'] == 'abab'
    assert _events(recorder, 'on_target') == []


def test_fanout_needs_an_on_final_callback(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with pytest.raises(ValueError, match='on_final'):
        rt.invoke('pat.source', {'kind': 'fanout', 'targets': {'pat.double': 1},
                                 'on_target': 'pat.on-target'})


@pytest.mark.parametrize('unknown', ['target', 'on_target', 'on_final'])
def test_fanout_with_an_unknown_service_fails_in_the_caller(runtime_factory, unknown, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    request = {'kind': 'fanout', 'targets': {'pat.double': 1}, 'on_target': ['pat.on-target'],
               'on_final': ['pat.on-final']}
    if unknown == 'target':
        request['targets'] = {'pat.double': 1, 'pat.missing': 1}
    else:
        request[unknown] = ['pat.missing']
    with pytest.raises(ServiceNotFound) as info:
        rt.invoke('pat.source', request)
    assert info.value.name == 'pat.missing'
    gevent.sleep(0.05)
    assert recorder['events'] == []


def test_a_callback_changing_its_payload_changes_no_other(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    rt.invoke('pat.source', {'kind': 'fanout', 'targets': {'pat.double': 1},
                             'on_target': ['pat.greedy', 'pat.on-target'], 'on_final': 'pat.on-final'})
    [final] = wait_until(lambda: _events(recorder, 'on_final'))
    [seen] = _events(recorder, 'on_target')
    assert seen == _events(recorder, 'greedy')[0] and seen['response'] == 2
    assert final['data']['pat.double'] == seen


# Parallel


def test_parallel_calls_on_target_for_each_target(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    cid = rt.invoke('pat.source', {'kind': 'parallel', 'targets': {'pat.double': 3, 'pat.failing': 4},
                                   'on_target': ['pat.on-target', 'pat.on-target2']})
    wait_until(lambda: len(_events(recorder, 'on_target')) == 2 and len(_events(recorder, 'on_target2')) == 2)
    for tag in ('on_target', 'on_target2'):
        got = {d['target']: _pop_timestamps(d) for d in _events(recorder, tag)}
        assert got == {
            'pat.double': {'phase': 'on_target', 'source': 'pat.source', 'target': 'pat.double', 'cid': cid,
                           'response': 6, 'ok': True, 'exception': None},
            'pat.failing': {'phase': 'on_target', 'source': 'pat.source', 'target': 'pat.failing', 'cid': cid,
                            'response': None, 'ok': False, 'exception': 'ValueError: bad 4'},
        }
    wait_until(lambda: not rt.spawner.running('patterns:'), message='the parallel greenlets to end')
    assert _events(recorder, 'on_final') == []


def test_parallel_targets_run_at_the_same_time(runtime_factory, recorder):
    class Gate(Service):
        """Waits until both gates have been entered: only possible if they run concurrently."""

        name = 'pat.gate'

        def handle(self) -> None:
            self.recorder.add('events', ('entered', self.channel, self.request.payload))
            wait_until(lambda: len(_events(self.recorder, 'entered')) == 2, message='the other target to start')
            self.response.payload = 'through'

    class Gate2(Gate):
        name = 'pat.gate2'

    rt = runtime_factory(*recorder.bind_all(ALL), recorder.bind(Gate), recorder.bind(Gate2))
    rt.invoke('pat.source', {'kind': 'parallel', 'targets': {'pat.gate': 1, 'pat.gate2': 2},
                             'on_target': 'pat.on-target'})
    results = wait_until(lambda: len(_events(recorder, 'on_target')) == 2 and _events(recorder, 'on_target'))
    assert [r['response'] for r in results] == ['through', 'through']


# invoke_retry


def test_invoke_retry_blocking_succeeds_on_the_third_attempt(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    response = rt.invoke('pat.source', {'kind': 'retry', 'target': 'pat.flaky', 'payload': {'succeed_on': 3},
                                        'repeats': 3, 'seconds': 0.01})
    assert response == {'attempt': 3}
    assert recorder.count('attempts') == 3 and recorder.count('raised') == 2


def test_invoke_retry_blocking_reraises_the_last_error(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with pytest.raises(RuntimeError) as info:
        rt.invoke('pat.source', {'kind': 'retry', 'target': 'pat.flaky', 'payload': {'succeed_on': 0},
                                 'repeats': 3, 'seconds': 0})
    assert recorder.count('attempts') == 3
    assert info.value is recorder['raised'][-1]
    assert str(info.value) == 'attempt 3 failed'


def test_invoke_retry_with_one_repeat_raises_at_once(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with pytest.raises(RuntimeError, match='attempt 1 failed'):
        rt.invoke('pat.source', {'kind': 'retry', 'target': 'pat.flaky', 'payload': {'succeed_on': 0},
                                 'repeats': 1, 'seconds': 0})
    assert recorder.count('attempts') == 1


def test_invoke_retry_async_fallback_calls_back_on_success(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    response = rt.invoke('pat.source', {'kind': 'retry', 'target': 'pat.flaky', 'payload': {'succeed_on': 2},
                                        'repeats': 3, 'seconds': 0.01, 'async_fallback': True,
                                        'callback': 'pat.retry-callback', 'context': {'order': 7}})
    assert response is None  # the first attempt failed, the rest went to the background
    [result] = wait_until(lambda: _events(recorder, 'retry_callback'))
    assert isinstance(result.pop('cid'), str)
    assert result == {'source': 'pat.source', 'target': 'pat.flaky', 'ok': True, 'response': {'attempt': 2},
                      'exception': None, 'attempts': 2, 'context': {'order': 7}}
    assert recorder.count('attempts') == 2


def test_invoke_retry_async_fallback_calls_back_on_failure(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    rt.invoke('pat.source', {'kind': 'retry', 'target': 'pat.flaky', 'payload': {'succeed_on': 0},
                             'repeats': 3, 'seconds': 0, 'async_fallback': True,
                             'callback': ['pat.retry-callback'], 'context': 'ctx'})
    [result] = wait_until(lambda: _events(recorder, 'retry_callback'))
    assert isinstance(result.pop('cid'), str)
    assert result == {'source': 'pat.source', 'target': 'pat.flaky', 'ok': False, 'response': None,
                      'exception': 'RuntimeError: attempt 3 failed', 'attempts': 3, 'context': 'ctx'}
    assert recorder.count('attempts') == 3


def test_invoke_retry_callbacks_each_get_their_own_payload(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    rt.invoke('pat.source', {'kind': 'retry', 'target': 'pat.flaky', 'payload': {'succeed_on': 2},
                             'repeats': 2, 'seconds': 0, 'async_fallback': True,
                             'callback': ['pat.greedy', 'pat.retry-callback']})
    [result] = wait_until(lambda: _events(recorder, 'retry_callback'))
    assert result == _events(recorder, 'greedy')[0] and result['attempts'] == 2


def test_invoke_retry_async_fallback_not_needed(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    response = rt.invoke('pat.source', {'kind': 'retry', 'target': 'pat.flaky', 'payload': {'succeed_on': 1},
                                        'seconds': 0, 'async_fallback': True,
                                        'callback': 'pat.retry-callback'})
    assert response == {'attempt': 1}
    gevent.sleep(0.05)
    assert _events(recorder, 'retry_callback') == []


def test_invoke_retry_of_oneself_is_not_retried(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with pytest.raises(SelfInvocation):
        rt.invoke('pat.source', {'kind': 'retry', 'target': 'pat.source', 'repeats': 3, 'seconds': 0,
                                 'async_fallback': True, 'callback': 'pat.retry-callback'})
    gevent.sleep(0.05)
    assert _events(recorder, 'retry_callback') == []


@pytest.mark.parametrize('kwargs, match', [
    ({'repeats': 0}, 'repeats'),
    ({'seconds': 1, 'minutes': 1}, 'seconds or minutes'),
    ({'seconds': -1}, 'negative'),
    ({'async_fallback': True}, 'callback'),
])
def test_invoke_retry_rejects_bad_arguments(runtime_factory, kwargs, match, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with pytest.raises(ValueError, match=match):
        rt.invoke('pat.source', {'kind': 'retry', 'target': 'pat.double', 'payload': 1, **kwargs})
    assert recorder['attempts'] == []


# invoke_async through patterns


def test_patterns_invoke_async_calls_back(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    cid = rt.invoke('pat.source', {'kind': 'async', 'target': 'pat.double', 'payload': 21,
                                   'callback': 'pat.async-callback'})
    [result] = wait_until(lambda: _events(recorder, 'async_callback'))
    assert result == {'cid': cid, 'source': 'pat.source', 'target': 'pat.double', 'ok': True, 'response': 42,
                      'exception': None}

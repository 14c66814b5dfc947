"""``service_factory``: a service run alone through the real invoker, its collaborators recorded."""

from __future__ import annotations

import pytest

from runtime import Service
from runtime.errors import InvalidInput, InvalidOutput, MethodNotAllowed, SelfInvocation, ServiceNotFound
from runtime.service import HttpInfo
from runtime.service.invoke import CHANNEL_INVOKE
from runtime.testing import Invocation, service_factory

pytestmark = pytest.mark.unit


class CreateContact(Service):
    name = 'unit.contact.create'
    input = 'name', 'email', '-phone'
    output = 'contact_id',

    def handle(self) -> None:
        contact = self.invoke('unit.contact.store', dict(self.request.input))
        self.publish('billing.account.open', {'id': contact['id']}, priority=7)
        self.response.payload = {'contact_id': contact['id'], 'region': self.config.get('region', 'eu')}


class StoreContact(Service):
    name = 'unit.contact.store'

    def handle(self) -> None:
        self.response.payload = dict(self.request.payload, id=42)


class Failing(Service):
    name = 'unit.failing'
    finalized: list[str] = []

    def handle(self) -> None:
        raise KeyError('customer_id')

    def finalize_handle(self) -> None:
        self.finalized.append(self.cid)


class Fanning(Service):
    name = 'unit.fanning'

    def handle(self) -> None:
        self.response.payload = {
            'cid': self.invoke_async('unit.audit', {'who': 'x'}),
            'fan': self.patterns.fanout.invoke({'unit.a': 1, 'unit.b': 2}, on_final='unit.done'),
        }


class Subscriber(Service):
    name = 'unit.subscriber'

    def handle(self) -> None:
        key = self.pubsub.subscribe('orders.*')
        self.pubsub.publish('orders.created', {'n': 1}, correl_id='c-1')
        self.pubsub.publish('invoices.created', {'n': 2})
        self.response.payload = self.pubsub.get_messages(key)


class Rest(Service):
    name = 'unit.rest'
    input = 'id',

    def handle_GET(self) -> None:
        self.response.status_code = 201
        self.response.headers['X-Id'] = self.request.input.id
        self.response.payload = {'id': self.request.input.id}


def test_invokes_are_answered_from_responses_and_recorded() -> None:
    sut = service_factory(CreateContact, responses={'unit.contact.store': lambda p: dict(p, id=7)},
                          config={'region': 'apac'})
    assert sut.invoke({'name': 'Ada', 'email': 'a@x'}) == {'contact_id': 7, 'region': 'apac'}
    (call,) = sut.invocations
    assert call == Invocation('unit.contact.store', {'name': 'Ada', 'email': 'a@x', 'phone': None}, CHANNEL_INVOKE,
                              call.cid)
    (pub,) = sut.publications
    assert (pub.topic, pub.data, pub.kwargs, pub.publisher) == ('billing.account.open', {'id': 7}, {'priority': 7},
                                                               'unit.contact.create')
    assert pub.msg_id.startswith('zpsm') and len(pub.msg_id) == 28
    assert sut.response.status_code == 200


def test_other_services_run_for_real_and_are_not_recorded() -> None:
    sut = service_factory(CreateContact, StoreContact)
    assert sut.invoke({'name': 'Ada', 'email': 'a@x'}) == {'contact_id': 42, 'region': 'eu'}
    assert sut.invocations == []


def test_an_unknown_service_is_not_found_as_in_production() -> None:
    sut = service_factory(CreateContact)
    with pytest.raises(ServiceNotFound, match='unit.contact.store'):
        sut.invoke({'name': 'Ada', 'email': 'a@x'})
    assert sut.publications == []


def test_input_is_validated_as_in_production() -> None:
    sut = service_factory(CreateContact, StoreContact)
    with pytest.raises(InvalidInput) as e:
        sut.invoke({'name': ''})
    assert list(e.value.fields) == ['name', 'email']
    assert sut.last is None


def test_missing_output_is_invalid_output() -> None:
    class Forgetful(Service):
        name = 'unit.forgetful'
        output = 'contact_id',

        def handle(self) -> None:
            self.response.payload = {'id': 1}

    with pytest.raises(InvalidOutput, match='contact_id'):
        service_factory(Forgetful).invoke()


def test_the_service_s_own_exception_propagates_and_hooks_still_run() -> None:
    sut = service_factory(Failing)
    with pytest.raises(KeyError, match='customer_id'):
        sut.invoke(cid='cid-1')
    assert Failing.finalized[-1] == 'cid-1'


def test_a_responder_that_raises_fails_the_caller_with_its_exception() -> None:
    def down(payload: object) -> object:
        raise ConnectionError('store down')

    sut = service_factory(CreateContact, responses={'unit.contact.store': down})
    with pytest.raises(ConnectionError, match='store down'):
        sut.invoke({'name': 'Ada', 'email': 'a@x'})
    assert [c.name for c in sut.invocations] == ['unit.contact.store']


def test_self_invocation_is_refused_as_in_production() -> None:
    class Selfish(Service):
        name = 'unit.selfish'

        def handle(self) -> None:
            self.invoke('unit.selfish')

    with pytest.raises(SelfInvocation):
        service_factory(Selfish).invoke()


def test_async_invocations_and_patterns_are_recorded_once_done() -> None:
    responses = {'unit.audit': None, 'unit.a': lambda p: p * 10, 'unit.b': lambda p: p * 10, 'unit.done': None}
    sut = service_factory(Fanning, responses=responses)
    payload = sut.invoke()
    sut.wait()
    by_name = {c.name: c for c in sut.invocations}
    assert by_name['unit.audit'].payload == {'who': 'x'} and by_name['unit.audit'].cid == payload['cid']
    assert by_name['unit.a'].payload == 1 and by_name['unit.b'].payload == 2
    final = by_name['unit.done'].payload
    assert final['cid'] == payload['fan'] and final['ok'] is True
    assert {t: r['response'] for t, r in final['data'].items()} == {'unit.a': 10, 'unit.b': 20}


def test_pubsub_subscribe_publish_and_pull() -> None:
    sut = service_factory(Subscriber)
    (message,) = sut.invoke()
    assert message['data'] == {'n': 1}
    assert message['topic_name'] == 'orders.created'
    assert message['correl_id'] == 'c-1'
    assert message['msg_id'] == sut.publications[0].msg_id
    (sub,) = sut.subscriptions
    assert (sub.pattern, sub.service, sub.subscriber) == ('orders.*', '', 'unit.subscriber')
    assert sub.sub_key.startswith('sk.')


def test_publish_refuses_arguments_production_refuses() -> None:
    class Bad(Service):
        name = 'unit.bad-publisher'

        def handle(self) -> None:
            self.publish('t', 1, priorty=3)

    with pytest.raises(TypeError, match='priorty'):
        service_factory(Bad).invoke()


def test_rest_channel_and_full_response() -> None:
    sut = service_factory(Rest)
    http = HttpInfo('GET', '/rest', params={'id': '5'})
    assert sut.invoke(None, channel='rest', http=http) == {'id': '5'}
    assert sut.response.status_code == 201
    assert sut.response.headers == {'X-Id': '5'}
    with pytest.raises(MethodNotAllowed):
        sut.invoke(None, channel='rest', http=HttpInfo('POST', '/rest', params={'id': '5'}))


def test_reset_forgets_what_was_recorded() -> None:
    sut = service_factory(CreateContact, responses={'unit.contact.store': {'id': 1}})
    sut.invoke({'name': 'Ada', 'email': 'a@x'})
    sut.reset()
    assert (sut.invocations, sut.publications, sut.last) == ([], [], None)
    sut.invoke({'name': 'Bob', 'email': 'b@x'})
    assert len(sut.invocations) == 1

"""Delivery options: the common ones and those each subscriber kind declares, typed without a database."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from runtime.config import PubSubSection
from runtime.errors import ConfigError
from runtime.pubsub.options import COMMON_OPTIONS, DeliveryOptions, KindOptions, OptionTypes
from runtime.pubsub.subscribers import SUBSCRIBER_KINDS
from runtime.pubsub.subscribers.file import FileOptions
from runtime.pubsub.subscribers.rest_push import RestPushOptions

pytestmark = pytest.mark.unit

TYPES = SUBSCRIBER_KINDS.options
SECRET = '${CONDUIT_SECRET_PUSH}'


def test_the_server_defaults_lie_under_the_given_options() -> None:
    settings = PubSubSection(max_attempts=7, wait_non_sock_err=1.5)
    typed = TYPES.typed(settings, 'service', {'delivery_batch_size': 5}, 'w')
    assert (typed.max_attempts, typed.wait_non_sock_err, typed.delivery_batch_size) == (7, 1.5, 5)


def test_a_kind_reads_its_own_options_and_others_keep_their_defaults() -> None:
    typed = TYPES.typed(None, 'rest_push', {'push_method': 'PUT', 'push_batch': True, 'max_attempts': 3}, 'w')
    assert (typed.of(RestPushOptions).push_method, typed.of(RestPushOptions).push_batch) == ('PUT', True)
    assert typed.of(FileOptions) == FileOptions()
    assert DeliveryOptions().of(RestPushOptions) == RestPushOptions()  # a SubInfo made by hand


@pytest.mark.parametrize('key', ['with_overrides', 'from_settings', 'of', 'kinds', 'own', '__class__', 'nope'])
def test_an_unknown_option_is_named_even_when_it_is_an_attribute_name(key: str) -> None:
    # 'with_overrides' and 'from_settings' passed the old hasattr() check and raised TypeError (a 500 in the API).
    with pytest.raises(ConfigError, match=f"unknown delivery option '{key}'"):
        TYPES.typed(None, 'service', {key: 'x'}, 'w')


def test_file_options_are_refused_on_another_kind_push_options_are_accepted_and_checked() -> None:
    with pytest.raises(ConfigError, match=r'file_format, file_per: file_\* options are for subscriptions of kind file'):
        TYPES.typed(None, 'service', {'file_per': 'batch', 'file_format': 'csv'}, 'w')
    # Zato's object files give push options to every subscription: accepted, and checked all the same.
    assert TYPES.typed(None, 'service', {'push_method': 'PUT'}, 'w').of(RestPushOptions).push_method == 'PUT'
    with pytest.raises(ConfigError, match='push_method must be one of POST, PUT, PATCH'):
        TYPES.typed(None, 'pull', {'push_method': 'GET'}, 'w')


@pytest.mark.parametrize(('given', 'message'), [
    ({'max_attempts': 0}, 'must be at least 1'),
    ({'max_attempts': 2.5}, 'delivery option max_attempts has an invalid value 2.5'),
    ({'err_should_block': 1}, 'delivery option err_should_block has an invalid value 1'),
    ({'wait_sock_err': -1}, 'delivery option wait_sock_err has an invalid value -1'),
    ({'push_timeout_secs': 0}, 'push_timeout_secs must be more than 0'),
    ({'push_password': SECRET}, 'push_password needs push_username'),
    ({'file_format': 'xml'}, 'file_format must be one of json, jsonl, csv'),
])
def test_mistyped_and_inconsistent_values_are_named(given: dict[str, object], message: str) -> None:
    kind = 'file' if any(k.startswith('file_') for k in given) else 'rest_push'
    with pytest.raises(ConfigError, match=message):
        TYPES.typed(None, kind, given, 'subscription to orders')


def test_a_secret_option_is_never_shown_as_given() -> None:
    with pytest.raises(ConfigError) as refused:
        TYPES.typed(None, 'rest_push', {'push_username': 'u', 'push_password': 12345}, 'w')
    assert '(hidden)' in str(refused.value) and '12345' not in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        TYPES.typed(None, 'rest_push', {'push_username': 'u', 'push_password': 'plain-password'}, 'w')
    assert 'plain-password' not in str(refused.value)


def test_the_flat_view_lists_every_option_common_first_then_each_kinds_in_order() -> None:
    flat = TYPES.flat(TYPES.typed(None, 'file', {'file_format': 'csv'}, 'w'))
    names = list(flat)
    assert names[:len(COMMON_OPTIONS)] == list(COMMON_OPTIONS)
    assert names.index('push_method') < names.index('file_format') and flat['file_format'] == 'csv'
    assert list(TYPES.names()) == names


def test_an_option_declared_by_two_kinds_or_shadowing_a_common_one_is_refused() -> None:
    @dataclass(frozen=True)
    class Shadow(KindOptions):
        max_attempts: int = 1

    @dataclass(frozen=True)
    class Twice(KindOptions):
        push_method: str = 'POST'

    for cls in (Shadow, Twice):
        with pytest.raises(ValueError, match='declared twice'):
            OptionTypes({'rest_push': RestPushOptions, 'other': cls})

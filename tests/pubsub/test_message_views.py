"""The message model's views over one Delivery, and the ISO time formatter they share."""

from __future__ import annotations

import base64
import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from runtime.errors import UnrenderableMessage
from runtime.pubsub.message import (
    Delivery,
    decode_data,
    encode_data,
    expiration_secs,
    pull_meta,
    pull_view,
    push_view,
    render_pull,
    service_view,
)
from runtime.util.timefmt import iso, iso_millis

pytestmark = pytest.mark.unit

PUB_TIME = 1_767_225_600.25  # 2026-01-01T00:00:00.250000+00:00


def delivery(data: Any = None, mime_type: str | None = None, lifetime: float = 60.0, **fields: Any) -> Delivery:
    text, mime = encode_data({'n': 1} if data is None else data, mime_type)
    values: dict[str, Any] = dict(
        entry_id=1, sub_id=1, delivery_count=1, next_attempt_at=0.0, last_error='', recv_time=PUB_TIME + 0.5,
        message_id=1, msg_id='zpsm1', topic_name='t', data=text, mime_type=mime, priority=5, pub_time=PUB_TIME,
        expiration_time=PUB_TIME + lifetime, publisher='service:p', correl_id=None, in_reply_to=None,
        ext_client_id=None, has_gd=True, size=len(text))
    values.update(fields)
    return Delivery(**values)


def test_payload_decodes_base64_data_as_the_views_do() -> None:
    d = delivery(b'\x00\x01binary\xff')
    assert d.mime_type == 'application/octet-stream;base64'
    assert d.payload() == b'\x00\x01binary\xff'
    assert d.payload() == decode_data(d.data, d.mime_type) == service_view(d, 'sk.1')['data']


def test_payload_of_json_and_text() -> None:
    assert delivery({'a': [1, 2]}).payload() == {'a': [1, 2]}
    assert delivery('plain', 'text/plain').payload() == 'plain'


@pytest.mark.parametrize(('lifetime', 'shown'), [(60.0, 60), (59.6, 60), (60.4, 60), (0.4, 0), (3600.5, 3600)])
def test_every_view_shows_the_same_expiration(lifetime: float, shown: int) -> None:
    d = delivery(lifetime=lifetime)
    views = [service_view(d, 'sk.1')['expiration'], pull_meta(d, 'sk.1', PUB_TIME)['expiration'],
             pull_view(d, 'sk.1', PUB_TIME)['meta']['expiration'], push_view(d, 1)['expiration'],
             json.loads(render_pull(d, 'sk.1', PUB_TIME))['meta']['expiration']]
    assert views == [shown] * 5 and expiration_secs(d) == shown
    assert all(type(v) is int for v in views)


def test_every_view_formats_times_the_same_way() -> None:
    d = delivery()
    expected = {'pub_time_iso': '2026-01-01T00:00:00.250000+00:00',
                'recv_time_iso': '2026-01-01T00:00:00.750000+00:00',
                'expiration_time_iso': '2026-01-01T00:01:00.250000+00:00'}
    for view in (service_view(d, 'sk.1'), pull_meta(d, 'sk.1', PUB_TIME), push_view(d, 1)):
        assert {k: view[k] for k in expected} == expected


def test_a_message_received_when_published_shows_one_time_twice() -> None:
    d = delivery(recv_time=PUB_TIME)
    for view in (service_view(d, 'sk.1'), pull_meta(d, 'sk.1', PUB_TIME), push_view(d, 1)):
        assert view['pub_time_iso'] == view['recv_time_iso'] == '2026-01-01T00:00:00.250000+00:00'


def test_the_publishers_own_pub_time_is_shown_verbatim() -> None:
    d = delivery(ext_pub_time='2026-01-02T03:04:05.678+01:00')
    for view in (service_view(d, 'sk.1'), pull_meta(d, 'sk.1', PUB_TIME), push_view(d, 1)):
        assert view['pub_time_iso'] == '2026-01-02T03:04:05.678+01:00'


def test_binary_data_in_each_view() -> None:
    d = delivery(b'\xff\xfe', 'image/png')
    stored = base64.b64encode(b'\xff\xfe').decode()
    service = service_view(d, 'sk.1')
    assert (service['data'], service['mime_type']) == (b'\xff\xfe', 'image/png')  # decoded for a service
    pulled = pull_view(d, 'sk.1', PUB_TIME)
    assert (pulled['data'], pulled['meta']['mime_type']) == (stored, 'image/png;base64')  # base64 on the wire
    assert push_view(d, d.data)['mime_type'] == 'image/png;base64'
    assert json.loads(render_pull(d, 'sk.1', PUB_TIME))['data'] == stored


def test_the_rendered_pull_is_the_pull_view_as_json() -> None:
    d = delivery({'deep': {'x': [1, 'é']}}, correl_id='c1')
    now = PUB_TIME + 2.5
    assert json.loads(render_pull(d, 'sk.1', now, 'ack.1')) == pull_view(d, 'sk.1', now, 'ack.1')
    meta = pull_view(d, 'sk.1', now, 'ack.1')['meta']
    assert (meta['ack_id'], meta['correl_id'], meta['time_since_pub']) == ('ack.1', 'c1', '0:00:02.500000')
    assert 'mime_type' not in meta and 'in_reply_to' not in meta


def test_data_that_is_not_json_cannot_be_rendered() -> None:
    d = delivery()
    d.data = '{"n": NaN'
    for render in (lambda: service_view(d, 'sk.1'), lambda: pull_view(d, 'sk.1', PUB_TIME),
                   lambda: render_pull(d, 'sk.1', PUB_TIME)):
        with pytest.raises(UnrenderableMessage):
            render()


def test_iso_is_datetimes_isoformat() -> None:
    rng = random.Random(11)
    stamps = [0.0, 1.0, 0.9999995, 1e9 + 0.0005, -1.5, PUB_TIME, 1_767_225_599.9999996]
    stamps += [1e9 + micros / 1e6 for micros in (1, 999, 1_000, 1_001, 10_000, 999_000, 999_999)]
    stamps += [rng.uniform(0, 2e9) for _ in range(2_000)]
    for ts in stamps:
        moment = datetime.fromtimestamp(ts, UTC)
        assert iso(ts) == moment.isoformat(), ts
        assert iso_millis(ts) == moment.isoformat(timespec='milliseconds'), ts


def test_iso_of_an_impossible_time_raises_as_datetime_does() -> None:
    for ts in (float('inf'), float('nan'), 1e20):
        with pytest.raises((OverflowError, OSError, ValueError)):
            datetime.fromtimestamp(ts, UTC)
        with pytest.raises((OverflowError, OSError, ValueError)):
            iso(ts)

"""One pull answer carries at most pubsub.max_pull_chars characters of data, whatever max_len asks."""

from __future__ import annotations

from pathlib import Path

from tests.security.conftest import PASSWORD, USER, start_target, stop_and_check_log


def test_a_pull_answer_is_capped_by_the_server(tmp_path: Path) -> None:
    server = start_target(tmp_path, f'sqlite:///{tmp_path / "conduit.db"}',
                          '[pubsub]\nmax_pull_chars = 1000\nmax_message_size = 600\n')
    try:
        auth = (USER, PASSWORD)
        r = server.request('POST', '/pubsub/subscribe/topic/sec.topic', auth=auth)
        assert r.status_code == 200, r.text
        for n in range(5):
            r = server.request('POST', '/pubsub/topic/sec.topic', json={'data': str(n) * 398}, auth=auth)
            assert r.status_code == 200, r.text
        sizes = []
        for _ in range(3):
            r = server.request('POST', '/pubsub/messages/get', json={'max_len': 10 ** 9}, auth=auth)
            assert r.status_code == 200, r.text
            sizes.append(r.json()['message_count'])
        # 400 characters each (the JSON string with its quotes): two fit in 1,000, the third does not.
        assert sizes == [2, 2, 1]
    finally:
        stop_and_check_log(server)

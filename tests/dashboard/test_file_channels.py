"""The file channel page in a real browser: a channel whose file fails, why it failed, paging, filters, hostile text.

A real server polls a real directory: a good CSV is processed (done) and a CSV whose header names a
column twice fails, its reason naming the column. That file's name and its header are markup, as a
hostile partner system could send them, and must be drawn as text. Older history (rows as the
processor writes them, enough for a second page) shows paging; the state filter narrows the runs and
is kept in the address. The channels page links each file channel's name to its page; a channel
named with markup is shown as text there and on its page; a channel deleted while its page is open
is said to be gone once; an unknown name is the 404 page naming it.

Only SQLite: the page owns no SQL, and the runs query it reads is tested on both databases by
tests/files/test_admin_file_channels.py. Both tests share the module's server: each makes channels
(and a topic) of names of its own, in an inbox of its own, and reads only its own channels' runs.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import insert

from runtime.db.engine import make_engine
from runtime.db.models import FileRun
from tests.dashboard.conftest import PHONE, BrowserErrors
from tests.live_server import LiveServer, poll

# SQLite alone, for the module's shared server (it overrides the backends module_db_url is made for).
pytestmark = pytest.mark.parametrize('module_db_backend', ['sqlite'], scope='module')

SHORT = 15_000  # ms a browser expectation waits
TOPIC = 'fc.rows'
#: The topic of the viewer's test's channels (TOPIC is the first test's).
VIEWER_TOPIC = 'fc.viewer.rows'
CHANNEL = 'partner-in'
#: What a hostile partner names its file and its header's columns: markup, if drawn as HTML.
BAD_FILE = '<img src=x onerror=window.__xss=1>.csv'
BAD_COLUMN = '<img src=x onerror=window.__xss=2>'
REASON = f"column 2 of the header is named '{BAD_COLUMN}' like column 1"
#: Older history rows, enough for a second page of 25.
OLD_RUNS = 30
#: A channel name the admin API accepts that is markup, if drawn as HTML.
HOSTILE_CHANNEL = '"><img src=x onerror=window.__xss=3>'


def _drop(directory: Path, name: str, body: str) -> None:
    """Write a file as a careful partner does: under a hidden name, then renamed into place."""
    tmp = directory / '.partial'
    tmp.write_text(body, encoding='utf-8')
    os.replace(tmp, directory / name)


def _channel(server: LiveServer, name: str, inbox: Path, topic: str = TOPIC, **options: Any) -> None:
    server.admin_json('POST', '/admin/file-channels', 201, json={
        'name': name, 'directory': str(inbox), 'patterns': ['*.csv'], 'format': 'csv', 'topics': [topic],
        'poll_interval_secs': 0.1, 'stable_polls': 1, 'after': 'delete', **options})


def _old_history(server: LiveServer) -> None:
    """Runs of an hour ago, as the processor leaves them, written straight to the database."""
    engine = make_engine(server.db_url, pool_size=1)
    then = time.time() - 3600
    try:
        with engine.begin() as conn:
            conn.execute(insert(FileRun), [
                {'channel': CHANNEL, 'file_name': f'old/day-{i:02d}.csv', 'size': 100 + i, 'mtime': then,
                 'content_hash': f'{i:064x}', 'state': 'done', 'records_done': 3, 'published': 3,
                 'owner': 'host-1:1', 'started_at': then + i, 'finished_at': then + i + 0.5, 'error': ''}
                for i in range(OLD_RUNS)])
    finally:
        engine.dispose()


def _runs(page: Page) -> Any:
    return page.locator('#runs-list tbody tr')


def _fact(page: Page, key: str) -> Any:
    """The value of one field of the definition."""
    item = page.locator('#file-channel-definition .summary-item',
                        has=page.locator('dt', has_text=re.compile(f'^{re.escape(key)}$')))
    return item.locator('dd')


def test_a_failed_file_is_shown_with_its_reason_paged_and_filtered(
        shared_dash_server: LiveServer, shared_dash_page: Callable[..., Page], tmp_path: Path) -> None:
    server, dash_page = shared_dash_server, shared_dash_page
    inbox = tmp_path / 'inbox'
    inbox.mkdir()
    server.admin_json('POST', '/admin/topics', 201, json={'name': TOPIC})
    _old_history(server)
    _channel(server, CHANNEL, inbox)
    _drop(inbox, 'good.csv', 'id,amount\n1,2.50\n2,3.75\n')
    _drop(inbox, BAD_FILE, f'{BAD_COLUMN},{BAD_COLUMN}\n1,2\n')

    def finished() -> bool:
        answer = server.admin_json('GET', f'/admin/file-channels/{CHANNEL}/runs?limit=5')
        return answer['total'] == OLD_RUNS + 2 and not any(r['state'] == 'running' for r in answer['runs'])
    poll(finished, 30, interval=0.2, message='both dropped files processed')

    # From the channels page, through the channel's name.
    page = dash_page(server, 'admin')
    page.goto('/dashboard/channels')
    link = page.locator('#files-list a', has_text=CHANNEL)
    expect(link).to_have_attribute('href', f'/dashboard/file-channels/{CHANNEL}', timeout=SHORT)
    link.click()
    page.wait_for_url(f'**/dashboard/file-channels/{CHANNEL}')
    expect(page.locator('h1')).to_have_text(f'File channel {CHANNEL}')
    definition = page.locator('#file-channel-definition')
    expect(definition).to_contain_text(str(inbox), timeout=SHORT)
    expect(_fact(page, 'format')).to_have_text('csv')
    expect(_fact(page, 'topics')).to_have_text(TOPIC)

    # Most recent first: the two real files, then the history; the failed one says why, as text.
    expect(page.locator('#runs-pager .range')).to_have_text(f'1–25 of {OLD_RUNS + 2}', timeout=SHORT)
    expect(_runs(page)).to_have_count(25)
    assert sorted(_runs(page).nth(i).locator('td').first.inner_text() for i in (0, 1)) == sorted(
        ['good.csv', BAD_FILE])
    failed = _runs(page).filter(has_text=BAD_FILE)
    expect(failed.locator('td').nth(1)).to_have_text('failed')
    expect(failed.locator('td').last).to_have_text(REASON)
    good = _runs(page).filter(has_text='good.csv')
    expect(good.locator('td').nth(1)).to_have_text('done')
    expect(good.locator('td').nth(6)).to_have_text('2')  # published
    expect(good.locator('td').last).to_have_text('')
    assert page.locator('main img').count() == 0
    assert page.evaluate('window.__xss') is None
    expect(_runs(page).nth(2).locator('td').first).to_have_text(f'old/day-{OLD_RUNS - 1:02d}.csv')

    # Paged like the other lists.
    page.locator('#runs-pager button', has_text='Next').click()
    expect(page.locator('#runs-pager .range')).to_have_text(f'26–{OLD_RUNS + 2} of {OLD_RUNS + 2}', timeout=SHORT)
    expect(_runs(page)).to_have_count(OLD_RUNS + 2 - 25)
    expect(_runs(page).last.locator('td').first).to_have_text('old/day-00.csv')
    page.locator('#runs-pager button', has_text='Previous').click()
    expect(page.locator('#runs-pager .range')).to_have_text(f'1–25 of {OLD_RUNS + 2}', timeout=SHORT)

    # Filtered by state, from the first page; the filter is kept in the address.
    page.select_option('#runs-state', 'failed')
    expect(_runs(page)).to_have_count(1, timeout=SHORT)
    expect(_runs(page).first.locator('td').first).to_have_text(BAD_FILE)
    expect(page.locator('#runs-total')).to_have_text('1 run(s) in state failed.')
    expect(page.locator('#runs-pager .range')).to_have_text('1–1 of 1')
    assert page.url.endswith(f'/dashboard/file-channels/{CHANNEL}?state=failed')
    page.select_option('#runs-state', 'done')
    expect(page.locator('#runs-total')).to_have_text(f'{OLD_RUNS + 1} run(s) in state done.', timeout=SHORT)
    expect(_runs(page).filter(has_text=BAD_FILE)).to_have_count(0)
    page.select_option('#runs-state', 'skipped')
    expect(page.locator('#runs-list .empty')).to_have_text('No run of this channel is in state skipped.',
                                                           timeout=SHORT)
    page.goto(f'/dashboard/file-channels/{CHANNEL}?state=failed')
    expect(page.locator('#runs-state')).to_have_value('failed')
    expect(_runs(page)).to_have_count(1, timeout=SHORT)
    expect(_runs(page).first.locator('td').last).to_have_text(REASON)
    assert page.locator('main img').count() == 0 and page.evaluate('window.__xss') is None

    # It fits a phone, the table of runs scrolling inside its own box.
    phone = dash_page(server, 'admin', viewport=PHONE)
    phone.goto(f'/dashboard/file-channels/{CHANNEL}')
    expect(_runs(phone)).to_have_count(25, timeout=SHORT)
    assert phone.evaluate('document.documentElement.scrollWidth') <= PHONE['width']


def test_a_viewer_reads_it_a_markup_name_is_text_and_an_unknown_one_is_404(
        shared_dash_server: LiveServer, shared_dash_page: Callable[..., Page], browser_errors: BrowserErrors,
        tmp_path: Path) -> None:
    server, dash_page = shared_dash_server, shared_dash_page
    inbox = tmp_path / 'inbox'
    inbox.mkdir()
    server.admin_json('POST', '/admin/topics', 201, json={'name': VIEWER_TOPIC})
    _channel(server, HOSTILE_CHANNEL, inbox, VIEWER_TOPIC)
    _channel(server, 'quiet', inbox, VIEWER_TOPIC, is_active=False)
    page = dash_page(server, 'viewer')
    page.goto('/dashboard/channels')
    link = page.locator('#files-list a', has_text=HOSTILE_CHANNEL)
    expect(link).to_have_text(HOSTILE_CHANNEL, timeout=SHORT)
    assert page.locator('main img').count() == 0
    link.click()
    page.wait_for_url('**/dashboard/file-channels/*')
    expect(page.locator('h1')).to_have_text(f'File channel {HOSTILE_CHANNEL}')
    expect(page.locator('#runs-list .empty')).to_have_text('This channel has not processed any file yet.',
                                                           timeout=SHORT)
    expect(page.locator('#runs-total')).to_have_text('0 run(s).')
    expect(page.locator('#file-channel-definition')).to_contain_text(str(inbox))
    assert page.locator('main img').count() == 0 and page.evaluate('window.__xss') is None
    assert page.locator('main button, main input').count() == 0  # nothing to change, for anyone

    # An inactive channel says so.
    page.goto('/dashboard/file-channels/quiet')
    expect(_fact(page, 'is_active')).to_have_text('no', timeout=SHORT)
    expect(_fact(page, 'records')).to_have_text("the format's default")

    browser_errors.allow(r'status of 404')  # the pages and API answers below, logged by the browser
    # Deleted while its page is open: said once, and the page stops asking.
    server.admin_json('DELETE', '/admin/file-channels/quiet')
    expect(page.locator('#notify')).to_contain_text('File channel quiet no longer exists', timeout=SHORT)
    page.wait_for_timeout(6000)  # longer than a poll's interval
    expect(page.locator('#notify .notice')).to_have_count(1)

    answer = page.goto('/dashboard/file-channels/no-such-channel')
    assert answer is not None and answer.status == 404
    expect(page.locator('main .error')).to_have_text("404 Not Found: file channel not found: 'no-such-channel'")
    answer = page.goto('/dashboard/file-channels/%3Cscript%3Ewindow.__xss%3D4%3C%2Fscript%3E')
    assert answer is not None and answer.status == 404
    assert page.evaluate('window.__xss') is None

"""Sources behave the same whether the directory is local or on an SFTP server.

Every test here takes ``src``, a source of each kind over a fresh directory of this machine (the
SFTP server of ``tests/sshd.py`` runs here as the test's own user, so its files are local files
too): the test prepares and checks files on disk and drives the source. What users rely on: listing
only regular files (never through links), renames that never overwrite (so one claimer wins),
atomic writes that leave nothing half-written behind, names with spaces and non-ASCII letters, and
that no path given to a source gets it out of its directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtime.errors import LinkRefused, SourceMissing
from runtime.files import sftp as sftp_module
from runtime.files import sources
from runtime.files.source_base import TEMP_MARK
from runtime.files.sources import Entry, LocalSource, Source, open_source

pytestmark = pytest.mark.unit

KINDS = ['local', 'sftp']

HOSTILE_PATHS = ['../x', '/etc/passwd', 'a/../../x', 'a/..', '..', 'a\x00b', 'a\\..\\b', '']

ODD_NAMES = ['with space.csv', 'Ünïcødé – файл 数据.json', '-leading-dash', "quote'and\"dq", 'semi;colon$(x)']


@dataclass
class Src:
    """A source of one kind over dir, a directory of this machine."""

    kind: str
    source: Source
    dir: Path

    def put(self, rel: str, data: bytes = b'x') -> Path:
        path = self.dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    def names(self, rel: str = '') -> list[str]:
        return sorted(os.listdir(self.dir / rel))


@pytest.fixture(params=KINDS)
def src(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Src]:
    """A source of each kind over tmp_path/root."""
    root = tmp_path / 'root'
    root.mkdir()
    if request.param == 'local':
        source: Source = open_source(str(root), None)
    else:
        server = request.getfixturevalue('sshd_module')
        source = open_source(str(root), server.params())
    yield Src(request.param, source, root)
    source.close()


# Listing


def test_list_gives_regular_files_sorted_with_size_and_mtime(src: Src) -> None:
    src.put('b.csv', b'12345')
    src.put('a.json', b'')
    os.utime(src.dir / 'b.csv', (1_700_000_000, 1_700_000_000))
    (src.dir / 'emptydir').mkdir()
    src.put('sub/deeper/c.txt', b'c')
    entries = src.source.list(recursive=False)
    assert [e.path for e in entries] == ['a.json', 'b.csv']
    b = entries[1]
    assert (b.name, b.size, int(b.mtime)) == ('b.csv', 5, 1_700_000_000)


def test_list_recursive_descends_except_into_skip_dirs(src: Src) -> None:
    for rel in ['top', 'in/a', 'in/deep/b', 'processed/2024/c', 'errors/d', 'in/processed/e']:
        src.put(rel)
    every = [e.path for e in src.source.list(recursive=True)]
    assert every == ['errors/d', 'in/a', 'in/deep/b', 'in/processed/e', 'processed/2024/c', 'top']
    kept = src.source.list(recursive=True, skip_dirs=['processed', 'errors/', './in/deep'])
    assert [(e.path, e.name) for e in kept] == [('in/a', 'a'), ('in/processed/e', 'e'), ('top', 'top')]


def test_list_skips_links_to_files_and_to_directories(src: Src, tmp_path: Path) -> None:
    outside = tmp_path / 'outside'
    outside.mkdir()
    (outside / 'secret').write_bytes(b'secret')
    src.put('real')
    os.symlink(outside / 'secret', src.dir / 'link-to-file')
    os.symlink(outside, src.dir / 'link-to-dir')
    os.symlink(src.dir, src.dir / 'loop')
    os.symlink(tmp_path / 'nowhere', src.dir / 'dangling')
    assert [e.path for e in src.source.list(recursive=True)] == ['real']


@pytest.mark.parametrize('name', ODD_NAMES)
def test_odd_names_are_listed_read_and_renamed(src: Src, name: str) -> None:
    src.put(f'd ir/{name}', name.encode())
    [entry] = src.source.list(recursive=True)
    assert (entry.path, entry.name) == (f'd ir/{name}', name)
    with src.source.open_read(entry.path) as f:
        assert f.read() == name.encode()
    assert src.source.rename(entry.path, f'd ir/{name}.claimed')
    assert src.names('d ir') == [f'{name}.claimed']


def test_names_that_are_not_utf8_are_skipped(src: Src, caplog: pytest.LogCaptureFixture) -> None:
    src.put('good')
    with open(os.path.join(os.fsencode(src.dir), b'bad-\xff\xfe'), 'wb') as f:
        f.write(b'x')
    assert [e.path for e in src.source.list(recursive=False)] == ['good']


def test_list_of_a_missing_root_raises_source_missing(src: Src) -> None:
    src.dir.rmdir()
    with pytest.raises(SourceMissing) as info:
        src.source.list(recursive=True)
    assert str(src.dir) in str(info.value)


def test_list_of_a_root_that_is_a_file_raises_source_missing(src: Src) -> None:
    src.dir.rmdir()
    src.dir.write_bytes(b'')
    with pytest.raises(SourceMissing):
        src.source.list(recursive=False)


# Looking at one file


def test_exists_and_stat(src: Src) -> None:
    src.put('sub/f', b'abc')
    assert src.source.exists('sub/f') and src.source.exists('sub')
    assert not src.source.exists('nope') and not src.source.exists('nope/deeper')
    entry = src.source.stat('sub//./f')
    assert entry is not None and (entry.path, entry.name, entry.size) == ('sub/f', 'f', 3)
    assert src.source.stat('nope') is None
    assert src.source.stat('sub') is None  # a directory is not a file


def test_open_read_streams_the_whole_file(src: Src) -> None:
    data = os.urandom(300_000)
    src.put('big.bin', data)
    with src.source.open_read('big.bin') as f:
        first = f.read(10)
        rest = b''.join(iter(lambda: f.read(65_536), b''))
    assert first + rest == data


def test_open_read_of_a_missing_file_raises_file_not_found(src: Src) -> None:
    with pytest.raises(FileNotFoundError):
        src.source.open_read('nope.csv')


def test_open_read_refuses_a_link(src: Src, tmp_path: Path) -> None:
    (tmp_path / 'secret').write_bytes(b'secret')
    os.symlink(tmp_path / 'secret', src.dir / 'planted')
    with pytest.raises(ValueError, match='link'):
        src.source.open_read('planted')


# Renaming


def test_rename_moves_and_never_overwrites(src: Src) -> None:
    src.put('a', b'A')
    src.put('b', b'B')
    assert src.source.rename('a', 'a2') is True
    assert src.names() == ['a2', 'b']
    assert src.source.rename('a', 'a3') is False  # gone: lost a race
    assert src.source.rename('a2', 'b') is False  # target exists
    assert (src.dir / 'b').read_bytes() == b'B' and (src.dir / 'a2').read_bytes() == b'A'


def test_rename_into_a_missing_directory_raises_source_missing(src: Src) -> None:
    src.put('a')
    with pytest.raises(SourceMissing, match='processed/2024'):
        src.source.rename('a', 'processed/2024/a')
    assert src.names() == ['a']
    src.source.makedirs('processed/2024')
    assert src.source.rename('a', 'processed/2024/a')


def test_concurrent_claims_of_one_file_have_exactly_one_winner(src: Src) -> None:
    files = [f'f{i}.csv' for i in range(15)]
    for name in files:
        src.put(name)
    clients = [open_source(str(src.dir), getattr(src.source, 'params', None)) for _ in range(3)]
    wins: list[list[str]] = [[] for _ in clients]

    def claim_all(n: int) -> None:
        for name in files:
            if clients[n].rename(name, f'{name}.conduit-claim.c_{n}.1'):
                wins[n].append(name)

    threads = [threading.Thread(target=claim_all, args=(n,)) for n in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for client in clients:
        client.close()
    assert sorted(sum(wins, [])) == sorted(files)
    assert len(src.names()) == len(files)  # no spare names left behind


def test_replace_overwrites(src: Src) -> None:
    src.put('new', b'new')
    src.put('old', b'old')
    src.source.replace('new', 'old')
    assert src.names() == ['old'] and (src.dir / 'old').read_bytes() == b'new'
    with pytest.raises(FileNotFoundError):
        src.source.replace('new', 'old')


# Removing and creating


def test_remove_and_a_missing_file_is_fine(src: Src) -> None:
    src.put('a')
    src.source.remove('a')
    src.source.remove('a')
    src.source.remove('no/such/dir/a')
    assert src.names() == []


def test_makedirs_creates_parents_and_accepts_existing(src: Src) -> None:
    src.source.makedirs('a/b c/ü')
    src.source.makedirs('a/b c/ü')
    src.source.makedirs('a')
    assert (src.dir / 'a' / 'b c' / 'ü').is_dir()


def test_makedirs_under_a_missing_root_raises_source_missing(src: Src) -> None:
    src.dir.rmdir()
    with pytest.raises(SourceMissing):
        src.source.makedirs('a/b')


# Atomic writes


def test_write_atomic_writes_and_replaces_leaving_no_temporary_file(src: Src) -> None:
    src.source.write_atomic('out.json', [b'{"a":', b' 1}'])
    src.source.write_atomic('out.json', iter([b'second']))
    src.source.makedirs('sub')
    src.source.write_atomic('sub/Ünï code.csv', [b'x' * 200_000, b'y'])
    assert src.names() == ['out.json', 'sub'] and (src.dir / 'out.json').read_bytes() == b'second'
    assert (src.dir / 'sub' / 'Ünï code.csv').read_bytes() == b'x' * 200_000 + b'y'


def test_write_atomic_that_fails_leaves_the_old_file_and_no_temporary_one(src: Src) -> None:
    src.put('out.json', b'old')

    def chunks() -> Iterator[bytes]:
        yield b'partial'
        raise RuntimeError('renderer failed')

    with pytest.raises(RuntimeError, match='renderer failed'):
        src.source.write_atomic('out.json', chunks())
    assert src.names() == ['out.json'] and (src.dir / 'out.json').read_bytes() == b'old'


def test_a_temporary_file_is_named_beside_the_target(src: Src, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def chunks() -> Iterator[bytes]:
        seen.append(src.names())
        yield b'x'

    src.source.write_atomic('a.csv', chunks())
    [[temp]] = seen
    assert temp.startswith('.a.csv' + TEMP_MARK)


def test_write_atomic_into_a_missing_directory_raises_source_missing(src: Src) -> None:
    with pytest.raises(SourceMissing, match='nodir'):
        src.source.write_atomic('nodir/a.json', [b'x'])


# Hostile paths


@pytest.mark.parametrize('path', HOSTILE_PATHS)
def test_no_method_accepts_a_path_outside_the_root(src: Src, path: str) -> None:
    src.put('a')
    s = src.source
    calls = [lambda: s.exists(path), lambda: s.stat(path), lambda: s.open_read(path), lambda: s.remove(path),
             lambda: s.rename('a', path), lambda: s.rename(path, 'b'), lambda: s.replace('a', path),
             lambda: s.replace(path, 'a'), lambda: s.write_atomic(path, [b'x']),
             lambda: s.list(True, skip_dirs=[path or '..'])]
    if path:  # '' is the root itself, which makedirs may name
        calls.append(lambda: s.makedirs(path))
    for call in calls:
        with pytest.raises(ValueError):
            call()
    assert src.names() == ['a']
    assert src.names('..') == ['root']


def test_label_names_the_directory(src: Src) -> None:
    assert str(src.dir) in src.source.label
    assert src.source.root == str(src.dir)


# Local only: links inside the root that lead out, special files, and the fallback rename


@pytest.fixture
def local(tmp_path: Path) -> Src:
    root = tmp_path / 'root'
    root.mkdir()
    return Src('local', LocalSource(str(root)), root)


def test_a_link_inside_the_root_does_not_lead_out(local: Src, tmp_path: Path) -> None:
    outside = tmp_path / 'outside'
    outside.mkdir()
    os.symlink(outside, local.dir / 'processed')
    local.put('a')
    for call in [lambda: local.source.rename('a', 'processed/a'), lambda: local.source.replace('a', 'processed/a'),
                 lambda: local.source.write_atomic('processed/b', [b'x']),
                 lambda: local.source.makedirs('processed/x'), lambda: local.source.open_read('processed/s')]:
        with pytest.raises(ValueError, match='outside'):
            call()
    assert list(outside.iterdir()) == []


def test_a_fifo_is_neither_listed_nor_opened(local: Src) -> None:
    os.mkfifo(local.dir / 'pipe')
    assert local.source.list(recursive=False) == []
    with pytest.raises(ValueError, match='not a regular file'):
        local.source.open_read('pipe')


def test_claims_without_renameat2_still_have_one_winner(local: Src, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, '_renameat2', None)
    local.put('a')
    local.put('b')
    assert local.source.rename('a', 'a.1') is True
    assert local.source.rename('a', 'a.2') is False
    assert local.source.rename('a.1', 'b') is False
    assert local.names() == ['a.1', 'b']


_CLAIMER = textwrap.dedent('''
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from runtime.files import sources
    if sys.argv[4] == 'fallback':
        sources._renameat2 = None
    root, me = sys.argv[2], sys.argv[3]
    source = sources.LocalSource(root)
    while not os.path.exists(os.path.join(root, '..', 'go')):
        time.sleep(0.001)
    won = [n for n in sorted(os.listdir(root)) if n.endswith('.csv') and source.rename(n, f'{n}.claim.{me}')]
    print(' '.join(won))
''')


@pytest.mark.parametrize('mode', ['renameat2', 'fallback'])
def test_claims_racing_between_processes_have_exactly_one_winner_each(local: Src, mode: str) -> None:
    files = [f'f{i:03}.csv' for i in range(60)]
    for name in files:
        local.put(name)
    repo = str(Path(__file__).resolve().parents[2])
    procs = [subprocess.Popen([sys.executable, '-c', _CLAIMER, repo, str(local.dir), str(n), mode],
                              stdout=subprocess.PIPE, text=True) for n in range(3)]
    (local.dir.parent / 'go').touch()
    won = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(sum(won, [])) == files
    assert len(local.names()) == len(files)


def test_entry_is_a_value() -> None:
    assert Entry('a/b', 'b', 1, 2.0) == Entry('a/b', 'b', 1, 2.0)


# Writing never follows a link below the root (issue 33, defect 2): local and over SFTP


def test_writing_through_a_planted_link_on_a_subdirectory_is_refused(src: Src, tmp_path: Path) -> None:
    outside = tmp_path / 'elsewhere'
    outside.mkdir()
    os.symlink(outside, src.dir / 'payroll.run')  # as {topic}/... would reach it
    with pytest.raises(LinkRefused, match="'payroll.run' is a symbolic link"):
        src.source.write_atomic('payroll.run/2026-01-01-000000-1.jsonl', [b'x'])
    with pytest.raises(LinkRefused, match="'payroll.run'"):
        src.source.makedirs('payroll.run/deeper')
    assert list(outside.iterdir()) == []


def test_a_link_deeper_down_and_one_that_stays_inside_are_refused_too(src: Src, tmp_path: Path) -> None:
    outside = tmp_path / 'elsewhere'
    outside.mkdir()
    (src.dir / 'a').mkdir()
    os.symlink(outside, src.dir / 'a' / 'link')
    (src.dir / 'inside').mkdir()
    os.symlink(src.dir / 'inside', src.dir / 'alias')
    with pytest.raises(LinkRefused, match="'a/link'"):
        src.source.write_atomic('a/link/m.json', [b'x'])
    with pytest.raises(LinkRefused, match="'alias'"):
        src.source.write_atomic('alias/m.json', [b'x'])
    assert list(outside.iterdir()) == [] and list((src.dir / 'inside').iterdir()) == []


def test_a_link_at_the_final_name_is_replaced_not_followed(src: Src, tmp_path: Path) -> None:
    victim = tmp_path / 'victim.txt'
    victim.write_bytes(b'precious')
    os.symlink(victim, src.dir / 'out.json')
    src.source.write_atomic('out.json', [b'new'])
    assert not (src.dir / 'out.json').is_symlink() and (src.dir / 'out.json').read_bytes() == b'new'
    assert victim.read_bytes() == b'precious'


def test_a_link_planted_at_the_temporary_name_is_refused(src: Src, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / 'victim.txt'
    victim.write_bytes(b'precious')
    monkeypatch.setattr(sources, 'temp_name', lambda rel: '.out.json' + TEMP_MARK + 'guessed')
    monkeypatch.setattr(sftp_module, 'temp_name', lambda rel: '.out.json' + TEMP_MARK + 'guessed')
    os.symlink(victim, src.dir / ('.out.json' + TEMP_MARK + 'guessed'))
    with pytest.raises(OSError):
        src.source.write_atomic('out.json', [b'new'])
    assert victim.read_bytes() == b'precious' and not (src.dir / 'out.json').exists()


def test_the_root_itself_may_be_a_link_and_make_root_makes_it(src: Src, tmp_path: Path) -> None:
    real = tmp_path / 'real-out'
    real.mkdir()
    os.symlink(real, tmp_path / 'linked-out')
    kind = open_source(str(tmp_path / 'linked-out'), getattr(src.source, 'params', None))
    kind.makedirs('sub')
    kind.write_atomic('sub/m.json', [b'x'])
    assert (real / 'sub' / 'm.json').read_bytes() == b'x'
    missing = open_source(str(tmp_path / 'new' / 'dir'), getattr(src.source, 'params', None))
    missing.make_root()
    missing.write_atomic('m.json', [b'y'])
    assert (tmp_path / 'new' / 'dir' / 'm.json').read_bytes() == b'y'
    kind.close()
    missing.close()


def test_a_directory_swapped_for_a_link_between_writes_is_refused(local: Src, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / 'elsewhere'
    outside.mkdir()
    local.source.makedirs('sub')
    real_open = os.open

    def swapping_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        # Swap 'sub' for a link at the last moment before the write walks to it.
        if path == 'sub' and (local.dir / 'sub').is_dir() and not (local.dir / 'sub').is_symlink():
            (local.dir / 'sub').rmdir()
            os.symlink(outside, local.dir / 'sub')
        return real_open(path, flags, *args, **kwargs)
    monkeypatch.setattr(os, 'open', swapping_open)
    with pytest.raises(LinkRefused, match="'sub'"):
        local.source.write_atomic('sub/m.json', [b'x'])
    assert list(outside.iterdir()) == []

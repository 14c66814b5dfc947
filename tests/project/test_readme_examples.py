"""README.md's examples, run as printed against a server started the way ``make run`` starts it.

Every fenced block of README.md runs unless the line before it is an HTML comment
``<!-- not-run: reason -->`` (readers of the rendered page do not see it):

- ``sh``/``bash``: each command (lines ending in ``\\`` continue it) runs with bash in the project
  directory; it must exit with 0, and the ``# ...`` lines printed under it are its answer: JSON is
  compared loosely (the keys shown must be there with those values, ``"..."`` is any value,
  ``"msg.4f..."`` any string that starts as the example does up to its first digit, ``msg.``; a
  bare ``...`` stands for keys not shown, ``{...}`` for any object); other text must appear in
  the output, ``...`` matching anything. A command without an answer line must still not answer a
  JSON error (``"is_ok": false``).
- ``python``: a block whose first line is ``# NAME.py`` is saved as NAME.py in the project
  directory first, so that later blocks can use it. A block with ``def test_`` runs under pytest,
  as ``make test`` runs tests; one that defines services is deployed to the server (``POST
  /admin/deploy``, as ``conduit deploy`` does); any other block runs as a program.
- ``yaml``: an object file; it is loaded through the objects loader into an empty database, with
  its ``${CONDUIT_SECRET_...}`` references set and the security definitions it names but does not
  declare supplied.

``curl`` commands quoted inline in the text run too: exit code 0, no JSON error.

The server is ``.venv/bin/conduit start --demo`` in a temporary copy of config/, services/,
spark_pipeline/ and hot-deploy/ (so a developer's var/ is never touched), on a free port: the
examples say 127.0.0.1:17010, which a developer's ``make run`` may hold while the suite runs, so
``:17010`` is rewritten to that port in each command. ``CONDUIT_*`` variables of the caller's
environment are dropped, as a new user has none. One server serves the whole module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.live_server import REPO, free_port, poll

README = REPO / 'README.md'
#: What the project copy holds: what `make run` reads besides the installed package.
PROJECT_DIRS = ('config', 'services', 'spark_pipeline', 'hot-deploy')
#: The port the README's examples name.
README_PORT = 17010
RUNNABLE = ('sh', 'bash', 'python', 'yaml')
COMMAND_TIMEOUT_SECS = 60.0
PYTEST_TIMEOUT_SECS = 180.0

_NOT_RUN = re.compile(r'^<!--\s*not-run:\s*(.*?)\s*-->$')
_FILE_NAME = re.compile(r'^#\s*([\w/-]+\.py)\s*$')
_SERVICE_CLASS = re.compile(r'^class \w+\((?:\w+\.)*\w*Service\)', re.M)


@dataclass
class Block:
    """One fenced block of README.md."""

    lang: str
    line: int  # of the opening fence, 1-based
    text: str
    not_run: str | None = None  # the reason, when marked

    @property
    def where(self) -> str:
        """The block's place, for failure messages."""
        return f'README.md:{self.line} ({self.lang or "no language"} block)'

    @property
    def file_name(self) -> str | None:
        """NAME.py of a python block that starts with ``# NAME.py``."""
        first = self.text.splitlines()[0] if self.text else ''
        m = _FILE_NAME.match(first)
        return m[1] if m and self.lang == 'python' else None


@dataclass
class Command:
    """A shell command of a block and the answer printed under it."""

    line: int
    text: str
    answer: list[str] = field(default_factory=list)


def parse_blocks(text: str) -> list[Block]:
    """Every fenced block, with the not-run reason of the comment just before it."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith('```'):
            i += 1
            continue
        start, lang = i, lines[i][3:].strip()
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith('```'):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f'README.md:{start + 1}: the block opened here is never closed')
        prev = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), '')
        m = _NOT_RUN.match(prev)
        blocks.append(Block(lang, start + 1, '\n'.join(body) + '\n', m[1] if m else None))
        i += 1
    return blocks


def shell_commands(block: Block) -> list[Command]:
    """The block's commands, continuation lines joined, each with its ``# ...`` answer lines."""
    commands: list[Command] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        raw = lines[i]
        if not raw.strip():
            i += 1
            continue
        if raw.lstrip().startswith('#'):
            if not commands:
                raise AssertionError(f'README.md:{block.line + 1 + i}: an answer line before any command')
            commands[-1].answer.append(re.sub(r'^\s*#\s?', '', raw))
            i += 1
            continue
        cmd = Command(block.line + 1 + i, raw)
        while cmd.text.endswith('\\') and i + 1 < len(lines):
            i += 1
            cmd.text += '\n' + lines[i]
        commands.append(cmd)
        i += 1
    return commands


# --- Loose matching of answers -------------------------------------------------------------------

_ANY = object()
#: What ``{...}`` becomes before the answer line is parsed as JSON.
_ANY_OBJECT = '<any object>'


class _AnyString(str):
    """An expected string written as ``prefix...``: any string starting with the prefix's letters."""


def _expected_json(text: str) -> Any:
    """The answer line as JSON with its ``...`` placeholders, or ValueError."""
    text = re.sub(r'\{\s*\.\.\.\s*\}', f'"{_ANY_OBJECT}"', text)          # {...}: any object
    text = re.sub(r',\s*\.\.\.\s*(?=[,}\]])', '', text)                # , ... : more keys
    text = re.sub(r'(?<=[{\[])\s*\.\.\.\s*,', '', text)                # {..., : more keys
    return _placeholders(json.loads(text))


def _placeholders(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _placeholders(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_placeholders(v) for v in value]
    if value == _ANY_OBJECT:
        return _ANY
    if isinstance(value, str) and value.endswith('...'):
        # The example's id is made up: only the letters before its first digit are fixed.
        return _AnyString(re.match(r'\D*', value[:-3])[0])
    return value


def _compare(expected: Any, got: Any, path: str) -> str | None:
    """None when got has the shape of expected, else what differs, at which key."""
    if expected is _ANY:
        return None if isinstance(got, dict) else f'{path}: expected an object, got {got!r}'
    if isinstance(expected, _AnyString):
        if isinstance(got, str) and got.startswith(str(expected)):
            return None
        return f'{path}: expected a string starting with {str(expected)!r}, got {got!r}'
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f'{path}: expected an object, got {got!r}'
        for key, value in expected.items():
            if key not in got:
                return f'{path}: key {key!r} missing'
            problem = _compare(value, got[key], f'{path}.{key}')
            if problem:
                return problem
        return None
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return f'{path}: expected a list of {len(expected)}, got {got!r}'
        for n, (e, g) in enumerate(zip(expected, got, strict=True)):
            problem = _compare(e, g, f'{path}[{n}]')
            if problem:
                return problem
        return None
    if type(expected) is not type(got) or expected != got:
        return f'{path}: expected {expected!r}, got {got!r}'
    return None


def match_answer(answer: list[str], output: str) -> str | None:
    """None when the command's output matches the answer lines, else what differs."""
    expected_text = '\n'.join(answer).strip()
    try:
        expected = _expected_json(expected_text)
    except ValueError:
        expected = None
    if expected is not None:
        try:
            got = json.loads(output)
        except ValueError:
            return 'expected a JSON answer, got text that is not JSON'
        return _compare(expected, got, '$')
    flat = ' '.join(output.split())
    for line in answer:
        pattern = '.*'.join(re.escape(' '.join(part.split())) for part in line.strip().split('...'))
        if not re.search(pattern, flat):
            return f'no output matches {line.strip()!r}'
    return None


def error_answer(output: str) -> str | None:
    """The JSON error an output is (``is_ok`` false), if it is one."""
    try:
        got = json.loads(output)
    except ValueError:
        return None
    if isinstance(got, dict) and got.get('is_ok') is False:
        return f"a JSON error: {got.get('status')} {got.get('details')}"
    return None


# --- The server and its project directory --------------------------------------------------------

BLOCKS = parse_blocks(README.read_text(encoding='utf-8'))


def _env() -> dict[str, str]:
    # A new user has no CONDUIT_* variables; a developer's would point the demo at their database.
    return {k: v for k, v in os.environ.items() if not k.startswith('CONDUIT_')}


def with_port(command: str, port: int) -> str:
    """The command with the README's port replaced by the test server's."""
    return re.sub(rf'\b(127\.0\.0\.1|localhost):{README_PORT}\b', lambda m: f'{m[1]}:{port}', command)


@dataclass
class DemoServer:
    """`conduit start --demo` in a copy of the project: its directory, port and log."""

    project: Path
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        """Where the server listens."""
        return f'http://127.0.0.1:{self.port}'

    def log(self) -> str:
        """What the server printed so far."""
        return self.log_path.read_text(errors='replace')

    def admin(self) -> tuple[str, str]:
        """The admin API's credentials, as the server generated them at first start."""
        return 'admin', (self.project / 'var' / 'admin.password').read_text().strip()


@pytest.fixture(scope='module')
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    """One demo server for the whole module, started as `make run` starts it."""
    project = tmp_path_factory.mktemp('readme') / 'project'
    project.mkdir()
    for name in PROJECT_DIRS:
        shutil.copytree(REPO / name, project / name, ignore=shutil.ignore_patterns('__pycache__'))
    # .venv/bin/conduit of the examples: the environment running this test.
    venv = Path(sys.executable).parent.parent
    assert (venv / 'bin' / 'conduit').exists(), f'no {venv}/bin/conduit: install the project (make .venv/.installed)'
    (project / '.venv').symlink_to(venv)
    port = free_port()
    toml = project / 'config' / 'server.toml'
    text = toml.read_text()
    assert f'bind = "127.0.0.1:{README_PORT}"' in text, 'config/server.toml no longer binds the port the README names'
    toml.write_text(text.replace(f'127.0.0.1:{README_PORT}', f'127.0.0.1:{port}'))
    for block in BLOCKS:
        if block.file_name and not block.not_run:
            (project / block.file_name).write_text(block.text, encoding='utf-8')
    log_path = project / 'server.log'
    with open(log_path, 'wb') as log:
        proc = subprocess.Popen(['.venv/bin/conduit', 'start', '--demo'], cwd=project, env=_env(),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = DemoServer(project, port, proc, log_path)

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f'conduit start --demo exited with {proc.returncode}:\n{server.log()}')
        try:
            return requests.get(server.url + '/health', timeout=1).status_code == 200
        except requests.RequestException:
            return False

    try:
        poll(healthy, timeout=60, interval=0.1, message='the demo server answering /health')
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def _run(args: list[str] | str, demo: DemoServer, timeout: float,
         shell: bool = False) -> subprocess.CompletedProcess[str]:
    """Run in the project directory; past timeout, kill it with everything it started."""
    with subprocess.Popen(args, cwd=demo.project, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, text=True, shell=shell,
                          executable='/bin/bash' if shell else None, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            raise subprocess.TimeoutExpired(args, timeout, stdout, stderr) from None
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


@dataclass
class Outcome:
    """What one command did: exit code (None: it never ended) and output."""

    returncode: int | None
    stdout: str
    stderr: str


def _failure(block: Block, line: int, command: str, problem: str, outcome: Outcome | None,
             demo: DemoServer, expected: list[str] | None = None) -> str:
    parts = [f'{block.where}, line {line}: {problem}', f'command: {command}']
    if expected:
        parts.append('expected: ' + '\n          '.join(expected))
    if outcome is not None:
        parts += [f'exit code: {outcome.returncode}', f'stdout: {outcome.stdout.strip()[-3000:]}',
                  f'stderr: {outcome.stderr.strip()[-3000:]}']
    parts.append('server log (end):\n' + textwrap.indent(demo.log()[-3000:], '  '))
    return '\n'.join(parts)


def _text(output: str | bytes | None) -> str:
    return output.decode(errors='replace') if isinstance(output, bytes) else output or ''


def run_commands(commands: list[Command], demo: DemoServer) -> list[Outcome]:
    """Run the commands one after the other in one bash, as typed into one terminal; one outcome each.

    Variables and ``cd`` carry over from one command to the next, as they do for a reader. A mark
    printed after each command splits the output; a command that never ends is the first one
    without its mark, and the outcomes stop there with its exit code None.
    """
    mark = f'README-COMMAND-DONE-{uuid.uuid4().hex}'
    script = ''.join(f'{with_port(c.text, demo.port)}\nprintf "\\n{mark} %d\\n" $?; printf "\\n{mark}\\n" >&2\n'
                     for c in commands)
    try:
        proc = _run(script, demo, COMMAND_TIMEOUT_SECS * len(commands), shell=True)
        stdout, stderr = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        stdout, stderr = _text(e.stdout), _text(e.stderr)
    outs = re.split(rf'\n{mark} (\d+)\n', stdout)
    errs = stderr.split(f'\n{mark}\n')
    outcomes = [Outcome(int(outs[2 * n + 1]), outs[2 * n], errs[n] if n < len(errs) else '')
                for n in range(len(outs) // 2)]
    if len(outcomes) < len(commands):
        n = len(outcomes)
        outcomes.append(Outcome(None, outs[-1], errs[n] if n < len(errs) else ''))
    return outcomes


def run_shell(block: Block, demo: DemoServer) -> None:
    """Each command exits with 0 and answers what the README prints under it."""
    commands = shell_commands(block)
    assert commands, f'{block.where}: a shell block without commands'
    for cmd, outcome in zip(commands, run_commands(commands, demo), strict=False):
        if outcome.returncode is None:
            raise AssertionError(_failure(block, cmd.line, cmd.text, 'it did not end (or ended the shell)', outcome,
                                          demo, cmd.answer))
        if outcome.returncode != 0:
            raise AssertionError(_failure(block, cmd.line, cmd.text, 'exit code is not 0', outcome, demo, cmd.answer))
        problem = match_answer(cmd.answer, outcome.stdout) if cmd.answer else error_answer(outcome.stdout)
        if problem:
            raise AssertionError(_failure(block, cmd.line, cmd.text, f'the answer differs: {problem}', outcome, demo,
                                          cmd.answer))


def _outcome(proc: subprocess.CompletedProcess[str]) -> Outcome:
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def run_python(block: Block, demo: DemoServer) -> None:
    """A test file under pytest, a service module deployed to the server, anything else as a program."""
    name = block.file_name or f'readme_example_{block.line}.py'
    if re.search(r'^def test_', block.text, re.M):
        if not name.startswith('test_'):
            name = f'test_readme_example_{block.line}.py'
        (demo.project / name).write_text(block.text, encoding='utf-8')
        args = ['.venv/bin/python', '-m', 'gevent.monkey', '--module', 'pytest', '-q', '-p', 'no:cacheprovider', name]
        try:
            proc = _run(args, demo, PYTEST_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            problem = f'no exit within {PYTEST_TIMEOUT_SECS:g} s'
            raise AssertionError(_failure(block, block.line, ' '.join(args), problem, None, demo)) from None
        if proc.returncode != 0:
            raise AssertionError(_failure(block, block.line, ' '.join(args), 'the test fails', _outcome(proc), demo))
    elif _SERVICE_CLASS.search(block.text):
        r = requests.post(demo.url + '/admin/deploy', json={'file_name': name, 'source': block.text},
                          auth=demo.admin(), timeout=30)
        if r.status_code != 200 or not r.json().get('services'):
            raise AssertionError(f'{block.where}: deploying it as {name} answered {r.status_code} {r.text}\n'
                                 f'server log (end):\n{demo.log()[-3000:]}')
    else:
        (demo.project / name).write_text(block.text, encoding='utf-8')
        args = ['.venv/bin/python', name]
        proc = _run(args, demo, COMMAND_TIMEOUT_SECS)
        if proc.returncode != 0:
            raise AssertionError(_failure(block, block.line, ' '.join(args), 'the program fails', _outcome(proc),
                                          demo))


def load_yaml(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Apply the block, as an object file, to an empty database through the objects loader."""
    import yaml

    from runtime.core import make_objects_applier
    from runtime.db.engine import make_engine
    from runtime.db.migrate import upgrade
    from runtime.errors import ConduitError
    from runtime.security import secret_refs
    from runtime.testing import make_settings

    doc = yaml.safe_load(block.text)
    assert isinstance(doc, dict), f'{block.where}: not an object file (a mapping of sections)'
    for name in secret_refs.referenced_names(block.text):
        monkeypatch.setenv(name, 'example-secret')
    declared = {item.get('name') for item in doc.get('security') or []}
    named = {item.get('security') for section, items in doc.items() if section != 'security'
             for item in items or [] if isinstance(item, dict)}
    supplied = sorted(n for n in named - declared if isinstance(n, str) and n)
    objects = tmp_path / 'objects'
    objects.mkdir()
    (objects / 'example.yaml').write_text(block.text, encoding='utf-8')
    if supplied:
        context = [{'name': n, 'type': 'basic_auth', 'username': f'user-{n}', 'password': 'x'} for n in supplied]
        (objects / 'context.yaml').write_text(yaml.safe_dump({'security': context}), encoding='utf-8')
    settings = make_settings(tmp_path)
    # Channels and jobs must name services that exist: the example's services are supplied as a module
    # in the hot-deploy directory, which the loader reads for service names, as a server's would be.
    keys = ('service', 'push_service', 'hook_service', 'on_success', 'on_error')
    services = sorted({item[key] for items in doc.values() if isinstance(items, list) for item in items
                       if isinstance(item, dict) for key in keys if isinstance(item.get(key), str) and item[key]})
    if services:
        module = ['from runtime import Service', '']
        module += [f'class Example{i}(Service):\n    name = {name!r}\n' for i, name in enumerate(services)]
        hot_deploy = settings.path(settings.hot_deploy.dir)
        hot_deploy.mkdir(parents=True, exist_ok=True)
        (hot_deploy / 'example_services.py').write_text('\n'.join(module), encoding='utf-8')
    engine = make_engine(settings.database_url, pool_size=1)
    try:
        upgrade(engine)
        applier = make_objects_applier(settings, engine, demo=False)
        unknown = sorted(set(doc) - set(applier.handlers))
        assert not unknown, f'{block.where}: sections the server ignores: {", ".join(unknown)}'
        try:
            applier.apply()
        except ConduitError as e:
            raise AssertionError(f'{block.where}: the objects loader refuses it: {e}') from None
    finally:
        engine.dispose()


# --- Tests ---------------------------------------------------------------------------------------

RUN = [b for b in BLOCKS if b.not_run is None]


@pytest.mark.parametrize('block', RUN, ids=[f'line{b.line}-{b.lang or "text"}' for b in RUN])
def test_readme_block_runs_as_printed(block: Block, demo: DemoServer, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The block runs against the demo server and answers what the README prints."""
    if block.lang in ('sh', 'bash'):
        run_shell(block, demo)
    elif block.lang == 'python':
        run_python(block, demo)
    elif block.lang == 'yaml':
        load_yaml(block, tmp_path, monkeypatch)
    else:
        raise AssertionError(f'{block.where}: cannot be run ({", ".join(RUNNABLE)} can); give it one of those '
                             'languages or put <!-- not-run: reason --> on the line before it')


def inline_curls(text: str) -> list[tuple[int, str]]:
    """``curl ...`` commands quoted inline in the text, outside fenced blocks, with their lines."""
    found, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith('```'):
            fenced = not fenced
        elif not fenced:
            found += [(n, m[1]) for m in re.finditer(r'`(curl [^`]+)`', line)]
    return found


INLINE_CURLS = inline_curls(README.read_text(encoding='utf-8'))


@pytest.mark.parametrize(('line', 'command'), INLINE_CURLS, ids=[f'line{n}' for n, _ in INLINE_CURLS])
def test_inline_curl_commands_answer(line: int, command: str, demo: DemoServer) -> None:
    """A curl command in the text runs and is not answered with an error."""
    block = Block('inline', line, command)
    outcome = run_commands([Command(line, command)], demo)[0]
    problem = ('it did not end' if outcome.returncode is None else 'exit code is not 0' if outcome.returncode
               else error_answer(outcome.stdout))
    assert not problem, _failure(block, line, command, problem or '', outcome, demo)


def test_blocks_not_run_say_why() -> None:
    """Every block that is not run carries its reason; the list is printed."""
    skipped = [b for b in BLOCKS if b.not_run is not None]
    for b in skipped:
        assert b.not_run, f'{b.where}: <!-- not-run: --> without a reason'
        print(f'not run: {b.where}: {b.not_run}')
    assert len(RUN) > len(skipped), 'most README blocks should run'


def _normalized(command: str, port: int) -> str:
    command = re.sub(r'\s+#.*$', '', command.replace('\\\n', ' '), flags=re.M)
    command = with_port(command, port).replace('http://', '').replace('localhost:', '127.0.0.1:')
    return ' '.join(command.split())


def test_make_run_prints_commands_of_the_readme(demo: DemoServer) -> None:
    """What `make run` says to try is a command the README shows (so this module runs it too)."""
    log = demo.log()
    assert 'Try the demo' in log, f'conduit start --demo printed no "Try the demo" lines:\n{log[:2000]}'
    printed = []
    for line in log.split('Try the demo', 1)[1].splitlines()[1:]:
        if not line.startswith('  '):
            break
        printed.append(line.strip())
    assert printed, 'no command under "Try the demo"'
    readme = {_normalized(c.text, demo.port) for b in RUN if b.lang in ('sh', 'bash') for c in shell_commands(b)}
    missing = [p for p in printed if _normalized(p, demo.port) not in readme]
    assert not missing, ('printed by `make run` but not a command of a README shell block that runs:\n  '
                         + '\n  '.join(missing))


def test_an_error_answer_does_not_match_the_printed_one() -> None:
    """The loose match still tells a 401 from the printed answer, and a different id prefix."""
    printed = ['{"is_ok": true, "cid": "...", "msg_id": "msg.4f...", "status": "200 OK"}']
    denied = '{"is_ok": false, "cid": "c1", "status": "401 Unauthorized", "details": "Permission denied"}'
    assert match_answer(printed, denied) == '$.is_ok: expected True, got False'
    assert match_answer(printed, '{"is_ok": true, "cid": "c", "msg_id": "zpsm12", "status": "200 OK"}') \
        == "$.msg_id: expected a string starting with 'msg.', got 'zpsm12'"
    assert match_answer(printed, '{"is_ok": true, "cid": "c", "msg_id": "msg.12", "status": "200 OK"}') is None
    assert error_answer(denied) == 'a JSON error: 401 Unauthorized Permission denied'


def test_the_server_logged_no_error_meanwhile(demo: DemoServer) -> None:
    """What the examples did in the background (deliveries, jobs) raised nothing: a reader sees that log."""
    # Last in the module, so that it reads the log of every example before it.
    bad = [line for line in demo.log().splitlines()
           if re.search(r' (ERROR|CRITICAL) |\[(ERROR|CRITICAL)\]', line) or line.startswith('Traceback')]
    assert not bad, 'the demo server logged errors while the examples ran:\n' + '\n'.join(bad[:20])

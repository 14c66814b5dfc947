"""How every ``conduit`` command prints: tables for people, ``--json`` for scripts.

A table written to a terminal fits its width; written to a pipe or a file it is as wide as its
content, so that ``grep`` and scripts never see a cut value. Either way the columns that name
things (topics, services, msg_ids, job names: what users copy into the next command) are never
cut with '…': on a narrow terminal they fold onto more lines. Other cells of a list (data
previews, errors) stop at ``MAX_CELL_CHARS``; the full value is in the object's own view or --json.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ['MAX_CELL_CHARS', 'PIPED_TABLE_WIDTH', 'cell', 'confirm', 'echo_json', 'json_option', 'new_table',
           'print_table', 'print_values', 'rows', 'show']

#: Width of tables written to a pipe or file: wide enough that scripts never see a cut value.
PIPED_TABLE_WIDTH = 10_000

#: Longest text of a cell that names nothing (data previews, errors); the full value is in --json.
MAX_CELL_CHARS = 80

_console = Console()

#: ``--json``: print the server's answer as it is.
json_option: Callable[[Any], Any] = click.option('--json', 'as_json', is_flag=True,
                                                 help="Print the server's JSON answer.")


def _console_for_output() -> Console:
    # Output piped into grep or a script must not be cut at the width of a terminal.
    return _console if _console.is_terminal else Console(width=PIPED_TABLE_WIDTH)


def print_table(table: Table) -> None:
    """Print a table at the terminal's width, or unbounded when the output is not a terminal."""
    _console_for_output().print(table)


def echo_json(value: Any) -> None:
    """Print a value as indented JSON."""
    click.echo(json.dumps(value, indent=2, default=str))


def cell(value: Any, limit: int | None = MAX_CELL_CHARS) -> str:
    """A value as table text: '-' for None, yes/no for booleans, JSON for the rest; cut past limit."""
    if value is None:
        return '-'
    if isinstance(value, bool):
        return 'yes' if value else 'no'
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if limit is None or len(text) <= limit:
        return text
    return text[:limit - 1] + '…'


def new_table(titles: Sequence[str], names: Iterable[int] = (0,)) -> Table:
    """A table whose columns at the positions in names are never shortened (they fold onto more lines)."""
    table = Table(*titles)
    for i in names:
        table.columns[i].overflow = 'fold'
    return table


def _dig(item: Any, key: str) -> Any:
    for part in key.split('.'):
        item = item.get(part) if isinstance(item, dict) else None
    return item


def rows(items: list[dict[str, Any]], columns: Sequence[tuple[str, str]], as_json: bool, answer: Any,
         names: Iterable[str] | None = None) -> None:
    """Print a list as a table of (title, key) columns; with as_json, the whole answer.

    ``names`` are the keys of the columns that name things (default: the first column's).
    """
    if as_json:
        echo_json(answer)
        return
    name_keys = set(names) if names is not None else {columns[0][1]}
    positions = [i for i, (_, key) in enumerate(columns) if key in name_keys]
    values = [[cell(_dig(item, key), None if i in positions else MAX_CELL_CHARS)
               for i, (_, key) in enumerate(columns)] for item in items]
    print_values([title for title, _ in columns], values, positions)


def print_values(titles: Sequence[str], values: Sequence[Sequence[str]],
                 names: Iterable[int] = (0,)) -> None:
    """Print rows of text under titles; the columns at the positions in names are never shortened."""
    table = new_table(titles, names)
    for row in values:
        # Text, not str: values are data, and '[...]' in them is not Rich markup.
        table.add_row(*(Text(v) for v in row))
    print_table(table)


def show(obj: dict[str, Any], as_json: bool) -> None:
    """Print one object as a two-column table (or JSON); multi-line text (a traceback) keeps its lines."""
    if as_json:
        echo_json(obj)
        return
    table = Table('field', 'value', show_header=False)
    table.columns[0].no_wrap = True
    for key, value in obj.items():
        table.add_row(Text(key), Text(value if isinstance(value, str) else json.dumps(value, indent=1, default=str)))
    print_table(table)


def confirm(question: str, yes: bool) -> None:
    """Ask before a destructive command unless --yes was given; stop the command on 'no'."""
    if not yes:
        click.confirm(question, abort=True)

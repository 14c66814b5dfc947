"""Command-line values that several command groups parse: key=value assignments and JSON arguments."""

from __future__ import annotations

import json
from typing import Any

import click


def assignments(values: tuple[str, ...], option: str) -> dict[str, Any]:
    """key=value pairs; a value is read as JSON when it is JSON (numbers, true, lists), else as text."""
    result: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition('=')
        if not sep or not key:
            raise click.BadParameter(f'{item!r} is not key=value', param_hint=option)
        try:
            result[key] = json.loads(raw)
        except json.JSONDecodeError:
            result[key] = raw
    return result


def json_arg(value: str, what: str) -> Any:
    """A command-line value parsed as JSON; a usage error naming the option or argument otherwise."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f'not valid JSON: {e}', param_hint=what) from None

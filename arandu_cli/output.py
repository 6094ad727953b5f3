"""Printing: JSON for scripts (``--json``), rich tables for people, errors on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# In a pipe or a log rich would assume 80 columns and fold ids across lines: give it room instead.
_PIPE_WIDTH = 200
console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else _PIPE_WIDTH)
errors = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else _PIPE_WIDTH)


def emit_json(value: BaseModel | dict[str, Any] | list[Any]) -> None:
    """Print ``value`` as one JSON document on stdout (no rich markup, no wrapping)."""
    if isinstance(value, BaseModel):
        text = value.model_dump_json(indent=2)
    else:
        text = json.dumps(_plain(value), indent=2, ensure_ascii=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def when(value: datetime | None) -> str:
    """A timestamp as people read it in a table (UTC, to the second); ``-`` when absent."""
    if value is None:
        return "-"
    return value.strftime("%Y-%m-%d %H:%M:%S") + ("Z" if value.utcoffset() is not None else "")


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A rich table with these columns and rows (values shown with ``str``; None as ``-``)."""
    shown = Table(title=title, title_justify="left", expand=False)
    for column in columns:
        shown.add_column(column, overflow="fold")
    for row in rows:
        shown.add_row(*("-" if value is None else str(value) for value in row))
    return shown


def fail(message: str) -> None:
    """An error line on stderr, prefixed so it stands out in logs."""
    errors.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)


def note(message: str) -> None:
    """A line for people on stderr (so stdout stays clean for ``--json``)."""
    errors.print(message, markup=False, soft_wrap=True)

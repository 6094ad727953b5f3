"""Textual SQL statements built once per process.

``sqlalchemy.text()`` parses its string for bind parameters with a regular expression on
every call: the write path built a few thousand of them per hundred messages, a tenth of the
upsert stage's CPU. :func:`sql` returns one shared :class:`TextClause` per distinct string
(clauses are immutable, so sharing them across threads is safe).

:func:`collapse_whitespace` shortens the read path's long generated statements
(memory_core.db.driver_reads): psycopg caches its conversion of a statement (placeholders to
``$n``) only for texts up to 4,096 characters, and the indented signal and spreading
statements were longer, so they were re-parsed by a regular expression on every execution.
"""

from __future__ import annotations

import re
from functools import lru_cache

from sqlalchemy import TextClause, text

__all__ = ["collapse_whitespace", "sql"]

# A quoted literal or identifier ('it''s', "name"), or a run of whitespace outside them.
_QUOTED_OR_SPACE = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\s+")


@lru_cache(maxsize=1024)
def sql(statement: str) -> TextClause:
    """``text(statement)``, made once per distinct ``statement``."""
    return text(statement)


def collapse_whitespace(statement: str) -> str:
    """``statement`` with every run of whitespace outside quotes made one space (no ``--`` comments allowed)."""
    if "--" in statement:
        raise ValueError("collapse_whitespace would join a -- comment with the lines after it")
    collapsed = _QUOTED_OR_SPACE.sub(lambda match: " " if match.group(0).isspace() else match.group(0), statement)
    return collapsed.strip()

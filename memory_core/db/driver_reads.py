"""Read statements sent straight to psycopg, in a SQLAlchemy session's transaction, without its result layer.

The read path runs about ten statements per retrieve and reads a few hundred rows. Through
``Session.execute(...).all()`` each statement cost ~70 µs of SQLAlchemy on top of psycopg and
each row ~2.5 µs more (measured 2026-12-05 on an Intel Xeon: one row 88 µs against 18 µs
through the psycopg cursor, fifty rows 283 against 155 µs): a tenth of a small agent's retrieve
CPU in the API process. :func:`fetch_all` runs the statement on the psycopg connection under the
session's own connection and transaction and returns psycopg's named tuples (``row.column`` and
``row[i]`` both work).

What stays as it was: the statement text (``:name`` parameters, converted once per text by
SQLAlchemy's own compiler for psycopg), the parameters (passed through untouched, as SQLAlchemy
passes a ``text()`` statement's), the transaction (the session's), and SQLAlchemy's
``before_cursor_execute`` listeners, which still see every statement (tests and the retrieve
benchmark capture statements that way). A connection a failed statement left broken is
invalidated, as SQLAlchemy does for its own statements, so the pool does not hand it out again.

Preparation (``prepare``): psycopg prepares a statement after its fifth execution on a
connection, and PostgreSQL may then reuse one generic plan for every later execution, made
without the parameters' values. That suits the many small read statements (a lookup by agent
and key has one good plan for any agent: their planning was a third of a small retrieve's
database time) but not a statement whose best plan depends on who is asked and on its values (a
large agent's keyword counts, or its signal statement under time travel, which can use the
agent's own indexes only when planned for them): those are sent with ``prepare=False``,
unnamed, so that each execution is planned for its parameters, unless ``plan_cache_mode =
force_generic_plan`` is set (the read path sets it only after such statements have run).
``prepare=True`` prepares a statement at its first execution (the signal statements that run
with a generic plan: memory_core.read.signals).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import text
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.orm import Session

from memory_core.db.statements import collapse_whitespace

__all__ = ["driver_sql", "fetch_all", "fetch_scalar", "run"]

_DIALECT = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]


@lru_cache(maxsize=1024)
def driver_sql(statement: str) -> str:
    """``statement`` (``:name`` parameters) in psycopg's form (``%(name)s``, ``%`` doubled), whitespace collapsed."""
    return str(text(collapse_whitespace(statement)).compile(dialect=_DIALECT))


@lru_cache(maxsize=64)
def _plain_sql(statement: str) -> str:
    # Sent without parameters (psycopg's simple protocol: several statements may share one
    # message, and nothing is interpolated, so a % stays single).
    return collapse_whitespace(statement)


def _execute(
    session: Session, statement: str, params: Mapping[str, Any] | None, prepare: bool | None
) -> psycopg.Cursor[Any]:
    connection = session.connection()
    driver_connection: psycopg.Connection[Any] = connection.connection.driver_connection  # type: ignore[assignment]
    query = _plain_sql(statement) if params is None else driver_sql(statement)
    cursor = driver_connection.cursor(row_factory=namedtuple_row)
    for listener in connection.dispatch.before_cursor_execute:
        listener(connection, cursor, query, params, None, False)
    try:
        cursor.execute(query, params, prepare=prepare)
    except psycopg.Error:
        if driver_connection.broken or driver_connection.closed:
            connection.invalidate()
        raise
    return cursor


def fetch_all(
    session: Session, statement: str, params: Mapping[str, Any] | None = None, *, prepare: bool | None = None
) -> list[Any]:
    """Every row of ``statement`` as named tuples, run in ``session``'s transaction.

    ``prepare``: None lets psycopg prepare the statement after its fifth execution on the
    connection (its default), True prepares it at once, False never (planned for its parameters
    each time; see the module's docstring).
    """
    return _execute(session, statement, params, prepare).fetchall()


def fetch_scalar(
    session: Session, statement: str, params: Mapping[str, Any] | None = None, *, prepare: bool | None = None
) -> Any:
    """The first column of the first row of ``statement`` (None when it returns no row)."""
    row = _execute(session, statement, params, prepare).fetchone()
    return None if row is None else row[0]


def run(session: Session, statement: str, params: Mapping[str, Any] | None = None) -> None:
    """Run ``statement`` (a setting, say) in ``session``'s transaction; its rows, if any, are not read."""
    _execute(session, statement, params, None)

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

Array parameters (a Python ``list``) are sent in binary (``%(name)b``): psycopg's text-format
list dumper quotes and escapes element by element in Python, 6.5x slower than the binary one
for 80 UUIDs (93 against 14 µs) and 4x for 40 keys (29 against 7 µs), and a small agent's
retrieve sends ~200 elements. The read path casts every array it binds (``CAST(:keys AS
text[])``), so the server reads the same values either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import RowFactory, RowMaker, namedtuple_row
from sqlalchemy import text
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.orm import Session

from memory_core.db.statements import collapse_whitespace

__all__ = ["AGENT_LITERAL", "driver_sql", "fetch_all", "fetch_scalar", "quoted_literal", "run"]

_DIALECT = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]

# Where a statement wants the agent id written in as a literal (see the module's docstring).
AGENT_LITERAL = ":agent_literal"
_AGENT_SLOT = "%(agent_literal)s"


def quoted_literal(value: str) -> str:
    """``value`` as an SQL string literal, quoted by psycopg (NUL refused: PostgreSQL text cannot hold it)."""
    if "\x00" in value:
        raise ValueError("agent_id must not contain NUL characters")
    return sql.Literal(value).as_string(None).strip()


@lru_cache(maxsize=1024)
def driver_sql(statement: str, binary: frozenset[str] = frozenset()) -> str:
    """``statement`` (``:name`` parameters) in psycopg's form (``%(name)s``, ``%`` doubled), whitespace collapsed.

    The parameters named in ``binary`` are sent in binary format (``%(name)b``).
    """
    compiled = str(text(collapse_whitespace(statement)).compile(dialect=_DIALECT))
    for name in binary:
        compiled = compiled.replace(f"%({name})s", f"%({name})b")
    return compiled


# The row class of every statement text, made from its first result: psycopg's namedtuple_row
# reads every column's name and looks its class up again at each execution (a twentieth of a
# small agent's retrieve CPU in the API process). A text returns the same columns each time;
# the column count is part of the key so that a ``SELECT *`` over a table a migration changed
# meanwhile gets a class of its own. Dict reads and writes are atomic: threads share it safely
# (at worst two make the same class).
_ROW_MAKERS: dict[tuple[str, int], RowMaker[Any]] = {}
_ROW_MAKERS_MAX = 1024


def _row_factory(query: str) -> RowFactory[Any]:
    def rows(cursor: psycopg.Cursor[Any]) -> RowMaker[Any]:
        result = cursor.pgresult
        if result is None or not result.nfields:
            return namedtuple_row(cursor)
        key = (query, result.nfields)
        maker = _ROW_MAKERS.get(key)
        if maker is None:
            maker = namedtuple_row(cursor)
            if len(_ROW_MAKERS) >= _ROW_MAKERS_MAX:
                _ROW_MAKERS.clear()
            _ROW_MAKERS[key] = maker
        return maker

    return rows


def _binary_parameters(params: Mapping[str, Any]) -> frozenset[str]:
    # Exactly list: subclasses (memory_core.db.vectors.VectorArray) bring dumpers of their own.
    return frozenset(name for name, value in params.items() if type(value) is list)


@lru_cache(maxsize=64)
def _plain_sql(statement: str) -> str:
    # Sent without parameters (psycopg's simple protocol: several statements may share one
    # message, and nothing is interpolated, so a % stays single).
    return collapse_whitespace(statement)


def _with_agent(query: str, agent_id: str, *, bound: bool) -> str:
    """``query`` (already in psycopg's form) with the agent's literal in its :data:`AGENT_LITERAL` places."""
    # A statement without the place is left as it is: a place left unfilled fails loudly instead
    # (psycopg asks for an `agent_literal` parameter, PostgreSQL for a column).
    literal = quoted_literal(agent_id)
    if bound:
        # psycopg reads % as the start of a placeholder anywhere in a statement sent with parameters.
        return query.replace(_AGENT_SLOT, literal.replace("%", "%%"))
    return query.replace(AGENT_LITERAL, literal)


def _execute(
    session: Session,
    statement: str,
    params: Mapping[str, Any] | None,
    prepare: bool | None,
    inline_agent: str | None = None,
) -> psycopg.Cursor[Any]:
    connection = session.connection()
    driver_connection: psycopg.Connection[Any] = connection.connection.driver_connection  # type: ignore[assignment]
    template = _plain_sql(statement) if params is None else driver_sql(statement, _binary_parameters(params))
    # The literal goes in last, once (str.replace does not scan what it wrote).
    query = template if inline_agent is None else _with_agent(template, inline_agent, bound=params is not None)
    cursor = driver_connection.cursor(row_factory=_row_factory(template))
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
    session: Session,
    statement: str,
    params: Mapping[str, Any] | None = None,
    *,
    prepare: bool | None = None,
    inline_agent: str | None = None,
) -> list[Any]:
    """Every row of ``statement`` as named tuples, run in ``session``'s transaction.

    ``prepare``: None lets psycopg prepare the statement after its fifth execution on the
    connection (its default), True prepares it at once, False never (planned for its parameters
    each time; see the module's docstring). ``inline_agent``: the agent id written as a literal
    where the statement says :data:`AGENT_LITERAL`.
    """
    return _execute(session, statement, params, prepare, inline_agent).fetchall()


def fetch_scalar(
    session: Session,
    statement: str,
    params: Mapping[str, Any] | None = None,
    *,
    prepare: bool | None = None,
    inline_agent: str | None = None,
) -> Any:
    """The first column of the first row of ``statement`` (None when it returns no row)."""
    row = _execute(session, statement, params, prepare, inline_agent).fetchone()
    return None if row is None else row[0]


def run_then_fetch_scalar(session: Session, statements: str, *, inline_agent: str | None = None) -> Any:
    """Run ``statements`` (several, no parameters: one message) and return the last one's first value.

    The statements before the last are settings, say; the last one reads a row. None when it
    returns no row.
    """
    cursor = _execute(session, statements, None, None, inline_agent)
    while cursor.nextset():
        pass
    row = cursor.fetchone()
    return None if row is None else row[0]


def run(session: Session, statement: str, params: Mapping[str, Any] | None = None) -> None:
    """Run ``statement`` (a setting, say) in ``session``'s transaction; its rows, if any, are not read."""
    _execute(session, statement, params, None)

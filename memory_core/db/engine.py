"""Engines and sessions for the service's PostgreSQL database."""

from __future__ import annotations

import time
import weakref
from typing import Any

import psycopg._queries
from sqlalchemy import URL, Engine, create_engine, event, exc
from sqlalchemy.orm import Session, sessionmaker

# Imported before any engine connects, for its side effect too: psycopg connections copy the
# global adapters when they are made, so a dumper registered after a connection exists is unknown to it.
from memory_core.db.vectors import register_vector_type
from memory_core.settings import Settings

# psycopg caches its conversion of a statement's placeholders to ``$n`` (an LRU of 128 texts)
# only for texts up to 4,096 characters; a longer one is re-parsed by a regular expression on
# every execution. The read path's signal statement is ~6,000 characters (its CTEs are
# generated per graph level), a few percent of a retrieve's Python CPU when re-parsed. The
# cache still holds at most 128 texts, so a longer limit costs at most ~2 MB per process.
_CACHED_STATEMENT_LENGTH = 16_384
if getattr(psycopg._queries, "MAX_CACHED_STATEMENT_LENGTH", _CACHED_STATEMENT_LENGTH) < _CACHED_STATEMENT_LENGTH:
    psycopg._queries.MAX_CACHED_STATEMENT_LENGTH = _CACHED_STATEMENT_LENGTH


# A pooled connection used less than this long ago is not pinged before its next use.
PING_AFTER_IDLE_S = 1.0
_CHECKED_IN_AT = "arandu_checked_in_at"


def create_db_engine(settings: Settings, *, pool_size: int | None = None, pre_ping: bool = True) -> Engine:
    """An engine with a bounded pool.

    With ``pre_ping`` a connection that sat in the pool for :data:`PING_AFTER_IDLE_S` or longer
    is checked (a round trip) before it is handed out, so a request never meets a connection a
    database restart closed. Without it, the first use of such a connection fails and
    invalidates the whole pool: right for callers that retry anyway.
    """
    size = pool_size if pool_size is not None else settings.database_pool_size
    return pooled_engine(
        settings.sqlalchemy_url,
        pool_size=size,
        max_overflow=size,
        pre_ping=pre_ping,
        prepared_max=settings.database_prepared_max,
    )


def pooled_engine(
    url: str | URL,
    *,
    pool_size: int,
    max_overflow: int,
    application_name: str = "arandu",
    pre_ping: bool = True,
    prepared_max: int | None = None,
) -> Engine:
    """The service's connection options (timeouts, recycling, idle ping) on a pool of the given shape.

    ``prepared_max``: how many statements each connection keeps prepared (psycopg's own default,
    100, when None); see :func:`keep_prepared_at_most`.
    """
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=1800,
        connect_args={"connect_timeout": 5, "application_name": application_name},
    )
    if pre_ping:
        ping_when_idle(engine, PING_AFTER_IDLE_S)
    register_vector_type_on_checkout(engine)
    if prepared_max is not None:
        keep_prepared_at_most(engine, prepared_max)
    return engine


# The prepared_max each engine's connections were given (side engines copy their main engine's).
_PREPARED_MAX: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()


def keep_prepared_at_most(engine: Engine, prepared_max: int) -> None:
    """Each new connection of ``engine`` keeps at most ``prepared_max`` prepared statements.

    psycopg deallocates the least recently used beyond it. Each prepared statement holds its plan
    in the connection's server process: measured on the retrieve benchmark's data (one
    connection, 60 questions each for two small and six large agents), 85 statements and 37 MiB
    of that process's memory, each large agent adding 7-12 statements and 2-6 MiB (a large
    agent's statements name it, so they are its own). Fewer statements bound that memory on
    servers with many large agents; too few make the statements of the agents asked most often
    planned again (docs/production.md).
    """
    _PREPARED_MAX[engine] = prepared_max

    def limit(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.prepared_max = prepared_max

    event.listen(engine, "connect", limit)


def prepared_max_of(engine: Engine) -> int | None:
    """The ``prepared_max`` :func:`keep_prepared_at_most` gave ``engine`` (None: psycopg's default)."""
    return _PREPARED_MAX.get(engine)


_VECTOR_TYPE_KNOWN = "arandu_vector_type_known"


def register_vector_type_on_checkout(engine: Engine) -> None:
    """Each pooled connection learns the ``vector`` type's OID at its first checkout (arrays of vectors need it).

    At checkout, not at connect: a connection made before the migration created the extension
    asks again at its next checkout instead of staying without it.
    """

    def register(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if record is not None and not record.info.get(_VECTOR_TYPE_KNOWN):
            record.info[_VECTOR_TYPE_KNOWN] = register_vector_type(dbapi_connection)

    event.listen(engine, "checkout", register)


def ping_when_idle(engine: Engine, idle_s: float) -> None:
    """Check a pooled connection before use only when it has been idle for ``idle_s`` or longer.

    SQLAlchemy's ``pool_pre_ping`` pings on every checkout: one more round trip to the server
    for every request, a quarter of a single POST's time in the API. A connection returned to
    the pool a moment ago was working a moment ago; the connections a database restart leaves
    behind have been idle at least as long as the restart took. A connection the ping finds
    dead is replaced before the caller sees it (SQLAlchemy's pessimistic disconnect recipe).
    """

    def remember_checkin(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info[_CHECKED_IN_AT] = time.monotonic()

    def ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        checked_in_at = record.info.get(_CHECKED_IN_AT)
        if checked_in_at is None or time.monotonic() - checked_in_at < idle_s:
            return  # new (just connected) or in use a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            # A connection that cannot run SELECT 1 cannot serve the caller either: the pool
            # discards it and hands out a new one (or raises the server's error if it is down).
            raise exc.DisconnectionError(f"pooled connection failed its ping: {error}") from error

    event.listen(engine, "checkin", remember_checkin)
    event.listen(engine, "checkout", ping_if_idle)


def create_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Session factory whose objects stay readable after commit (tasks return them as ids and dicts)."""
    return sessionmaker(bind=engine, expire_on_commit=False)

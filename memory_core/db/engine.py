"""Engines and sessions for the service's PostgreSQL database."""

from __future__ import annotations

import psycopg._queries
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from memory_core.settings import Settings

# psycopg caches its conversion of a statement's placeholders to ``$n`` (an LRU of 128 texts)
# only for texts up to 4,096 characters; a longer one is re-parsed by a regular expression on
# every execution. The read path's signal statement is ~6,000 characters (its CTEs are
# generated per graph level), a few percent of a retrieve's Python CPU when re-parsed. The
# cache still holds at most 128 texts, so a longer limit costs at most ~2 MB per process.
_CACHED_STATEMENT_LENGTH = 16_384
if getattr(psycopg._queries, "MAX_CACHED_STATEMENT_LENGTH", _CACHED_STATEMENT_LENGTH) < _CACHED_STATEMENT_LENGTH:
    psycopg._queries.MAX_CACHED_STATEMENT_LENGTH = _CACHED_STATEMENT_LENGTH


def create_db_engine(settings: Settings, *, pool_size: int | None = None, pre_ping: bool = True) -> Engine:
    """An engine with a bounded pool.

    With ``pre_ping`` every checkout first checks the connection (a round trip), so a request
    never meets a connection a database restart closed. Without it, the first use of such a
    connection fails and invalidates the whole pool: right for callers that retry anyway.
    """
    size = pool_size if pool_size is not None else settings.database_pool_size
    return create_engine(
        settings.sqlalchemy_url,
        pool_size=size,
        max_overflow=size,
        pool_pre_ping=pre_ping,
        pool_recycle=1800,
        connect_args={"connect_timeout": 5, "application_name": "arandu"},
    )


def create_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Session factory whose objects stay readable after commit (tasks return them as ids and dicts)."""
    return sessionmaker(bind=engine, expire_on_commit=False)

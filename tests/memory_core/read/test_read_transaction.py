"""The read transaction: read-only, bounded, its settings in one round trip, and gone after it ends."""

from __future__ import annotations

from typing import Any, cast

import psycopg
import pytest
from psycopg import pq
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from memory_core.read.context import ReadContext
from memory_core.read.read_transaction import READ_STATEMENT_TIMEOUT_MS, begin_read
from tests.memory_core.read.conftest import MemoryBuilder


def _setting(session: Session, name: str) -> str:
    return str(session.execute(text("SELECT current_setting(:name)"), {"name": name}).scalar_one())


def _transaction_status(session: Session) -> pq.TransactionStatus:
    dbapi = cast(psycopg.Connection[Any], session.connection().connection.dbapi_connection)
    return dbapi.pgconn.transaction_status


def test_a_read_transaction_is_read_only_bounded_and_leaves_nothing_behind(read_ctx: ReadContext) -> None:
    with read_ctx.sessions() as session:
        begin_read(session, ef_search=321)
        assert _transaction_status(session) == pq.TransactionStatus.INTRANS
        assert _setting(session, "transaction_read_only") == "on"
        assert _setting(session, "statement_timeout") == f"{READ_STATEMENT_TIMEOUT_MS // 1000}s"
        assert _setting(session, "max_parallel_workers_per_gather") == "0"
        assert _setting(session, "hnsw.ef_search") == "321"
        session.commit()
        # Ended by the session: the pooled connection is idle and the settings were the transaction's.
        assert _transaction_status(session) == pq.TransactionStatus.IDLE
        assert _setting(session, "transaction_read_only") == "off"
        assert _setting(session, "statement_timeout") != f"{READ_STATEMENT_TIMEOUT_MS // 1000}s"


def test_a_read_transaction_cannot_write(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana = memory.entity("Ana")
    fact = memory.fact("Ana mora em Recife", ana, importance=0.4)
    with read_ctx.sessions() as session:
        begin_read(session)
        with pytest.raises(DBAPIError, match="read-only transaction"):
            session.execute(text("UPDATE memory_facts SET importance = 0.9 WHERE id = CAST(:id AS uuid)"), {"id": fact})
        session.rollback()
        assert _transaction_status(session) == pq.TransactionStatus.IDLE
    assert memory.rows("SELECT importance FROM memory_facts WHERE id = CAST(:id AS uuid)", id=fact)[0][0] == 0.4

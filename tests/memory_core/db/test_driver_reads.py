"""Read statements sent straight to psycopg run in the session's transaction, as SQLAlchemy would run them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session

from memory_core.db.driver_reads import driver_sql, fetch_all, fetch_scalar, run
from memory_core.db.engine import create_db_engine
from memory_core.db.vectors import vector_array, vector_param
from memory_core.read.side_reads import SideReads
from memory_core.settings import Settings


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    made = create_db_engine(settings, pool_size=1)
    yield made
    made.dispose()


def test_rows_come_back_named_and_by_position_with_parameters_bound(engine: Engine) -> None:
    with Session(engine) as session:
        rows = fetch_all(
            session,
            "SELECT t.n, t.word FROM unnest(CAST(:numbers AS int[]), CAST(:words AS text[])) AS t(n, word) "
            "WHERE t.n >= :least ORDER BY t.n",
            {"numbers": [1, 2, 3], "words": ["um", "dois", "três"], "least": 2},
        )
    assert [(row.n, row.word) for row in rows] == [(2, "dois"), (3, "três")]
    assert rows[0][1] == "dois"


def test_array_parameters_arrive_exactly_as_sent(engine: Engine) -> None:
    # Lists are sent in binary (%(name)b): every shape the read path binds must arrive unchanged.
    fact_ids = [str(uuid.uuid4()), str(uuid.uuid4())]
    moment = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    params: dict[str, Any] = {
        "words": ["a,b", 'aspas "duplas"', "barra \\ invertida", "{chaves}", "ção", None, "", "NULL"],
        "ids": fact_ids,
        "ints": [0, 1, 40_000, None],
        "floats": [0.5, None, 1e-9],
        "moments": [moment, None],
        "empty": [],
    }
    statement = (
        "SELECT CAST(:words AS text[]) AS words, CAST(:ids AS uuid[]) AS ids, CAST(:ints AS int[]) AS ints, "
        "CAST(:floats AS float8[]) AS floats, CAST(:moments AS timestamptz[]) AS moments, "
        "CAST(:empty AS text[]) AS empty"
    )
    assert "%(words)b" in driver_sql(statement, frozenset(params))
    with Session(engine) as session:
        (row,) = fetch_all(session, statement, params)
    assert row.words == params["words"]
    assert [str(value) for value in row.ids] == fact_ids
    assert (row.ints, row.floats, row.empty) == (params["ints"], params["floats"], [])
    assert row.moments == [moment, None]


def test_a_vector_array_parameter_keeps_its_own_binary_form(engine: Engine) -> None:
    with Session(engine) as session:
        (row,) = fetch_all(
            session,
            "SELECT cardinality(CAST(:vecs AS vector[])) AS n, "
            "(CAST(:vecs AS vector[]))[1] <=> CAST(:one AS vector) AS d",
            {"vecs": vector_array([[1.0, 0.0], None]), "one": vector_param([1.0, 0.0])},
        )
    assert (row.n, row.d) == (2, 0.0)


def test_each_statement_text_gets_its_own_row_names(engine: Engine) -> None:
    # Row classes are kept per statement text: alternating texts must never mix their columns.
    with Session(engine) as session:
        for number in range(3):
            (first,) = fetch_all(session, "SELECT CAST(:n AS int) AS alpha, 'x' AS beta", {"n": number})
            (second,) = fetch_all(session, "SELECT CAST(:n AS int) AS gamma", {"n": number})
            empty = fetch_all(session, "SELECT 1 AS delta WHERE CAST(:n AS int) < 0", {"n": number})
            assert (first.alpha, first.beta, second.gamma, empty) == (number, "x", number, [])
            assert first._fields == ("alpha", "beta")
            assert second._fields == ("gamma",)


def test_a_percent_sign_in_the_text_is_sql_not_a_placeholder(engine: Engine) -> None:
    # LIKE patterns with a literal % (psycopg would read a single % as a placeholder).
    statement = "SELECT CAST(:word AS text) LIKE 'ca%' AS starts, 'ca%' AS pattern"
    assert "'ca%%'" in driver_sql(statement)
    with Session(engine) as session:
        (row,) = fetch_all(session, statement, {"word": "casa"})
    assert row.starts is True
    assert row.pattern == "ca%"


def test_statements_run_in_the_sessions_own_transaction(engine: Engine) -> None:
    agent = f"driver-{uuid.uuid4().hex[:8]}"
    with Session(engine) as session:
        session.execute(
            text(
                "INSERT INTO memory_entities (id, agent_id, canonical_key, display_name, entity_type) "
                "VALUES (gen_random_uuid(), :agent, 'person:ana', 'Ana', 'person')"
            ),
            {"agent": agent},
        )
        # Not committed: only the session's own transaction sees the row.
        seen = fetch_scalar(session, "SELECT count(*) FROM memory_entities WHERE agent_id = :agent", {"agent": agent})
        session.rollback()
        after = fetch_scalar(session, "SELECT count(*) FROM memory_entities WHERE agent_id = :agent", {"agent": agent})
    assert (seen, after) == (1, 0)


def test_settings_without_parameters_go_in_one_message(engine: Engine) -> None:
    with Session(engine) as session:
        run(session, "SET LOCAL statement_timeout = 1234; SET LOCAL work_mem = '5MB'")
        timeout = fetch_scalar(session, "SELECT current_setting('statement_timeout')")
        memory = fetch_scalar(session, "SELECT current_setting('work_mem')")
        session.commit()
        reset = fetch_scalar(session, "SELECT current_setting('work_mem')")
    assert (timeout, memory) == ("1234ms", "5MB")
    assert reset != "5MB"  # SET LOCAL ended with the transaction


def _prepared_with(session: Session, marker: str) -> list[str]:
    """The texts of the statements this session's connection keeps prepared that contain ``marker``."""
    rows = fetch_all(
        session, "SELECT statement FROM pg_prepared_statements WHERE statement LIKE '%' || :m || '%'", {"m": marker}
    )
    return [str(row.statement) for row in rows]


def test_a_statement_prepared_at_once_is_prepared_and_an_unprepared_one_is_not(engine: Engine) -> None:
    marker = uuid.uuid4().hex[:12]
    prepared_text = f"SELECT 1 AS one_{marker} WHERE CAST(:x AS int) > 0"
    unprepared_text = f"SELECT 2 AS two_{marker} WHERE CAST(:x AS int) > 0"
    with Session(engine) as session:
        fetch_all(session, prepared_text, {"x": 1}, prepare=True)
        for _ in range(6):  # past psycopg's threshold of five: still never prepared
            fetch_all(session, unprepared_text, {"x": 1}, prepare=False)
        statements = _prepared_with(session, marker)
        session.commit()
    assert any(f"one_{marker}" in statement for statement in statements)
    assert not any(f"two_{marker}" in statement for statement in statements)


def test_sqlalchemy_listeners_still_see_every_statement(engine: Engine) -> None:
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        with Session(engine) as session:
            fetch_all(session, "SELECT CAST(:a AS int) + 1 AS b", {"a": 41})
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert seen == [("SELECT CAST(%(a)s AS int) + 1 AS b", {"a": 41})]


def test_a_connection_a_failed_statement_broke_is_not_handed_out_again(engine: Engine) -> None:
    with Session(engine) as session:
        doomed = fetch_scalar(session, "SELECT pg_backend_pid()")
        # The server ends this very backend: the statement fails and the connection is broken.
        with pytest.raises(psycopg.OperationalError):
            fetch_all(session, "SELECT pg_terminate_backend(pg_backend_pid()), pg_sleep(1)")
    with Session(engine) as session:
        replacement = fetch_scalar(session, "SELECT pg_backend_pid()")
    assert replacement != doomed


def test_a_connection_keeps_at_most_the_configured_prepared_statements(settings: Settings) -> None:
    engine = create_db_engine(settings.model_copy(update={"database_prepared_max": 3}), pool_size=1)
    marker = uuid.uuid4().hex[:12]
    try:
        with Session(engine) as session:
            for index in range(5):
                fetch_all(session, f"SELECT {index} AS n_{marker} WHERE CAST(:x AS int) > 0", {"x": 1}, prepare=True)
            kept = _prepared_with(session, marker)
            session.commit()
        # The least recently used were deallocated: the last three stay.
        assert sorted(statement.split(" AS ")[0] for statement in kept) == ["SELECT 2", "SELECT 3", "SELECT 4"]
        # A large agent's side connections (memory_core.read.side_reads) keep the same bound.
        side = SideReads(engine, 1)
        try:
            sessions, _ = side._ready()
            with sessions() as side_session:
                assert side_session.connection().connection.driver_connection.prepared_max == 3
        finally:
            side.close()
    finally:
        engine.dispose()

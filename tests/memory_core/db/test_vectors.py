"""Vectors bound in pgvector's binary form read back as the same float32 values, in any database."""

from __future__ import annotations

import math
from array import array

import psycopg
import pytest
from pgvector import Vector
from sqlalchemy import Engine, text

from memory_core.db.engine import pooled_engine
from memory_core.db.vectors import vector_array, vector_param
from tests.support.services import TestServices


def test_a_bound_vector_is_stored_as_its_float32_values(engine: Engine) -> None:
    values = [0.1, -2.5, 3.0e-7, 1234.5678, 0.0]
    with engine.connect() as connection:
        # Past psycopg's prepare threshold too: the prepared statement keeps taking it.
        answers = {
            tuple(
                connection.execute(
                    text("SELECT CAST(CAST(:vec AS vector) AS text), vector_dims(CAST(:vec AS vector))"),
                    {"vec": vector_param(values)},
                ).one()
            )
            for _ in range(8)
        }
    assert len(answers) == 1
    stored = answers.pop()
    read_back = [float(part) for part in stored[0].strip("[]").split(",")]
    assert stored[1] == len(values)
    assert read_back == pytest.approx(list(array("f", values)), rel=1e-6)


def test_distances_to_a_bound_vector_match_the_text_form(engine: Engine) -> None:
    query = [math.sin(i) for i in range(384)]
    other = [math.cos(i) for i in range(384)]
    literal = "[" + ",".join(repr(v) for v in other) + "]"
    with engine.connect() as connection:
        binary, textual = connection.execute(
            text(
                "SELECT CAST(:other AS vector) <=> CAST(:vec AS vector), "
                "CAST(:other AS vector) <=> CAST(:literal AS vector)"
            ),
            {"other": literal, "vec": vector_param(query), "literal": "[" + ",".join(map(repr, query)) + "]"},
        ).one()
    assert binary == pytest.approx(textual, abs=1e-6)


def test_no_vector_is_null() -> None:
    assert vector_param(None) is None
    assert vector_param([]) is None
    assert vector_param([1.0, 2.0]) == Vector([1.0, 2.0])


def test_an_array_of_vectors_is_sent_in_binary_with_its_nulls(engine: Engine) -> None:
    vectors: list[list[float] | None] = [[0.5, -1.0, 2.0], None, [], [3.0, 4.0, 0.25]]
    with engine.connect() as connection:
        # Past psycopg's prepare threshold too, as the write stages run their statements.
        answers = {
            tuple(
                connection.execute(
                    text(
                        "SELECT CAST(v AS text) "
                        "FROM unnest(CAST(:vecs AS vector[])) WITH ORDINALITY AS u(v, n) ORDER BY n"
                    ),
                    {"vecs": vector_array(vectors)},
                ).scalars()
            )
            for _ in range(8)
        }
    assert answers == {("[0.5,-1,2]", None, None, "[3,4,0.25]")}


def test_a_connection_made_before_the_extension_learns_the_type_when_it_exists(services: TestServices) -> None:
    url = services.new_database("arandu_vectortype")
    libpq = url.replace("postgresql+psycopg://", "postgresql://", 1)

    def run(statement: str) -> None:
        with psycopg.connect(libpq, autocommit=True) as admin:
            admin.execute(statement)

    run("DROP EXTENSION vector")
    engine = pooled_engine(url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as connection:  # made, and first checked out, without the type
            assert connection.execute(text("SELECT to_regtype('vector')")).scalar() is None
        run("CREATE EXTENSION vector")
        # The same pooled connection (a pool of one) asks again at this checkout.
        with engine.connect() as connection:
            stored = connection.execute(
                text("SELECT CAST(CAST(:vecs AS vector[]) AS text)"), {"vecs": vector_array([[1.0, 2.0]])}
            ).scalar()
    finally:
        engine.dispose()
    assert stored == '{"[1,2]"}'

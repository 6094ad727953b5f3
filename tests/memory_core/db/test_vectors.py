"""Vectors bound in pgvector's binary form read back as the same float32 values, in any database."""

from __future__ import annotations

import math
from array import array

import pytest
from pgvector import Vector
from sqlalchemy import text

from memory_core.db.engine import create_db_engine
from memory_core.db.vectors import vector_param
from memory_core.settings import Settings


def test_a_bound_vector_is_stored_as_its_float32_values(settings: Settings) -> None:
    values = [0.1, -2.5, 3.0e-7, 1234.5678, 0.0]
    engine = create_db_engine(settings, pool_size=1)
    try:
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
    finally:
        engine.dispose()
    read_back = [float(part) for part in stored[0].strip("[]").split(",")]
    assert stored[1] == len(values)
    assert read_back == pytest.approx(list(array("f", values)), rel=1e-6)


def test_distances_to_a_bound_vector_match_the_text_form(settings: Settings) -> None:
    query = [math.sin(i) for i in range(384)]
    other = [math.cos(i) for i in range(384)]
    literal = "[" + ",".join(repr(v) for v in other) + "]"
    engine = create_db_engine(settings, pool_size=1)
    try:
        with engine.connect() as connection:
            binary, textual = connection.execute(
                text(
                    "SELECT CAST(:other AS vector) <=> CAST(:vec AS vector), "
                    "CAST(:other AS vector) <=> CAST(:literal AS vector)"
                ),
                {"other": literal, "vec": vector_param(query), "literal": "[" + ",".join(map(repr, query)) + "]"},
            ).one()
    finally:
        engine.dispose()
    assert binary == pytest.approx(textual, abs=1e-6)


def test_no_vector_is_null() -> None:
    assert vector_param(None) is None
    assert vector_param([]) is None
    assert vector_param([1.0, 2.0]) == Vector([1.0, 2.0])

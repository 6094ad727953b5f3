"""What the service needs of its PostgreSQL server, checked at start and named when missing."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from memory_core.db.migrate import DatabaseSchemaError, check_schema, check_server
from memory_core.db.server_support import (
    MIN_PGVECTOR_VERSION,
    REQUIRED_EXTENSIONS,
    ExtensionState,
    ServerSupport,
    read_server_support,
    version_tuple,
)
from memory_core.settings import load_settings

PLAIN_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def _support(version_num: int = 180_006, **extensions: tuple[str | None, str | None]) -> ServerSupport:
    states = {name: ExtensionState(name, "1.0", "1.0") for name in REQUIRED_EXTENSIONS}
    states["vector"] = ExtensionState("vector", "0.8.6", "0.8.6")
    for name, (available, installed) in extensions.items():
        states[name] = ExtensionState(name, available, installed)
    return ServerSupport(f"{version_num // 10_000}.{version_num % 100}", version_num, tuple(states.values()))


def test_versions_compare_as_numbers() -> None:
    assert version_tuple("0.10.0") > version_tuple("0.8.6") > version_tuple("0.8.0-dev") >= (0, 8, 0)
    assert version_tuple("1.1") == (1, 1)


def test_a_fitting_server_has_no_problems() -> None:
    assert _support().problems() == []
    # Available but not yet created: the migrations create it.
    assert _support(vector=("0.8.6", None), unaccent=("1.1", None)).problems() == []


def test_each_missing_or_old_part_is_named_with_the_way_to_get_it() -> None:
    problems = _support(150_019, vector=(None, None), unaccent=(None, None)).problems()
    assert len(problems) == 3
    assert "PostgreSQL 15.19 is older than the 16" in problems[0]
    assert "no pgvector extension" in problems[1]
    assert "pgvector/pgvector:pg18" in problems[1]
    assert "no unaccent extension" in problems[2]
    assert "contrib" in problems[2]


def test_an_old_pgvector_is_named_with_the_version_needed() -> None:
    (installed_too_old,) = _support(vector=("0.5.1", "0.5.1")).problems()
    assert f"vector 0.5.1 is older than the {MIN_PGVECTOR_VERSION}" in installed_too_old
    assert "ALTER EXTENSION vector UPDATE" in installed_too_old
    # An older installed version counts even when the server could give a newer one.
    assert _support(vector=("0.8.6", "0.5.1")).problems()


def test_the_suites_server_fits_and_reports_its_versions(migrated_database_url: str) -> None:
    engine = create_engine(migrated_database_url)
    try:
        with engine.connect() as conn:
            support = read_server_support(conn)
        assert support.problems() == []
        assert support.server_version_num >= 180_000
        versions = {extension.name: extension.installed for extension in support.extensions}
        assert versions.keys() == set(REQUIRED_EXTENSIONS)
        assert versions["vector"] is not None
        assert version_tuple(versions["vector"]) >= (0, 8)
        assert versions["unaccent"] is not None
        assert support.summary().startswith("PostgreSQL 18")
    finally:
        engine.dispose()


def test_the_machines_postgresql_15_without_pgvector_is_refused_naming_both(tmp_path: object) -> None:
    # The machine's own PostgreSQL 15 (no pgvector package): a server a user might point at by mistake.
    engine = create_engine(PLAIN_POSTGRES_URL)
    try:
        with pytest.raises(DatabaseSchemaError) as caught:
            check_server(engine)
        with pytest.raises(DatabaseSchemaError) as at_start:
            check_schema(engine, load_settings(database_url=PLAIN_POSTGRES_URL))
    finally:
        engine.dispose()
    for error in (caught.value, at_start.value):
        assert "127.0.0.1:5432" in str(error)
        assert "older than the 16" in str(error)
        assert "no pgvector extension" in str(error)

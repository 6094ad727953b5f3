"""Session-wide real services: PostgreSQL + pgvector and Redis, never mocks."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.db.migrate import upgrade
from memory_core.settings import Settings, load_settings
from tests.support.services import TestServices, start_test_services


@pytest.fixture(scope="session")
def services() -> Iterator[TestServices]:
    """The session's PostgreSQL and Redis (embedded unless ARANDU_TEST_*_URL are given)."""
    # A folder of our own rather than pytest's numbered temp dirs, which a concurrent pytest
    # session may prune while this one's servers still live there.
    home = Path(tempfile.mkdtemp(prefix="arandu-test-stack-"))
    running = start_test_services(home)
    try:
        yield running
    finally:
        running.close()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def migrated_database_url(services: TestServices) -> str:
    """A database of this session, migrated once to head with 384-dimensional embeddings."""
    url = services.new_database()
    upgrade(load_settings(database_url=url, broker_url=services.broker_url, embedding_dimensions=384))
    return url


@pytest.fixture
def settings(migrated_database_url: str, services: TestServices, tmp_path: Path) -> Settings:
    """Settings of a process of this deployment, pointed at the session's services."""
    return load_settings(
        database_url=migrated_database_url,
        broker_url=services.broker_url,
        home=tmp_path / "home",
        embedding_dimensions=384,
    )

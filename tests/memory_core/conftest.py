"""Fixtures shared by the memory_core tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from memory_core.db.engine import create_db_engine
from memory_core.settings import Settings


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    """One of the service's engines (the vector type registered at checkout), with a pool of one."""
    built = create_db_engine(settings, pool_size=1)
    try:
        yield built
    finally:
        built.dispose()

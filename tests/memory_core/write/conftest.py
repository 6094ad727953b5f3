"""Fixtures of the write-side tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context


@pytest.fixture
def context(settings: Settings) -> Iterator[WriteContext]:
    """A write context on the test database (offline skills), closed afterwards."""
    built = build_write_context(settings)
    try:
        yield built
    finally:
        built.close()

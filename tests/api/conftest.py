"""Fixtures most API test modules share: a served API on its own home, the database, the broker.

Each is module-scoped as before (one API server per test module); a module that needs another
shape of one (a longer client timeout, other settings) defines its own, which takes precedence.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
from sqlalchemy import Engine

from memory_core.db.engine import create_db_engine
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from tests.support.api_server import api_settings, auth_headers, broker_client, serve_api
from tests.support.services import TestServices


@pytest.fixture(scope="module")
def api_config(
    migrated_database_url: str, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """The module's API settings on the shared test database and broker, with a home of its own."""
    return api_settings(migrated_database_url, services.broker_url, tmp_path_factory.mktemp("api-home"))


@pytest.fixture(scope="module")
def client(api_config: Settings) -> Iterator[httpx.Client]:
    """An HTTP client on the API served for the module, with the test key."""
    with serve_api(api_config) as base_url, httpx.Client(base_url=base_url, headers=auth_headers(), timeout=60) as http:
        yield http


@pytest.fixture(scope="module")
def db(api_config: Settings) -> Iterator[Engine]:
    """An engine on the module's database, to check what the API stored."""
    engine = create_db_engine(api_config, pool_size=2)
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def broker(api_config: Settings) -> Iterator[redis.Redis]:
    """A client of the broker's Redis, to check what the API queued."""
    client = broker_client(api_config.broker_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def writer(api_config: Settings) -> Iterator[WriteContext]:
    """The write pipeline's context in this process, to put memory in place without a worker."""
    context = build_write_context(api_config, pool_size=2)
    yield context
    context.close()


@pytest.fixture
def agent() -> str:
    """A fresh agent id."""
    return f"agent-{uuid.uuid4().hex[:12]}"

"""A running write path for end-to-end tests: the real API over HTTP, real workers, real services."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory_core.settings import Settings, load_settings
from memory_core.write.context import WriteContext, build_write_context
from tests.support.api_server import serve_api
from tests.support.services import TestServices
from tests.support.workers import isolated_app, running_worker, wait_for_runs
from tests.workers.memory_queries import MemoryInspector

API_KEY = "pipeline-test-key"


@dataclass
class WritePath:
    """Post messages over HTTP, wait for the workers, inspect memory."""

    base_url: str
    settings: Settings
    memory: MemoryInspector
    client: httpx.Client
    agent_id: str = field(default_factory=lambda: f"agent-{uuid.uuid4().hex[:10]}")

    def post(self, message: str, speaker: str = "Rafael", *, agent: str | None = None, **body: Any) -> str:
        """POST one message; return its event id."""
        payload = {"message": message, "speaker_name": speaker, **body}
        for key, value in list(payload.items()):
            if isinstance(value, datetime):
                payload[key] = value.isoformat()
        response = self.client.post(f"/v1/agents/{agent or self.agent_id}/messages", json=payload)
        assert response.status_code in (200, 202), response.text
        return str(response.json()["event_id"])

    def wait(self, event_ids: list[str], timeout_s: float = 90) -> dict[str, str]:
        """Block until every event is done or failed."""
        return wait_for_runs(self.settings.database_url, event_ids, timeout_s=timeout_s)

    def event(self, event_id: str) -> dict[str, Any]:
        """GET /v1/events/{id}."""
        response = self.client.get(f"/v1/events/{event_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())


def start_write_path(
    settings: Settings, context_factory: Callable[[Settings], WriteContext] | None = None, concurrency: int = 6
) -> Iterator[WritePath]:
    """API + worker sharing one private set of queues; yields a :class:`WritePath`."""
    app = isolated_app(settings, context_factory)
    own = app.arandu_settings  # type: ignore[attr-defined]
    memory = MemoryInspector(own.database_url)
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with (
        running_worker(app, concurrency=concurrency),
        serve_api(own) as base_url,
        httpx.Client(base_url=base_url, headers=headers, timeout=30) as client,
    ):
        yield WritePath(base_url=base_url, settings=own, memory=memory, client=client)
    memory.close()


@pytest.fixture
def write_settings(migrated_database_url: str, services: TestServices, tmp_path: Path) -> Settings:
    """Settings with an API key, offline skills and 384-dimensional hashing embeddings."""
    return load_settings(
        database_url=migrated_database_url,
        broker_url=services.broker_url,
        home=tmp_path / "home",
        embedding_dimensions=384,
        api_keys=API_KEY,
        pipeline_retry_base_s=0.2,
        pipeline_retry_max_s=1.0,
    )


@pytest.fixture
def write_path(write_settings: Settings) -> Iterator[WritePath]:
    """The whole write path with the offline skills."""
    yield from start_write_path(write_settings)


@pytest.fixture
def context(write_settings: Settings) -> Iterator[WriteContext]:
    """A write context on the test database with the offline skills (stages run in this process)."""
    built = build_write_context(write_settings)
    try:
        yield built
    finally:
        built.close()

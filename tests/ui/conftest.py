"""A served API with a real worker and an agent seeded through the real pipeline, for the explorer's tests.

The agent ``Ana`` lives in Lisbon, then moves to Porto (the Porto fact supersedes the Lisbon
one), sends a message holding an XSS payload, and sends one message the embedder refuses for
good (a failed event). The embedder can be healed, so a re-drive of that event then succeeds.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI

from memory_core.providers.errors import ProviderRequestError
from memory_core.providers.factory import build_embedding_provider
from memory_core.providers.protocols import EmbeddingProvider
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from tests.support.api_server import TEST_API_KEY, api_settings, auth_headers, serve_api
from tests.support.services import TestServices
from tests.support.workers import isolated_app, running_worker

START = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
POISON = "POISONED"
XSS_PAYLOAD = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2"> I like jazz.'


class HealableEmbedder:
    """The real hashing embedder, except that it refuses any text holding POISON until ``healed`` is set."""

    def __init__(self, inner: EmbeddingProvider, healed: threading.Event) -> None:
        self.inner = inner
        self.healed = healed

    @property
    def dimensions(self) -> int:
        """Length of the vectors."""
        return self.inner.dimensions

    def _check(self, text_: str) -> None:
        if POISON in text_ and not self.healed.is_set():
            raise ProviderRequestError("the embedding provider refused the text", provider="test", status_code=400)

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Vectors of the texts, unless one is poisoned."""
        for item in texts:
            self._check(item)
        return self.inner.embed(texts)

    def embed_one(self, text_: str) -> list[float] | None:
        """The vector of the text, unless it is poisoned."""
        self._check(text_)
        return self.inner.embed_one(text_)


@dataclass(frozen=True)
class UiStack:
    """The served API and its app (tests swap parts of it), its settings, the seeded agent and its failed event."""

    base_url: str
    settings: Settings
    agent_id: str
    failed_event_id: str
    healed: threading.Event
    app: FastAPI


def send(client: httpx.Client, agent: str, text: str, when: datetime) -> str:
    """Send a message of Ana to ``agent`` through the JSON API; its event id."""
    answer = client.post(
        f"/v1/agents/{agent}/messages",
        json={"message": text, "speaker_name": "Ana", "occurred_at": when.isoformat()},
    )
    assert answer.status_code == 202, answer.text
    return str(answer.json()["event_id"])


def wait_for_event(client: httpx.Client, event_id: str, timeout_s: float = 90) -> str:
    """The event's terminal status (done or failed), once it has one."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = str(client.get(f"/v1/events/{event_id}").json()["status"])
        if status in ("done", "failed"):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"event {event_id} still {status} after {timeout_s} s")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def ui_stack(
    migrated_database_url: str, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiStack]:
    """The stack, with agent ``ui-<random>`` seeded through the real pipeline."""
    healed = threading.Event()
    base = api_settings(
        migrated_database_url,
        services.broker_url,
        tmp_path_factory.mktemp("ui-home"),
        pipeline_retry_base_s=0.2,
        pipeline_retry_max_s=1.0,
        ui_cookie_secure="never",
    )

    def context(settings: Settings) -> WriteContext:
        return build_write_context(settings, embedder=HealableEmbedder(build_embedding_provider(settings), healed))

    app = isolated_app(base, context)
    own: Settings = app.arandu_settings  # type: ignore[attr-defined]
    agent = f"ui-{uuid.uuid4().hex[:10]}"
    from api.app import create_app

    api_app = create_app(own)
    # The maintenance queue too: a job run from the jobs page runs to its end.
    with (
        running_worker(app, concurrency=4, queues=("ingest", "apply", "maintenance")),
        serve_api(own, app=api_app) as base_url,
    ):
        with httpx.Client(base_url=base_url, headers=auth_headers(TEST_API_KEY), timeout=30) as client:
            # Lisbon is processed before the move arrives, so the move supersedes it.
            assert wait_for_event(client, send(client, agent, "I live in Lisbon.", START)) == "done"
            later = [
                send(client, agent, "I work at Acme Corp.", START + timedelta(days=1)),
                send(client, agent, XSS_PAYLOAD, START + timedelta(days=2)),
                send(client, agent, "I moved to Porto.", START + timedelta(days=30)),
            ]
            failed = send(client, agent, f"{POISON} this message cannot be embedded.", START + timedelta(days=31))
            assert [wait_for_event(client, event_id) for event_id in later] == ["done", "done", "done"]
            assert wait_for_event(client, failed) == "failed"
        yield UiStack(base_url, own, agent, failed, healed, api_app)

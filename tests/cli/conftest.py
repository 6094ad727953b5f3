"""A served API with a real Celery worker (all three queues), and a way to run ``arandu`` commands against it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from typer.testing import CliRunner, Result

from arandu_cli.main import app as cli_app
from memory_core.providers.errors import ProviderRequestError
from memory_core.providers.factory import build_embedding_provider
from memory_core.providers.protocols import EmbeddingProvider
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from tests.support.api_server import TEST_API_KEY, api_settings, serve_api
from tests.support.services import TestServices
from tests.support.workers import isolated_app, running_worker

# A message holding this word fails at extraction: its embedding is refused for good.
POISON = "POISONED"


class PoisonedEmbedder:
    """The real hashing embedder, except that it refuses (like a 400 from a provider) any text with POISON."""

    def __init__(self, inner: EmbeddingProvider) -> None:
        self.inner = inner

    @property
    def dimensions(self) -> int:
        """Length of the vectors."""
        return self.inner.dimensions

    def _check(self, text_: str) -> None:
        if POISON in text_:
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


def poisoned_context(settings: Settings) -> WriteContext:
    """The offline write context with the poisoned embedder."""
    return build_write_context(settings, embedder=PoisonedEmbedder(build_embedding_provider(settings)))


@dataclass(frozen=True)
class CliStack:
    """A served API, its worker, and the database behind them."""

    base_url: str
    settings: Settings
    engine: Engine

    def run(self, args: Sequence[str], *, input_text: str | None = None, key: str = TEST_API_KEY) -> Result:
        """Run ``arandu --url ... --api-key ... ARGS`` in process and return its result."""
        runner = CliRunner()
        return runner.invoke(
            cli_app, ["--url", self.base_url, "--api-key", key, *args], input=input_text, catch_exceptions=False
        )

    def count(self, sql: str, **params: object) -> int:
        """A count from the database."""
        with self.engine.connect() as conn:
            return int(conn.execute(text(sql), params).scalar_one())


@pytest.fixture(scope="module")
def cli_stack(
    migrated_database_url: str, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CliStack]:
    base = api_settings(
        migrated_database_url,
        services.broker_url,
        tmp_path_factory.mktemp("cli-home"),
        pipeline_retry_base_s=0.2,
        pipeline_retry_max_s=1.0,
    )
    app = isolated_app(base, poisoned_context)
    own: Settings = app.arandu_settings  # type: ignore[attr-defined]
    engine = create_engine(migrated_database_url)
    try:
        queues = ("ingest", "apply", "maintenance")
        with running_worker(app, concurrency=4, queues=queues), serve_api(own) as base_url:
            yield CliStack(base_url, own, engine)
    finally:
        engine.dispose()


@pytest.fixture
def agent() -> str:
    """A fresh agent id."""
    return f"cli-{uuid.uuid4().hex[:10]}"


def write_ndjson(path: Path, lines: Sequence[str]) -> Path:
    """Write ``lines`` (already JSON) one per line."""
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path

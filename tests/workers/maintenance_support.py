"""What the maintenance-job tests share: a database of their own, memories written by the real
write pipeline, a Celery app whose maintenance context the test controls, and run inspection."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from celery import Celery
from sqlalchemy import create_engine, text

from memory_core.cognition.maintenance_skills import build_offline_maintenance_skills
from memory_core.config import MemoryConfig
from memory_core.db.migrate import upgrade
from memory_core.maintenance.context import MaintenanceContext, build_maintenance_context
from memory_core.maintenance.registry import job_function
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.settings import Settings, load_settings
from memory_core.write.context import build_write_context
from memory_core.write.intake import IncomingMessage, accept_messages
from memory_core.write.pipeline import run_extract, run_reconcile, run_resolve, run_upsert
from tests.support.api_server import TEST_API_KEY
from tests.support.services import TestServices
from workers.celery_app import create_celery_app

START = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


def jobs_settings(services: TestServices, tmp_path: Path) -> Settings:
    """Settings on a database of the calling test alone: Beat's fan-out looks at every agent it holds."""
    url = services.new_database("arandu_jobs")
    settings = load_settings(
        database_url=url,
        broker_url=services.broker_url,
        home=tmp_path / "home",
        embedding_dimensions=384,
        api_keys=TEST_API_KEY,
    )
    upgrade(settings)
    return settings


def new_agent(name: str = "agent") -> str:
    """A fresh agent id."""
    return f"{name}-{uuid.uuid4().hex[:10]}"


def remember(settings: Settings, agent_id: str, messages: Sequence[str], *, speaker: str = "Marina") -> list[str]:
    """Store ``messages`` as events and take them through every write stage in process; the event ids."""
    context = build_write_context(settings, embedder=HashingEmbedder(384), pool_size=2)
    try:
        with context.sessions.begin() as session:
            accepted = accept_messages(
                session,
                agent_id,
                [
                    IncomingMessage(message=message, speaker_name=speaker, occurred_at=START + timedelta(hours=index))
                    for index, message in enumerate(messages)
                ],
            )
        for stage in (run_extract, run_resolve, run_reconcile, run_upsert):
            for item in accepted:
                assert stage(context, item.event_id) == "completed"
    finally:
        context.close()
    return [str(item.event_id) for item in accepted]


@dataclass
class CountingFactory:
    """The maintenance-context factory of a test app (offline skills, hashing embeddings); counts its calls."""

    calls: int = 0
    built: list[MaintenanceContext] = field(default_factory=list)

    def __call__(self, settings: Settings) -> MaintenanceContext:
        self.calls += 1
        context = build_maintenance_context(
            settings, skills=build_offline_maintenance_skills(), embedder=HashingEmbedder(384), pool_size=2
        )
        self.built.append(context)
        return context

    def close(self) -> None:
        """Release every context built."""
        for context in self.built:
            context.close()


@contextmanager
def maintenance_app(settings: Settings) -> Iterator[tuple[Celery, CountingFactory]]:
    """An isolated app (own queues) whose workers build their maintenance context with :class:`CountingFactory`."""
    factory = CountingFactory()
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    own = settings.model_copy(update={"broker_key_prefix": prefix})
    app = create_celery_app(own, maintenance_context_factory=factory)
    try:
        yield app, factory
    finally:
        factory.close()
        app.close()


def fan_out(app: Celery, job: str) -> None:
    """Send Beat's fan-out for ``job``, as Beat would."""
    app.signature("maintenance.fan_out", args=(job,)).apply_async(expires=60)


class Gate:
    """A job that waits until the test opens the gate, so a run can be held ``running``."""

    def __init__(self, job: str = "importance") -> None:
        self.job = job
        self.entered = threading.Event()
        self.opened = threading.Event()

    def __call__(self, context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> dict[str, Any]:
        self.entered.set()
        if not self.opened.wait(60):
            raise TimeoutError("the test never opened the gate")
        return job_function(self.job)(context, agent_id, config)


class JobRuns:
    """Reads ``maintenance_job_runs`` the way a person checking on the jobs would."""

    def __init__(self, database_url: str) -> None:
        self.engine = create_engine(database_url)

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()

    def of(self, agent_id: str, job: str | None = None) -> list[dict[str, Any]]:
        """The agent's runs (of ``job``), oldest first."""
        with self.engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT id::text AS id, agent_id, job, status, trigger, task_id, result, error, created_at, "
                    "started_at, finished_at, duration_ms FROM maintenance_job_runs "
                    "WHERE agent_id = :agent AND (CAST(:job AS text) IS NULL OR job = :job) ORDER BY created_at, id"
                ),
                {"agent": agent_id, "job": job},
            ).mappings()
            return [dict(row) for row in rows]

    def execute(self, sql: str, **params: Any) -> None:
        """Run one statement (used to leave what a killed worker leaves behind)."""
        with self.engine.begin() as connection:
            connection.execute(text(sql), params)

    def wait(self, predicate: Callable[[], bool], what: str, *, timeout_s: float = 60, poll_s: float = 0.1) -> None:
        """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not happen within {timeout_s} s")
            time.sleep(poll_s)

    def wait_finished(self, agent_id: str, job: str, count: int = 1, *, timeout_s: float = 60) -> list[dict[str, Any]]:
        """Block until the agent has ``count`` finished runs of ``job``; return all its runs of ``job``."""

        def finished() -> bool:
            return sum(run["status"] in ("done", "failed", "skipped") for run in self.of(agent_id, job)) >= count

        self.wait(finished, f"{count} finished {job} run(s) for {agent_id}", timeout_s=timeout_s)
        return self.of(agent_id, job)

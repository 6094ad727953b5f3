"""Real Celery workers for tests (``celery.contrib.testing.worker.start_worker``), never eager mode."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.contrib.testing.worker import start_worker
from sqlalchemy import create_engine, text

from memory_core.settings import Settings
from workers.celery_app import create_celery_app


def isolated_app(settings: Settings, context_factory: Callable[[Settings], Any] | None = None) -> Celery:
    """A Celery app whose queues nobody else's test touches (own Redis key prefix)."""
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    own = settings.model_copy(update={"broker_key_prefix": prefix})
    return create_celery_app(own, context_factory=context_factory)


@contextmanager
def running_worker(app: Celery, *, concurrency: int = 6, queues: Sequence[str] = ("ingest", "apply")) -> Iterator[None]:
    """A real worker thread consuming ``queues`` until the block ends."""
    with start_worker(
        app,
        pool="threads",
        concurrency=concurrency,
        queues=list(queues),
        perform_ping_check=False,
        loglevel="WARNING",
        shutdown_timeout=60,
    ):
        yield


def wait_for_runs(
    database_url: str, event_ids: Sequence[str], *, timeout_s: float = 60, terminal: Sequence[str] = ("done", "failed")
) -> dict[str, str]:
    """Block until every run is terminal; return event id -> status."""
    engine = create_engine(database_url)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            with engine.connect() as conn:
                rows = conn.execute(
                    text("SELECT event_id::text, status FROM pipeline_runs WHERE event_id::text = ANY(:ids)"),
                    {"ids": list(event_ids)},
                ).all()
            statuses = {row[0]: row[1] for row in rows}
            if len(statuses) == len(set(event_ids)) and all(s in terminal for s in statuses.values()):
                return statuses
            if time.monotonic() > deadline:
                pending = {k: v for k, v in statuses.items() if v not in terminal}
                raise TimeoutError(f"runs not finished after {timeout_s} s: {pending}")
            time.sleep(0.1)
    finally:
        engine.dispose()

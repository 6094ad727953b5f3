"""Run the API in-process under a real uvicorn server, for tests that speak real HTTP.

::

    with serve_api(settings) as base_url:
        httpx.post(f"{base_url}/v1/agents/a/messages", json={...}, headers=auth_headers())

The server runs ``create_app(settings)`` in a background thread on a socket bound to
127.0.0.1 with a free port (bound before the server starts, so no other process can take the
port in between), with the app's lifespan (schema check at start, pools closed at the end).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import httpx
import redis
import uvicorn
from fastapi import FastAPI
from sqlalchemy import Engine, text

from memory_core.settings import Settings, load_settings
from workers.redis_client import redis_client_for

TEST_API_KEY = "test-key"

T = TypeVar("T")


def api_settings(database_url: str, broker_url: str, home: Path, **overrides: object) -> Settings:
    """Settings for an API under test: the given services, key ``test-key``, 384-dimension embeddings."""
    values: dict[str, object] = {
        "database_url": database_url,
        "broker_url": broker_url,
        "api_keys": TEST_API_KEY,
        "home": home,
        "embedding_dimensions": 384,
    }
    values.update(overrides)
    return load_settings(**values)


def auth_headers(key: str = TEST_API_KEY) -> dict[str, str]:
    """The ``Authorization`` header for ``key``."""
    return {"Authorization": f"Bearer {key}"}


@contextmanager
def serve_api(settings: Settings, *, app: FastAPI | None = None, timeout_s: float = 30.0) -> Iterator[str]:
    """Serve ``app`` (default ``create_app(settings)``) and yield its base URL once /healthz answers."""
    if app is None:
        from api.app import create_app

        app = create_app(settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as error:  # reported to the caller below
            failure.append(error)

    thread = threading.Thread(target=run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(base_url, server, thread, failure, timeout_s)
        yield base_url
    finally:
        server.should_exit = True
        thread.join(timeout=timeout_s)
        sock.close()
        if thread.is_alive():  # pragma: no cover - only when a request hangs past the graceful timeout
            server.force_exit = True
            thread.join(timeout=5)


def _wait_until_up(
    base_url: str, server: uvicorn.Server, thread: threading.Thread, failure: list[BaseException], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if failure:
            raise RuntimeError(f"the API failed to start: {failure[0]!r}") from failure[0]
        if not thread.is_alive():
            raise RuntimeError("the API stopped during start-up (see the lifespan error in the log)")
        if server.started:
            try:
                if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the API did not answer /healthz within {timeout_s} s")
        time.sleep(0.05)


# ---- What the API stored and published, for assertions -----------------------------------

STORED_TABLES = ("memory_events", "pipeline_runs", "imports", "memory_facts", "memory_entities")


def stored_counts(engine: Engine, agent_id: str) -> dict[str, int]:
    """Rows of ``agent_id`` in the tables a write request may touch."""
    with engine.connect() as connection:
        return {
            table: int(
                connection.execute(
                    text(f"SELECT count(*) FROM {table} WHERE agent_id = :agent"),
                    {"agent": agent_id},
                ).scalar_one()
            )
            for table in STORED_TABLES
        }


def broker_client(broker_url: str) -> redis.Redis:
    """A redis-py client on the broker (``redis+socket://`` included)."""
    return redis_client_for(broker_url)


def queued_task_names(client: redis.Redis, queue: str = "ingest") -> list[str]:
    """Names of the tasks waiting in ``queue``, oldest first (Celery's Redis transport: a list)."""
    names = []
    for raw in reversed(client.lrange(queue, 0, -1)):
        message = json.loads(raw)
        names.append(str(message.get("headers", {}).get("task", "?")))
    return names


# The API publishes an accepted message's processing once its answer is sent (a background task),
# so the broker's queues catch up with a 202 a moment after it: read them with these two.


def settled(read: Callable[[], T], *, quiet_s: float = 0.5, timeout_s: float = 15.0) -> T:
    """``read()`` once it has given the same value for ``quiet_s`` (what is in flight has landed)."""
    deadline = time.monotonic() + timeout_s
    value = read()
    since = time.monotonic()
    while True:
        time.sleep(0.05)
        current = read()
        if current != value:
            value, since = current, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still changing after {timeout_s} s, last {value!r}")


def poll(check: Callable[[], T], what: str, timeout_s: float = 60) -> T:
    """``check()``'s first truthy value, asked every 50 ms; ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout_s} s")
        time.sleep(0.05)


def eventually_equal(read: Callable[[], T], expected: T, *, timeout_s: float = 15.0) -> None:
    """Wait until ``read()`` gives ``expected``; fail naming the last value after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    value = read()
    while value != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"expected {expected!r} within {timeout_s} s, last {value!r}")
        time.sleep(0.02)
        value = read()

"""Beat's heartbeat: when Beat starts and each time it publishes a task, it says so in the broker.

Celery Beat answers no ping, so "is Beat alive?" is answered by what it does: every scheduled
task it sends (the pipeline sweeper, every 30 s) stamps a small Redis hash. ``arandu doctor``
reads it and calls Beat dead when the last publication is older than a few sweeper periods.
Only the Beat process installs these handlers (``python -m workers beat``). With a non-Redis
broker nothing is recorded and the doctor says it cannot tell.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from celery import Celery
from celery.signals import after_task_publish, beat_init
from kombu import Connection

from memory_core.settings import Settings
from workers.celery_app import broker_transport_options

logger = logging.getLogger(__name__)

HEARTBEAT_KEY = "arandu:beat-heartbeat"
_FIELDS = ("started_at", "published_at", "task", "host", "pid")


@dataclass(frozen=True)
class BeatHeartbeat:
    """What Beat last said: when it started, when it last published a task, and which."""

    started_at: float | None
    published_at: float | None
    task: str | None
    host: str | None
    pid: int | None

    def age_s(self, now: float | None = None) -> float | None:
        """Seconds since the last sign of life (a publication, else the start)."""
        last = self.published_at or self.started_at
        if last is None:
            return None
        return (time.time() if now is None else now) - last


def _redis_client(connection: Connection) -> Any | None:
    """The redis-py client of a Redis broker connection (key prefix applied), or None for other brokers."""
    return getattr(connection.default_channel, "client", None)


def _record(app: Celery, values: dict[str, str]) -> None:
    # Never let bookkeeping break the scheduler: a failed stamp only makes Beat look late.
    try:
        with app.connection_for_write() as connection:
            client = _redis_client(connection)
            if client is not None:
                client.hset(HEARTBEAT_KEY, mapping=values)
    except Exception as error:
        logger.warning("could not record Beat's heartbeat: %s", error)


def install(app: Celery) -> None:
    """Stamp the heartbeat from this (Beat) process: at start and after every task it publishes."""
    identity = {"host": socket.gethostname(), "pid": str(os.getpid())}

    def started(**_: Any) -> None:
        _record(app, {**identity, "started_at": f"{time.time():.3f}", "published_at": "", "task": ""})

    def published(sender: str | None = None, **_: Any) -> None:
        _record(app, {**identity, "published_at": f"{time.time():.3f}", "task": str(sender or "")})

    beat_init.connect(started, weak=False)
    after_task_publish.connect(published, weak=False)


def _number(raw: Any) -> float | None:
    if raw in (None, b"", ""):
        return None
    try:
        return float(raw.decode() if isinstance(raw, bytes) else raw)
    except ValueError:
        return None


def _text(raw: Any) -> str | None:
    if raw in (None, b"", ""):
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def read_heartbeat(settings: Settings, timeout_s: float = 3.0) -> BeatHeartbeat | None:
    """Beat's last heartbeat in the broker; None when there is none. Raises if the broker is down.

    Raises :class:`NotImplementedError` for a broker that is not Redis (nothing is recorded there).
    """
    with Connection(
        settings.broker_url,
        connect_timeout=timeout_s,
        transport_options={**broker_transport_options(settings), "socket_timeout": timeout_s},
    ) as connection:
        connection.ensure_connection(max_retries=1, timeout=timeout_s)
        client = _redis_client(connection)
        if client is None:
            raise NotImplementedError("Beat's heartbeat is kept only on a Redis broker")
        # HGET goes through kombu's key prefix (HGETALL would not).
        values = {name: client.hget(HEARTBEAT_KEY, name) for name in _FIELDS}
    if all(value in (None, b"", "") for value in values.values()):
        return None
    pid = _number(values["pid"])
    return BeatHeartbeat(
        started_at=_number(values["started_at"]),
        published_at=_number(values["published_at"]),
        task=_text(values["task"]),
        host=_text(values["host"]),
        pid=int(pid) if pid is not None else None,
    )

"""Where ``./ops/dev`` left its stack: the record that lets ``arandu`` find it without options.

``./ops/dev`` starts its own PostgreSQL and Redis (on sockets under ``$ARANDU_HOME``), and may run
on other ports than the defaults. It writes what a client needs to reach them into
``$ARANDU_HOME/dev-stack.json`` (mode 0600: it holds the Flower password) together with its own
process id; every ``arandu`` command started with the same ``ARANDU_HOME`` (by default ``.arandu/``
of the same checkout) reads it, so ``doctor`` and ``db`` reach the same database and broker as the
commands that go through the API. A variable set in the environment always wins over the record.
The record stays after the stack stops, so that a client can say "./ops/dev is not running"
rather than blame a server on the default port that was never meant.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from memory_core.settings import ENV_PREFIX, Settings

RECORD_NAME = "dev-stack.json"
# The settings a client needs to reach the stack's parts and to judge them (the embedding size).
RECORDED_FIELDS = (
    "database_url",
    "broker_url",
    "broker_key_prefix",
    "broker_visibility_timeout_s",
    "api_host",
    "api_port",
    "flower_host",
    "flower_port",
    "flower_user",
    "flower_password",
    "embedding_provider",
    "embedding_model",
    "embedding_dimensions",
)
_SUPERVISOR_MODULE = "ops.devstack"


@dataclass(frozen=True)
class DevStackRecord:
    """What ``./ops/dev`` wrote: its pid, when it started, and the settings of the stack it runs."""

    path: Path
    pid: int
    started_at: float
    settings: dict[str, Any]

    @property
    def running(self) -> bool:
        """True while the ``./ops/dev`` process that wrote the record still runs (not a recycled pid)."""
        try:
            command = psutil.Process(self.pid).cmdline()
        except (psutil.Error, OSError):
            return False
        return any(_SUPERVISOR_MODULE in part for part in command)

    def describe(self) -> str:
        """Where the stack lives and since when, for messages."""
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
        return f"./ops/dev (pid {self.pid}, started {started}) under {self.path.parent}"


def record_path(home: Path) -> Path:
    """The record's path under an ``ARANDU_HOME``."""
    return home / RECORD_NAME


def write_record(settings: Settings, pid: int | None = None) -> Path:
    """Record ``settings`` (the stack's own, as its processes got them) for clients; returns the file."""
    values: dict[str, Any] = {}
    for name in RECORDED_FIELDS:
        value = getattr(settings, name)
        if value is None:
            continue
        if hasattr(value, "get_secret_value"):
            value = value.get_secret_value()
        values[name] = getattr(value, "value", value)  # enums as their value
    path = record_path(settings.home)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"pid": os.getpid() if pid is None else pid, "started_at": time.time(), "settings": values}
    temporary = path.with_suffix(".tmp")
    # Created private: the record holds the Flower password.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as sink:
        json.dump(payload, sink, indent=2)
    temporary.replace(path)
    return path


def read_record(home: Path) -> DevStackRecord | None:
    """The record under ``home``, or None when there is none or it cannot be read."""
    path = record_path(home)
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        payload = json.loads(path.read_text(encoding="utf-8"))
        settings = payload["settings"]
        if isinstance(settings, dict):
            return DevStackRecord(path, int(payload["pid"]), float(payload["started_at"]), dict(settings))
    return None


def overrides_from(record: DevStackRecord, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The recorded settings that the environment does not set itself (the environment wins)."""
    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in record.settings.items()
        if name in RECORDED_FIELDS and f"{ENV_PREFIX}{name.upper()}" not in environ
    }

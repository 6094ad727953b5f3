"""The per-process maintenance context of a worker, built lazily (after a prefork child is forked)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from memory_core.cognition.instrumented import instrument_skills
from memory_core.maintenance.context import MaintenanceContext, build_maintenance_context
from memory_core.settings import Settings
from workers.task_metrics import ledger_for

# A job runs alone in its prefork child, so a small pool is enough (plus as many overflow):
# every child of every maintenance worker holds one, and they all count against the server.
MAINTENANCE_POOL_SIZE = 2

_lock = threading.Lock()


def default_maintenance_context(settings: Settings) -> MaintenanceContext:
    """The context of a maintenance worker process: the configured providers and skills."""
    return build_maintenance_context(settings, pool_size=MAINTENANCE_POOL_SIZE)


def get_maintenance_context(app: Any) -> MaintenanceContext:
    """The context of ``app``'s settings (or its test factory), created once per process.

    Keyed by process id: the prefork parent may build one (to record an expired task) before
    it forks a replacement child, and a child must never share its parent's connections.
    """
    pid = os.getpid()
    cached: tuple[int, MaintenanceContext] | None = getattr(app, "_arandu_maintenance_context", None)
    if cached is not None and cached[0] == pid:
        return cached[1]
    with _lock:
        cached = getattr(app, "_arandu_maintenance_context", None)
        if cached is not None and cached[0] == pid:
            existing: MaintenanceContext = cached[1]
            return existing
        factory: Callable[[Settings], MaintenanceContext] = (
            getattr(app, "arandu_maintenance_context_factory", None) or default_maintenance_context
        )
        context = factory(app.arandu_settings)
        ledger = ledger_for(app)
        if ledger is not None:
            # Count skill calls and tokens by skill for /metrics.
            context.skills = instrument_skills(context.skills, ledger)
        app._arandu_maintenance_context = (pid, context)
    return context

"""Task timing for ``/metrics``: every task a worker runs is timed into the metrics ledger.

Connected once per process to Celery's ``task_prerun``/``task_postrun`` signals. Stage latencies
of the write pipeline are the durations of its stage tasks (``ingest.extract``, ``apply.resolve``,
``apply.reconcile``, ``apply.upsert``); maintenance jobs are timed the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery.signals import task_postrun, task_prerun

from workers.metrics_ledger import MetricsLedger

logger = logging.getLogger("arandu.metrics")

# Keyed by (task id, retry number): a retried task keeps its id, and its next attempt can start
# (short countdown, other thread) before the failed attempt's postrun has run.
_started: dict[tuple[str, int], float] = {}
_ledger_lock = threading.Lock()


def ledger_for(app: Any) -> MetricsLedger | None:
    """The metrics ledger of ``app``'s settings, built once per process (``None`` without Redis)."""
    missing = object()
    ledger = getattr(app, "_arandu_metrics_ledger", missing)
    if ledger is missing:
        with _ledger_lock:
            ledger = getattr(app, "_arandu_metrics_ledger", missing)
            if ledger is missing:
                settings = getattr(app, "arandu_settings", None)
                ledger = MetricsLedger.for_settings(settings) if settings is not None else None
                app._arandu_metrics_ledger = ledger
    return ledger  # type: ignore[return-value]


def _attempt(task_id: str, task: Any) -> tuple[str, int]:
    request = getattr(task, "request", None)
    return task_id, int(getattr(request, "retries", 0) or 0)


def _on_prerun(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if task_id:
        _started[_attempt(task_id, task)] = time.perf_counter()


def _on_postrun(task_id: str | None = None, task: Any = None, state: str | None = None, **_: Any) -> None:
    started = _started.pop(_attempt(task_id, task), None) if task_id else None
    if started is None or task is None:
        return
    try:
        ledger = ledger_for(task.app)
        if ledger is not None:
            ledger.observe_task(task.name, time.perf_counter() - started, state or "UNKNOWN")
    except Exception:  # metrics are best effort: a broken ledger must not fail the task
        logger.debug("could not record the duration of %s", getattr(task, "name", "?"), exc_info=True)


def install_task_metrics() -> None:
    """Connect the timing handlers; signals are process-wide, and the ``dispatch_uid`` keeps it to once."""
    task_prerun.connect(_on_prerun, weak=False, dispatch_uid="arandu.task_metrics.prerun")
    task_postrun.connect(_on_postrun, weak=False, dispatch_uid="arandu.task_metrics.postrun")

"""The per-process write context of a worker, built lazily (after a prefork child is forked)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from celery.signals import worker_ready

from memory_core.cognition.instrumented import instrument_skills
from memory_core.process_heap import freeze_startup_heap
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from workers.task_metrics import ledger_for

_lock = threading.Lock()
PIPELINE_NODES = ("ingest", "apply")


def get_write_context(app: Any) -> WriteContext:
    """The context of ``app``'s settings (or its test factory), created once per process."""
    context: WriteContext | None = getattr(app, "_arandu_write_context", None)
    if context is not None:
        return context
    with _lock:
        context = getattr(app, "_arandu_write_context", None)
        if context is None:
            factory: Callable[[Settings], WriteContext] = (
                getattr(app, "arandu_context_factory", None) or build_write_context
            )
            context = factory(app.arandu_settings)
            ledger = ledger_for(app)
            if ledger is not None:
                # Count skill calls and tokens by skill for /metrics.
                context.skills = instrument_skills(context.skills, ledger)
            app._arandu_write_context = context
    return context


@worker_ready.connect(dispatch_uid="arandu.prepare_pipeline_worker")
def _prepare_pipeline_worker(sender: Any = None, **_: Any) -> None:
    """Build a pipeline worker's context as soon as it is ready, not in its first task.

    Building it imports the LLM SDK and opens the providers: seconds of CPU (the ``openai``
    package alone) that the first messages would otherwise wait for. Only the nodes
    ``python -m workers`` names for the pipeline queues (``ingest@...``, ``apply2@...``) do it.
    """
    app = getattr(sender, "app", None)
    hostname = str(getattr(sender, "hostname", ""))
    if app is None or not hasattr(app, "arandu_settings") or not hostname.startswith(PIPELINE_NODES):
        return
    get_write_context(app)
    # Celery, the SDKs and the context live as long as the worker: the collector need not
    # walk them at every full collection (memory_core.process_heap).
    freeze_startup_heap()

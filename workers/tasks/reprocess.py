"""``apply.reprocess``: watch a re-process of an agent until it switches to its new memory.

The task looks at the re-process (:func:`memory_core.maintenance.reprocess.advance_reprocess`):
while shadow runs are pending it publishes itself again :data:`POLL_S` later; a catch-up round
enqueues the messages it copied; the switch enqueues the late messages it re-drove. A lost
watcher is replaced by the Beat sweeper (:func:`kick_stalled_reprocesses`), and any number of
watchers of one re-process are harmless: every step re-checks under the re-process's row lock.
"""

from __future__ import annotations

import logging
import uuid

from celery import Celery, Task
from sqlalchemy.exc import OperationalError

from memory_core.maintenance.reprocess import advance_reprocess, discard_shadows, orphan_shadows, stalled_reprocesses
from workers.context import get_write_context

logger = logging.getLogger("arandu.reprocess")

TASK = "apply.reprocess"
#: Seconds between two looks at a running re-process.
POLL_S = 1.0
# A deadlock PostgreSQL broke (the switch against an erasure or an apply of the agent) is retried.
_RETRY_S = 2.0


def watch_reprocess(app: Celery, reprocess_id: uuid.UUID | str, *, countdown: float = POLL_S) -> None:
    """Publish a look at ``reprocess_id`` in ``countdown`` seconds."""
    app.signature(TASK, args=(str(reprocess_id),), immutable=True).apply_async(countdown=countdown)


def kick_stalled_reprocesses(app: Celery, idle_s: float) -> int:
    """Watch again the running re-processes nobody looked at for ``idle_s``; erase orphaned shadows."""
    context = get_write_context(app)
    with context.sessions() as session:
        stalled = stalled_reprocesses(session, idle_s)
        orphans = orphan_shadows(session)
    for reprocess_id in stalled:
        watch_reprocess(app, reprocess_id, countdown=0)
    if orphans:
        discard_shadows(context.engine, orphans)
        logger.warning("erased %d shadow(s) of cancelled re-processes", len(orphans))
    return len(stalled)


def register_reprocess_tasks(app: Celery) -> None:
    """Define ``apply.reprocess`` on ``app``."""
    from workers.tasks.pipeline import enqueue_events

    @app.task(name=TASK, bind=True, shared=False, max_retries=None)
    def reprocess(self: Task, reprocess_id: str) -> str:
        """One look at a re-process: wait, catch up with late messages, or switch to the new memory."""
        context = get_write_context(self.app)
        try:
            step = advance_reprocess(context.engine, uuid.UUID(reprocess_id))
        except OperationalError as error:
            logger.warning("re-process %s: %s; looking again in %.0f s", reprocess_id, error.orig, _RETRY_S)
            watch_reprocess(self.app, reprocess_id, countdown=_RETRY_S)
            return "retrying"
        if step.enqueue:
            enqueue_events(self.app, step.enqueue)
        if step.outcome in ("waiting", "caught_up"):
            watch_reprocess(self.app, reprocess_id)
        return step.outcome

"""The write pipeline's tasks: ``ingest.extract`` -> ``apply.resolve`` -> ``apply.reconcile`` -> ``apply.upsert``.

Tasks take an event id, or a list of event ids (a chunk: one agent's from batches, imports and
the sweeper; several agents' single messages from ``ingest.collect``), and nothing else; state
lives in PostgreSQL. Failures retry with
exponential backoff and jitter, never sooner than the provider's Retry-After; the run row
counts attempts (Redis has no dead-letter queue), and past the cap the run is ``failed``
with its stage and error until someone re-drives it. A provider that rate-limits with a
Retry-After is obeyed without spending an attempt: those retries wait what it asked (plus
jitter) and have a budget of their own (``pipeline_max_throttled_retries``).
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from celery import Celery, Task, chain
from celery.canvas import Signature

from memory_core.providers.errors import ProviderRequestError, RetryableProviderError
from memory_core.write.context import WriteContext
from memory_core.write.pipeline import (
    StageInputMissingError,
    StageOutcome,
    run_extract,
    run_reconcile,
    run_resolve,
    run_stage_chunk,
    run_upsert,
)
from memory_core.write.runs import mark_failed, plan_chunks, record_attempt, record_throttled, triage_stuck_runs
from memory_core.write.schemas import STAGES
from workers.context import get_write_context
from workers.intake import TAKE_LIMIT as INTAKE_TAKE_LIMIT
from workers.intake import IntakeQueue
from workers.tasks.reprocess import kick_stalled_reprocesses

logger = logging.getLogger("arandu.pipeline")

STAGE_TASKS: dict[str, str] = {
    "extract": "ingest.extract",
    "resolve": "apply.resolve",
    "reconcile": "apply.reconcile",
    "upsert": "apply.upsert",
}
STAGE_FUNCTIONS: dict[str, Callable[[Any, uuid.UUID], StageOutcome]] = {
    "extract": run_extract,
    "resolve": run_resolve,
    "reconcile": run_reconcile,
    "upsert": run_upsert,
}
DISPATCH_CHUNK = 500


def retry_delay(attempt: int, base_s: float, max_s: float, retry_after_s: float | None) -> float:
    """Exponential backoff with full jitter, never shorter than what the provider asked for."""
    ceiling = min(max_s, base_s * (2 ** max(attempt - 1, 0)))
    delay = random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not cryptography
    return max(delay, retry_after_s or 0.0)


def throttle_delay(retry_after_s: float, base_s: float) -> float:
    """What a provider's Retry-After asked for, plus jitter so the refused tasks do not all return at once."""
    return retry_after_s + random.uniform(0, base_s)  # noqa: S311 - jitter, not cryptography


def throttled_retry_after(error: Exception) -> float | None:
    """The wait a rate-limiting provider asked for (a wait, not a failure of the message); None otherwise."""
    if isinstance(error, RetryableProviderError) and error.reason == "rate_limited":
        return error.retry_after_s
    return None


EventIds = str | list[str]


def _as_list(event_ids: EventIds | Sequence[str]) -> list[str]:
    return [event_ids] if isinstance(event_ids, str) else list(event_ids)


def pipeline_chain(app: Celery, event_ids: EventIds | Sequence[str], start: str = "extract") -> Signature:
    """The stage tasks from ``start`` to ``upsert`` for one event (an id) or a chunk of events (a list)."""
    ids = _as_list(event_ids)
    argument: EventIds = ids[0] if len(ids) == 1 else ids
    first = STAGES.index(start)
    return chain(*(app.signature(STAGE_TASKS[stage], args=(argument,), immutable=True) for stage in STAGES[first:]))


def enqueue_events(app: Celery, event_ids: Sequence[str], start: str = "extract") -> None:
    """Start the pipeline for ``event_ids``: directly for a few, through ``ingest.dispatch`` for many."""
    if len(event_ids) <= 8:
        # A few events skip the dispatch hop, as one chunk when the chunk size allows: with an
        # LLM, messages of one conversation in one chunk share extraction calls.
        settings = getattr(app, "arandu_settings", None)
        if settings is not None and 1 < len(event_ids) <= settings.chunk_size:
            pipeline_chain(app, list(event_ids), start).apply_async()
            return
        for event_id in event_ids:
            pipeline_chain(app, event_id, start).apply_async()
        return
    for offset in range(0, len(event_ids), DISPATCH_CHUNK):
        app.signature(
            "ingest.dispatch", args=(list(event_ids[offset : offset + DISPATCH_CHUNK]), start), immutable=True
        ).apply_async()


def intake_for(app: Celery) -> IntakeQueue | None:
    """The intake list of ``app``'s settings (one client per process), or None when the broker is not Redis."""
    if not hasattr(app, "_arandu_intake"):
        app._arandu_intake = IntakeQueue.for_settings(app.arandu_settings, producer=False)  # type: ignore[attr-defined]
    queue: IntakeQueue | None = app._arandu_intake  # type: ignore[attr-defined]
    return queue


def collect_intake(app: Celery, *, wait: bool) -> int:
    """Start one chain per chunk of the single messages waiting in the intake list; how many were taken.

    With ``wait``, first let the list fill up to a chunk or for the configured longest wait.
    """
    queue = intake_for(app)
    if queue is None:
        return 0
    context = get_write_context(app)
    size = context.settings.pipeline_intake_chunk_size
    if wait and context.settings.pipeline_intake_wait_ms > 0:
        queue.wait_for(size, time.monotonic() + context.settings.pipeline_intake_wait_ms / 1000)
    taken = 0
    while True:
        ids = queue.take(INTAKE_TAKE_LIMIT)
        if not ids:
            return taken
        with context.sessions() as session:
            chunks = plan_chunks(session, [uuid.UUID(event_id) for event_id in ids], size, mix_agents=True)
        for chunk in chunks:
            pipeline_chain(app, [str(event_id) for event_id in chunk]).apply_async()
        taken += len(ids)
        if len(ids) < INTAKE_TAKE_LIMIT:
            return taken


def _count_failure(context: WriteContext, stage: str, event_id: str, error: Exception) -> float | None:
    """Record a failed attempt; the retry delay, or None when the run is now ``failed`` for good."""
    settings = context.settings
    run_id = uuid.UUID(event_id)
    if isinstance(error, (ProviderRequestError, StageInputMissingError)):
        # A bad key, an unknown model or a run without its inputs will not fix itself by waiting.
        with context.sessions.begin() as session:
            mark_failed(session, run_id, stage, f"{type(error).__name__}: {error}")
        logger.error("event %s failed at %s: %s", event_id, stage, error)
        return None
    message = f"{type(error).__name__}: {error}"
    asked_wait_s = throttled_retry_after(error)
    if asked_wait_s is not None:
        return _count_throttled(context, stage, event_id, asked_wait_s, message)
    with context.sessions.begin() as session:
        attempts = record_attempt(session, run_id, stage, message)
        if attempts >= settings.pipeline_max_attempts:
            mark_failed(session, run_id, stage, message)
    if attempts >= settings.pipeline_max_attempts:
        logger.error("event %s failed at %s after %d attempts: %s", event_id, stage, attempts, message)
        return None
    retry_after = error.retry_after_s if isinstance(error, RetryableProviderError) else None
    countdown = retry_delay(attempts, settings.pipeline_retry_base_s, settings.pipeline_retry_max_s, retry_after)
    logger.warning(
        "event %s: %s attempt %d failed (%s); retrying in %.1f s", event_id, stage, attempts, message, countdown
    )
    return countdown


def _count_throttled(context: WriteContext, stage: str, event_id: str, wait_s: float, message: str) -> float | None:
    """Record a rate-limited try; the provider's delay, or None past ``pipeline_max_throttled_retries``."""
    settings = context.settings
    with context.sessions.begin() as session:
        throttled = record_throttled(session, uuid.UUID(event_id), stage, message)
        if throttled > settings.pipeline_max_throttled_retries:
            mark_failed(session, uuid.UUID(event_id), stage, f"rate limited {throttled} times: {message}")
    if throttled > settings.pipeline_max_throttled_retries:
        logger.error("event %s failed at %s: rate limited %d times (%s)", event_id, stage, throttled, message)
        return None
    countdown = throttle_delay(wait_s, settings.pipeline_retry_base_s)
    logger.info("event %s: %s rate limited (%d); retrying in %.1f s as asked", event_id, stage, throttled, countdown)
    return countdown


def _run_stage(task: Task, stage: str, event_ids: EventIds) -> str:
    ids = _as_list(event_ids)
    if len(ids) != 1:
        return _run_chunk(task, stage, ids)
    event_id = ids[0]
    context = get_write_context(task.app)
    try:
        return STAGE_FUNCTIONS[stage](context, uuid.UUID(event_id))
    except Exception as error:
        countdown = _count_failure(context, stage, event_id, error)
        if countdown is None:
            return "failed"
        # The run row counts attempts; Celery's own limit is off (max_retries=None on the task).
        raise task.retry(countdown=countdown, exc=error) from error


def _run_chunk(task: Task, stage: str, ids: list[str]) -> str:
    """A stage for a chunk of events: one failing event leaves the chunk and retries in a chain of its own."""
    context = get_write_context(task.app)
    try:
        outcomes = run_stage_chunk(context, stage, [uuid.UUID(event_id) for event_id in ids])
    except Exception as error:
        # The chunk's shared reads or writes failed (nothing was stored): every event counts an
        # attempt, and the whole chunk retries while any of them has attempts left.
        delays = [_count_failure(context, stage, event_id, error) for event_id in ids]
        waits = [delay for delay in delays if delay is not None]
        if not waits:
            return "failed"
        raise task.retry(countdown=max(waits), exc=error) from error
    counts: Counter[str] = Counter()
    # Events failed by one shared call (a batched LLM call throttled) retry together, in one
    # chain, so they share a call again; any other failure retries its event on its own.
    together: dict[int, tuple[list[str], float]] = {}
    for run_id, outcome in outcomes.items():
        if not isinstance(outcome, Exception):
            counts[outcome] += 1
            continue
        countdown = _count_failure(context, stage, str(run_id), outcome)
        if countdown is None:
            counts["failed"] += 1
            continue
        counts["retrying"] += 1
        if isinstance(outcome, RetryableProviderError):
            ids_so_far, longest = together.get(id(outcome), ([], 0.0))
            together[id(outcome)] = ([*ids_so_far, str(run_id)], max(longest, countdown))
            continue
        # The rest of the chunk goes on; this event's later stages in the chunk find it
        # behind and skip it, and its own chain resumes at the stage that failed.
        pipeline_chain(task.app, str(run_id), stage).apply_async(countdown=countdown)
    for run_ids, countdown in together.values():
        pipeline_chain(task.app, run_ids, stage).apply_async(countdown=countdown)
    return ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))


def _chunk_size(context: WriteContext) -> int:
    return context.settings.chunk_size


def register_pipeline_tasks(app: Celery) -> None:
    """Define the pipeline's tasks on ``app``."""

    @app.task(name="ingest.extract", bind=True, shared=False, max_retries=None)
    def extract(self: Task, event_id: EventIds) -> str:
        """Stage 1: extraction (an event id, or a chunk's list of event ids)."""
        return _run_stage(self, "extract", event_id)

    @app.task(name="apply.resolve", bind=True, shared=False, max_retries=None)
    def resolve(self: Task, event_id: EventIds) -> str:
        """Stage 2: entity resolution."""
        return _run_stage(self, "resolve", event_id)

    @app.task(name="apply.reconcile", bind=True, shared=False, max_retries=None)
    def reconcile(self: Task, event_id: EventIds) -> str:
        """Stage 3: reconciliation decisions."""
        return _run_stage(self, "reconcile", event_id)

    @app.task(name="apply.upsert", bind=True, shared=False, max_retries=None)
    def upsert(self: Task, event_id: EventIds) -> str:
        """Stage 4: apply under the agent's lock."""
        return _run_stage(self, "upsert", event_id)

    @app.task(name="ingest.dispatch", bind=True, shared=False, max_retries=None)
    def dispatch(self: Task, event_ids: list[str], start: str = "extract") -> int:
        """Fan a batch out into one chain per (agent, chunk of events) (keeps the API's batch answer fast)."""
        context = get_write_context(self.app)
        with context.sessions() as session:
            chunks = plan_chunks(session, [uuid.UUID(event_id) for event_id in event_ids], _chunk_size(context))
        for chunk in chunks:
            pipeline_chain(self.app, [str(event_id) for event_id in chunk], start).apply_async()
        return len(chunks)

    @app.task(name="ingest.collect", bind=True, shared=False, max_retries=None)
    def collect(self: Task, wait: bool = True) -> int:
        """Start the single messages the API queued for coalescing, in chunks (see :mod:`workers.intake`).

        ``wait``: let the list fill first (the API says so when the message had company).
        """
        return collect_intake(self.app, wait=wait)

    @app.task(name="apply.sweep_stuck_runs", bind=True, shared=False, max_retries=None)
    def sweep_stuck_runs(self: Task, limit: int = 1000) -> int:
        """Re-enqueue runs idle too long (lost enqueue, dead worker); fail those swept too often without progress."""
        context = get_write_context(self.app)
        settings = context.settings
        try:
            # Ids whose collector was lost (a broker hiccup right after the push) start now.
            collect_intake(self.app, wait=False)
        except Exception as error:
            logger.warning("sweeper could not drain the intake list (%s: %s)", type(error).__name__, error)
        with context.sessions.begin() as session:
            stuck, given_up = triage_stuck_runs(
                session,
                stale_after_s=settings.pipeline_stale_after_s,
                limit=limit,
                max_sweeps=settings.pipeline_max_sweeps,
            )
        for run in given_up:
            logger.error(
                "event %s failed: stuck before %s after %d re-enqueues without progress",
                run.event_id,
                run.next_stage,
                run.sweeps - 1,
            )
        groups: dict[tuple[str, str], list[str]] = {}
        for run in stuck:
            groups.setdefault((run.agent_id, run.next_stage), []).append(str(run.event_id))
        size = _chunk_size(context)
        for (_, stage), ids in groups.items():
            for offset in range(0, len(ids), size):
                pipeline_chain(self.app, ids[offset : offset + size], stage).apply_async()
        if stuck:
            logger.warning("sweeper re-enqueued %d stuck runs", len(stuck))
        try:
            # Re-processes whose watcher was lost are watched again (memory_core.maintenance.reprocess).
            kick_stalled_reprocesses(self.app, max(settings.pipeline_stale_after_s, 60.0))
        except Exception as error:
            logger.warning("sweeper could not look at re-processes (%s: %s)", type(error).__name__, error)
        return len(stuck)

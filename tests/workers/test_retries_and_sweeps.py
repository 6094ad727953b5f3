"""When the pipeline tries a stage again, and when it gives up: retry_delay and the sweeper's cap.

The failure accounting and the sweeper's triage run here against the real PostgreSQL (what the
task bodies call); what a user sees is the run's status, stage and error (``GET /v1/events/{id}``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from memory_core.providers.errors import RetryableProviderError
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from memory_core.write.intake import IncomingMessage, accept_messages
from memory_core.write.pipeline import run_extract
from memory_core.write.runs import triage_stuck_runs
from tests.workers.memory_queries import MemoryInspector
from workers.tasks.pipeline import _count_failure, retry_delay

# Runs made stale by hand are this old; the sweeps below look for runs idle past half of it,
# which no other test's runs are.
LONG_AGO = "now() - interval '10 years'"
STALE_AFTER_S = 5 * 365 * 24 * 3600.0


def test_retry_delay_doubles_with_each_attempt_with_jitter_and_a_cap() -> None:
    base, cap = 2.0, 300.0
    for attempt, ceiling in [(1, 2.0), (2, 4.0), (3, 8.0), (6, 64.0), (9, 300.0), (40, 300.0)]:
        delays = [retry_delay(attempt, base, cap, None) for _ in range(200)]
        # Full jitter in the upper half: never shorter than half the backoff, never past it.
        assert all(ceiling / 2 <= delay <= ceiling for delay in delays), attempt
        assert max(delays) - min(delays) > ceiling / 10, "no jitter"
    # A provider's Retry-After is honoured even when it is longer than the backoff (or the cap).
    assert retry_delay(1, base, cap, 30.0) == 30.0
    assert retry_delay(1, base, cap, 900.0) == 900.0
    assert base / 2 <= retry_delay(1, base, cap, 0.5) <= base


@pytest.fixture
def context(write_settings: Settings) -> Iterator[WriteContext]:
    """A write context (offline skills) whose stages and failure accounting run in this process."""
    built = build_write_context(write_settings, pool_size=2)
    yield built
    built.close()


@pytest.fixture
def memory(write_settings: Settings) -> Iterator[MemoryInspector]:
    inspector = MemoryInspector(write_settings.database_url)
    yield inspector
    inspector.close()


def _accept(context: WriteContext, count: int) -> list[uuid.UUID]:
    agent = f"agent-{uuid.uuid4().hex[:10]}"
    with context.sessions.begin() as session:
        accepted = accept_messages(
            session,
            agent,
            [
                IncomingMessage(
                    message=f"Rafael gosta de xadrez ({n}).", speaker_name="Rafael", occurred_at=datetime.now(UTC)
                )
                for n in range(count)
            ],
        )
    return [item.event_id for item in accepted]


def _set(memory: MemoryInspector, event_id: uuid.UUID, *, sweeps: int | None = None, stale: bool = False) -> None:
    """Make a run look swept ``sweeps`` times and/or idle for years."""
    assignments = [f"updated_at = {LONG_AGO}"] if stale else []
    if sweeps is not None:
        assignments.append(f"sweeps = {int(sweeps)}")
    with memory.engine.begin() as connection:
        connection.execute(
            text(f"UPDATE pipeline_runs SET {', '.join(assignments)} WHERE event_id = :e"), {"e": event_id}
        )


def _run(memory: MemoryInspector, event_id: uuid.UUID) -> dict[str, Any]:
    [row] = memory.rows(
        "SELECT status, stage, error, attempts, sweeps FROM pipeline_runs WHERE event_id = :e", e=event_id
    )
    return row


def test_a_failing_stage_retries_with_growing_delays_then_fails_for_good(
    context: WriteContext, memory: MemoryInspector
) -> None:
    settings = context.settings  # retries from 0.2 s, at most 1 s apart, 6 attempts
    [event] = _accept(context, 1)
    delays = [_count_failure(context, "extract", str(event), RuntimeError("boom")) for _ in range(5)]
    assert all(delay is not None for delay in delays)
    for attempt, delay in enumerate(delays, start=1):
        ceiling = min(settings.pipeline_retry_max_s, settings.pipeline_retry_base_s * 2 ** (attempt - 1))
        assert ceiling / 2 <= delay <= ceiling  # type: ignore[operator]
    assert _run(memory, event)["status"] == "received"  # still going to be retried
    # A server error that says when to come back is retried no sooner than that.
    asked = RetryableProviderError("overloaded", status_code=503, retry_after_s=3.0)
    [slow] = _accept(context, 1)
    assert _count_failure(context, "extract", str(slow), asked) == 3.0

    assert _count_failure(context, "extract", str(event), RuntimeError("boom")) is None
    run = _run(memory, event)
    assert (run["status"], run["stage"], run["attempts"]) == ("failed", "extract", settings.pipeline_max_attempts)
    assert run["error"] == "RuntimeError: boom"


def test_the_sweeper_re_enqueues_a_stuck_run_until_its_cap_then_gives_up(
    context: WriteContext, memory: MemoryInspector
) -> None:
    max_sweeps = 3
    stuck, fresh_start, progressed = _accept(context, 3)
    # Already re-enqueued max_sweeps times without moving; the other one never.
    _set(memory, stuck, sweeps=max_sweeps, stale=True)
    _set(memory, fresh_start, stale=True)
    # This one was re-enqueued as often, then got through its extraction: progress resets the count.
    _set(memory, progressed, sweeps=max_sweeps)
    assert run_extract(context, progressed) == "completed"
    assert _run(memory, progressed)["sweeps"] == 0
    _set(memory, progressed, stale=True)

    with context.sessions.begin() as session:
        again, given_up = triage_stuck_runs(session, stale_after_s=STALE_AFTER_S, limit=100, max_sweeps=max_sweeps)
    assert {(run.event_id, run.next_stage, run.sweeps) for run in again} == {
        (fresh_start, "extract", 1),
        (progressed, "resolve", 1),
    }
    assert [(run.event_id, run.sweeps) for run in given_up] == [(stuck, max_sweeps + 1)]
    gave_up = _run(memory, stuck)
    assert (gave_up["status"], gave_up["stage"]) == ("failed", "extract")
    assert gave_up["error"].startswith(f"stuck before extract: re-enqueued {max_sweeps} times without progress")
    assert _run(memory, fresh_start)["status"] == "received"
    assert _run(memory, progressed)["status"] == "extracted"

    # Claimed runs' clocks were reset: an immediate second sweep finds nothing to do.
    with context.sessions.begin() as session:
        assert triage_stuck_runs(session, stale_after_s=STALE_AFTER_S, limit=100, max_sweeps=max_sweeps) == ([], [])

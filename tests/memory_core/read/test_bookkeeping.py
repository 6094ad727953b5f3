"""Retrieval bookkeeping (R12) on the real database: counts land in memory_fact_usage, never in memory_facts."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from memory_core.read.bookkeeping import RetrievalBookkeeper, record_retrievals
from memory_core.read.context import ReadContext
from memory_core.read.management import delete_fact, get_fact
from tests.memory_core.read.conftest import MemoryBuilder


@pytest.fixture
def bookkeeper(read_ctx: ReadContext) -> Iterator[RetrievalBookkeeper]:
    """A deferred bookkeeper whose background thread never flushes during a test (flushes are explicit)."""
    keeper = RetrievalBookkeeper(read_ctx.sessions, flush_interval_s=3600)
    try:
        yield keeper
    finally:
        keeper.close()


def _usage(memory: MemoryBuilder, fact_id: str) -> tuple[int, datetime | None] | None:
    """The fact's (times_retrieved, last_retrieved_at) in memory_fact_usage, or None without a row."""
    rows = memory.rows(
        "SELECT times_retrieved, last_retrieved_at FROM memory_fact_usage WHERE fact_id = :id", id=fact_id
    )
    return (rows[0].times_retrieved, rows[0].last_retrieved_at) if rows else None


def _fact_version(memory: MemoryBuilder, fact_id: str) -> str:
    """The transaction that wrote the fact row's current version (changes whenever the row is updated)."""
    [row] = memory.rows("SELECT xmin::text AS xmin FROM memory_facts WHERE id = :id", id=fact_id)
    return str(row.xmin)


def _usage_page(memory: MemoryBuilder, fact_id: str) -> int:
    """The heap page that holds the fact's usage row."""
    [row] = memory.rows("SELECT (ctid::text::point)[0] AS page FROM memory_fact_usage WHERE fact_id = :id", id=fact_id)
    return int(row.page)


def test_a_flush_counts_repeated_retrievals_and_never_writes_the_fact_row(
    memory: MemoryBuilder, bookkeeper: RetrievalBookkeeper
) -> None:
    ana = memory.entity("Ana")
    often = memory.fact("Ana toca violino", ana)
    once = memory.fact("Ana mora em Lisboa", ana)
    never = memory.fact("Ana tem um gato", ana)
    versions = {fact_id: _fact_version(memory, fact_id) for fact_id in (often, once, never)}
    started = datetime.now(UTC)

    for _ in range(3):
        assert bookkeeper.record(memory.agent_id, [often]) is True
    assert bookkeeper.record(memory.agent_id, [often, once, once]) is True  # a fact counts once per retrieval
    recorded = datetime.now(UTC)
    assert bookkeeper.pending() == 2
    assert _usage(memory, often) is None  # queued, not written yet

    assert bookkeeper.flush() is True
    assert bookkeeper.pending() == 0
    counted = _usage(memory, often)
    assert counted is not None
    assert counted[0] == 4
    # The time of the latest retrieval, not of the flush.
    assert counted[1] is not None
    assert started <= counted[1] <= recorded
    assert _usage(memory, once) is not None
    assert _usage(memory, once)[0] == 1  # type: ignore[index]
    assert _usage(memory, never) is None

    # A second flush adds to the row; the new version stays on its page (a HOT update).
    page = _usage_page(memory, often)
    bookkeeper.record(memory.agent_id, [often])
    assert bookkeeper.flush() is True
    assert _usage(memory, often)[0] == 5  # type: ignore[index]
    assert _usage_page(memory, often) == page

    # No fact row got a new version: the counters live in memory_fact_usage only.
    assert {fact_id: _fact_version(memory, fact_id) for fact_id in versions} == versions


def test_the_synchronous_form_counts_each_retrieval_in_the_request(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    fact = memory.fact("Ana toca violino", memory.entity("Ana"))
    version = _fact_version(memory, fact)

    assert record_retrievals(read_ctx.sessions, memory.agent_id, [fact, fact]) is True
    assert record_retrievals(read_ctx.sessions, memory.agent_id, [fact]) is True

    counted = _usage(memory, fact)
    assert counted is not None
    assert counted[0] == 2
    assert counted[1] is not None
    assert _fact_version(memory, fact) == version


def test_one_agents_retrieval_never_counts_on_another_agents_fact(
    read_ctx: ReadContext, memory: MemoryBuilder, bookkeeper: RetrievalBookkeeper
) -> None:
    theirs = memory.fact("Ana toca violino", memory.entity("Ana"))
    intruder = "agent-b-" + memory.agent_id

    bookkeeper.record(intruder, [theirs])
    # Nothing to retry: the fact is not the intruder's, so the count is dropped, not kept queued.
    assert bookkeeper.flush() is True
    assert bookkeeper.pending() == 0
    assert record_retrievals(read_ctx.sessions, intruder, [theirs]) is True
    assert _usage(memory, theirs) is None


def test_deleting_a_fact_deletes_its_counts(
    read_ctx: ReadContext, memory: MemoryBuilder, bookkeeper: RetrievalBookkeeper
) -> None:
    ana = memory.entity("Ana")
    counted = memory.fact("Ana toca violino", ana)
    queued = memory.fact("Ana mora em Lisboa", ana)
    assert record_retrievals(read_ctx.sessions, memory.agent_id, [counted]) is True
    assert _usage(memory, counted) is not None
    bookkeeper.record(memory.agent_id, [queued])

    with read_ctx.sessions.begin() as session:
        assert delete_fact(session, memory.agent_id, counted) is True
        assert delete_fact(session, memory.agent_id, queued) is True

    assert _usage(memory, counted) is None  # ON DELETE CASCADE
    # A fact deleted while its count was queued is dropped at the flush, not retried.
    assert bookkeeper.flush() is True
    assert bookkeeper.pending() == 0
    assert _usage(memory, queued) is None


def test_a_flush_that_cannot_get_its_locks_keeps_the_counts_for_the_next_one(
    read_ctx: ReadContext, memory: MemoryBuilder, bookkeeper: RetrievalBookkeeper
) -> None:
    fact = memory.fact("Ana toca violino", memory.entity("Ana"))
    assert record_retrievals(read_ctx.sessions, memory.agent_id, [fact]) is True
    bookkeeper.record(memory.agent_id, [fact])

    with read_ctx.engine.connect() as holder:
        # Another transaction holds the usage row past the flush's lock timeout.
        holder.execute(text("SELECT 1 FROM memory_fact_usage WHERE fact_id = :id FOR UPDATE"), {"id": fact})
        assert bookkeeper.flush() is False
        assert bookkeeper.pending() == 1
        holder.rollback()

    assert bookkeeper.flush() is True
    assert _usage(memory, fact)[0] == 2  # type: ignore[index]


def test_the_fact_detail_shows_the_counters(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    """What GET .../facts/{id} reads. Spreading activation weighs facts by the same counters
    (test_spreading's dynamic importance test); the signals do not read them."""
    ana = memory.entity("Ana")
    asked = memory.fact("Ana mora em Lisboa", ana)
    unasked = memory.fact("Ana tem um gato", ana)
    for _ in range(2):
        assert record_retrievals(read_ctx.sessions, memory.agent_id, [asked]) is True

    with read_ctx.sessions() as session:
        detail = get_fact(session, memory.agent_id, asked)
        plain = get_fact(session, memory.agent_id, unasked)

    assert detail is not None
    assert (detail.times_retrieved, detail.last_retrieved_at is not None) == (2, True)
    assert plain is not None
    assert (plain.times_retrieved, plain.last_retrieved_at) == (0, None)

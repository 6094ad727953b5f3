"""Keyword document frequencies (memory_core.read.keywords): exact for small agents, bounded for large ones."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from memory_core.read import keywords
from memory_core.read.context import ReadContext
from memory_core.read.keywords import (
    document_frequencies,
    document_frequency_cache,
    keyword_weights,
    matched_keywords,
    term_queries,
)
from memory_core.read.planner import fold_words, keyword_haystack, match_forms
from memory_core.read.signals import agent_counts
from memory_core.read.term_stats import term_stats
from tests.memory_core.read.conftest import MemoryBuilder

QUERIES = term_queries(["coffee", "vertix"])


@pytest.fixture
def session(read_ctx: ReadContext) -> Iterator[Session]:
    with Session(read_ctx.engine) as opened:
        yield opened


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    for cache in (document_frequency_cache, agent_counts, term_stats):
        cache.clear()
    yield
    for cache in (document_frequency_cache, agent_counts, term_stats):
        cache.clear()


def _coffee_drinker(memory: MemoryBuilder, read_ctx: ReadContext) -> MemoryBuilder:
    """Six facts of the agent (four about coffee, one about Vertix); another agent, returned, talks of Vertix a lot."""
    other = MemoryBuilder(read_ctx.engine, memory.embedder, memory.agent_id + "-other")
    rafael = memory.entity("Rafael")
    for place in ("home", "work", "the cafe", "the airport"):
        memory.fact(f"Rafael drinks coffee at {place}", rafael)
    memory.fact("Rafael works at Vertix", rafael)
    memory.fact("Rafael plays chess on Sundays", rafael)
    bruno = other.entity("Bruno")
    for number in range(5):
        other.fact(f"Bruno visited the Vertix office {number} times", bruno)
    return other


def test_a_small_agent_is_counted_exactly_and_only_its_own_facts(
    memory: MemoryBuilder, read_ctx: ReadContext, session: Session
) -> None:
    _coffee_drinker(memory, read_ctx)

    assert document_frequencies(session, memory.agent_id, QUERIES, 6) == (6, [4, 1])
    coffee, vertix = keyword_weights(session, memory.agent_id, ["coffee", "vertix"], 6)
    assert vertix > coffee > 0.0


def test_a_small_agents_counts_are_reused_until_its_fact_count_changes(
    memory: MemoryBuilder, read_ctx: ReadContext, session: Session
) -> None:
    other = _coffee_drinker(memory, read_ctx)
    assert document_frequencies(session, memory.agent_id, QUERIES, 6) == (6, [4, 1])

    # A new fact changes the agent's count (what the caller counted): the next query counts again.
    memory.fact("Rafael met the Vertix founders over coffee", "person:rafael")
    session.rollback()
    assert document_frequencies(session, memory.agent_id, QUERIES, 7) == (7, [5, 2])

    # Under the same count the pass is not run again: the remembered counts answer.
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(read_ctx.engine, "before_cursor_execute", record)
    try:
        assert document_frequencies(session, memory.agent_id, QUERIES, 7) == (7, [5, 2])
        assert document_frequencies(session, memory.agent_id, term_queries(["chess"]), 7) == (7, [1])
    finally:
        event.remove(read_ctx.engine, "before_cursor_execute", record)
    # The known words were answered from memory; the new one ("chess") needed one pass.
    assert len(statements) == 1

    # Another agent's counts are its own, whatever its size.
    assert document_frequencies(session, other.agent_id, QUERIES, 5) == (5, [0, 5])


def test_a_large_agent_counts_rare_words_through_the_index_and_reuses_the_count(
    memory: MemoryBuilder, read_ctx: ReadContext, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    _coffee_drinker(memory, read_ctx)
    monkeypatch.setattr(keywords, "SCAN_MAX_FACTS", 2)

    # 0 = the caller did not count (an agent searched through its own vector index).
    assert document_frequencies(session, memory.agent_id, QUERIES, 0) == (6, [4, 1])

    memory.fact("Rafael met the Vertix founders", "person:rafael")
    session.rollback()
    # Within the cache's lifetime the earlier count stands (an idf moves slowly as memory grows)...
    assert document_frequencies(session, memory.agent_id, QUERIES, 0)[1] == [4, 1]
    # ...and a fresh count sees the new fact.
    document_frequency_cache.clear()
    agent_counts.clear()
    assert document_frequencies(session, memory.agent_id, QUERIES, 0) == (7, [4, 2])


def test_a_large_agent_estimates_common_words_from_the_statistics(
    memory: MemoryBuilder, read_ctx: ReadContext, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    _coffee_drinker(memory, read_ctx)
    # Enough coffee that its share of the whole table (which other tests' agents share, Vertix
    # included) stays well above Vertix's whatever ran before: the shares are table-wide.
    for number in range(200):
        memory.fact(f"Rafael had coffee number {number}", "person:rafael")
    with read_ctx.engine.begin() as connection:
        connection.execute(text("ANALYZE memory_facts"))
    monkeypatch.setattr(keywords, "SCAN_MAX_FACTS", 2)
    # Any share the statistics know makes an estimate (the default bar is 500 expected matches).
    monkeypatch.setattr(keywords, "COMMON_ESTIMATE_MIN", 1e-9)
    shares, _ = term_stats.shares(session)
    assert "coffee" in shares, "ANALYZE lists the agent's most repeated word among the common lexemes"

    total, (coffee, vertix) = document_frequencies(session, memory.agent_id, QUERIES, 0)

    assert total == 206
    assert coffee == min(total, round(shares["coffee"] * total))
    expected_vertix = round(shares["vertix"] * total) if "vertix" in shares else 1
    assert vertix == expected_vertix
    weights = keyword_weights(session, memory.agent_id, ["coffee", "vertix"], 0)
    assert weights[1] > weights[0]


def test_an_ascii_text_matches_the_keywords_the_full_haystack_finds() -> None:
    """The ASCII shortcut of keyword matching decides as the haystack and the folded words together do."""
    rng = random.Random(11)
    pieces = ["mora", "Moradia", "namorada", "Ana", "ana's", "(ana", "x_ana", "foo.bar", "BAR", "-pre", "a1b2", "12"]
    marks = [" ", "  ", ".", ",", "_", "-", "(", "'", '"', "/", ":", "[", "{", "?", "!", ""]
    keywords = ["mora", "ana", "bar", "pre", "b2", "12", "mãe", "são"]
    forms = [match_forms(word) for word in keywords]
    for _ in range(3_000):
        text = "".join(rng.choice(pieces) + rng.choice(marks) for _ in range(rng.randint(1, 6)))
        assert text.isascii()
        lowered = keyword_haystack(text)
        folded = " " + " ".join(fold_words(text))
        expected = [plain in lowered or word in lowered or word in folded for plain, word in forms]
        assert matched_keywords(text, keywords) == expected, text

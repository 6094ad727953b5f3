"""The keyword signal of an agent searched exactly finds every eligible fact holding a searched word, and no other.

Such an agent's facts are read in one pass that feeds both the semantic search and the keyword
pool (memory_core.read.signals); the pass must apply the same filters as each search alone:
this agent only, active facts only, ``min_confidence``, the session. When it also counts the
keywords' document frequencies (memory_core.read.keywords), its counts must be the ones the
keyword module's own pass makes, and the candidates must not change.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event

from memory_core.config import MemoryConfig
from memory_core.read import retrieve
from memory_core.read.context import ReadContext
from memory_core.read.keywords import bm25_idf, document_frequencies, document_frequency_cache, term_queries
from memory_core.read.planner import plan_retrieval
from memory_core.read.signals import SignalRequest, SignalResult, run_signals
from tests.memory_core.read.conftest import MemoryBuilder


def _signals(read_ctx: ReadContext, memory: MemoryBuilder, query: str, **request: Any) -> SignalResult:
    with read_ctx.sessions() as session:
        return run_signals(
            session,
            SignalRequest(
                agent_id=memory.agent_id,
                config=MemoryConfig(embedding_dimensions=384),
                now=datetime.now(UTC),
                query_vector=memory.embedder.embed_one(query),
                agent_facts=40,
                agent_index_min_facts=0,  # never an index of its own: searched exactly
                **{"keywords": ["violin"], **request},
            ),
        )


def _keyword_ids(result: SignalResult) -> set[str]:
    return {candidate.fact_id for candidate in result.candidates if "keyword" in candidate.sources}


def _violin_memory(memory: MemoryBuilder) -> tuple[set[str], set[str]]:
    """(this agent's active, confident facts naming the violin; those of them said in session s1)."""
    people = [f"person:friend_{index}" for index in range(6)]
    for index in range(30):
        memory.fact(f"Friend {index % 6} went hiking near the lake on day {index}.", people[index % 6])
    found = {
        memory.fact("Ana plays the violin in an orchestra.", people[0]),
        memory.fact("Bruno bought a violin for his daughter.", people[1]),
        memory.fact("Carla's violin teacher moved to Lisbon.", people[2]),
    }
    event = memory.event("Dora started violin lessons.", session_id="s1")
    in_s1 = memory.fact("Dora started violin lessons.", people[3], source_event_id=event)
    found.add(in_s1)
    found_in_s1 = {in_s1}
    # Not eligible: superseded, below min_confidence.
    memory.fact(
        "Edu played the violin as a child.",
        people[4],
        valid_from=datetime.now(UTC) - timedelta(days=30),
        valid_to=datetime.now(UTC) - timedelta(days=1),
    )
    memory.fact("Maybe Fabi owns a violin.", people[5], confidence=0.2)
    return found, found_in_s1


def test_every_eligible_fact_holding_the_word_is_a_keyword_candidate(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    found, _ = _violin_memory(memory)
    other = MemoryBuilder(memory.engine, memory.embedder, f"agent-{uuid.uuid4().hex[:12]}")
    theirs = other.fact("Gil restores old violin bodies.", "person:gil")

    result = _signals(read_ctx, memory, "Who plays the violin?")

    assert result.vector_strategy == "exact"
    assert _keyword_ids(result) == found
    assert theirs not in {candidate.fact_id for candidate in result.candidates}
    # The same pass fed the semantic search: it still ranks this agent's facts by similarity.
    assert any("semantic" in candidate.sources for candidate in result.candidates)


def test_the_session_filter_applies_to_the_keyword_candidates(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    _, found_in_s1 = _violin_memory(memory)

    result = _signals(read_ctx, memory, "Who plays the violin?", session_id="s1")

    assert _keyword_ids(result) == found_in_s1
    assert {candidate.fact_id for candidate in result.candidates} == found_in_s1


def _separate_counts(read_ctx: ReadContext, memory: MemoryBuilder, words: list[str]) -> tuple[int, list[int]]:
    """The keyword module's own pass over the agent's facts (nothing remembered)."""
    document_frequency_cache.clear()
    with read_ctx.sessions() as session:
        return document_frequencies(session, memory.agent_id, term_queries(words), 40)


def test_the_pass_counts_the_keywords_as_the_keyword_module_does_and_keeps_its_candidates(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    found, _ = _violin_memory(memory)
    other = MemoryBuilder(memory.engine, memory.embedder, f"agent-{uuid.uuid4().hex[:12]}")
    other.fact("Gil restores old violin bodies near the lake.", "person:gil")
    words = ["violin", "lake", "orchestra"]

    result = _signals(
        read_ctx, memory, "Who plays the violin near the lake?", keywords=words, term_queries=term_queries(words)
    )

    # 35 facts valid now (the superseded one is not; the unsure one is: it is a document all the
    # same); "violin" in 5 of them, "lake" in the 30 hikes, "orchestra" in one.
    assert result.term_counts == (35, [5, 30, 1])
    assert result.term_counts == _separate_counts(read_ctx, memory, words)
    # Counting reads the unsure fact too; it is still no candidate.
    violin = {c.fact_id for c in result.candidates if "keyword" in c.sources and "violin" in c.fact_text}
    assert violin == found


def test_no_counts_when_the_pass_is_narrowed_by_a_session(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    _, found_in_s1 = _violin_memory(memory)

    result = _signals(read_ctx, memory, "Who plays the violin?", session_id="s1", term_queries=term_queries(["violin"]))

    assert result.term_counts is None  # the keyword module counts them in a pass of its own
    assert _keyword_ids(result) == found_in_s1


@pytest.fixture
def _nothing_remembered() -> Iterator[None]:
    document_frequency_cache.clear()
    yield
    document_frequency_cache.clear()


QUERY = "Who plays the violin in the orchestra?"


@pytest.mark.usefixtures("_nothing_remembered")
def test_a_small_agents_retrieve_counts_its_keywords_in_the_signal_pass(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    _violin_memory(memory)
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(read_ctx.engine, "before_cursor_execute", record)
    try:
        answer = retrieve(read_ctx, agent_id=memory.agent_id, query=QUERY)
    finally:
        event.remove(read_ctx.engine, "before_cursor_execute", record)

    assert not [s for s in statements if "WITH mine AS" in s], "no second pass over the facts"
    assert [s for s in statements if "term_counts" in s], "the signal statement counted the keywords"
    # The idf the retrieve used is the separate pass's: the orchestra fact, holding every keyword,
    # scores the whole keyword signal; a fact with "violin" only, violin's share of the idf.
    words = list(plan_retrieval(QUERY).keywords)
    assert words == ["plays", "violin", "orchestra"]
    total, counts = _separate_counts(read_ctx, memory, words)
    assert (total, counts) == (35, [1, 5, 1])
    idf = [bm25_idf(total, count) for count in counts]
    scores = {fact.fact_text: fact.scores["keyword"] for fact in answer.facts}
    assert scores["Ana plays the violin in an orchestra."] == pytest.approx(1.0)
    assert scores["Bruno bought a violin for his daughter."] == pytest.approx(idf[1] / sum(idf), abs=1e-6)


def test_keywords_match_with_or_without_accents_both_ways(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    # The text-search configuration folds accents in documents and queries alike (migration 0013).
    for index in range(10):
        memory.fact(f"Friend {index} went hiking near the lake.", f"person:friend_{index}")
    accented = memory.fact("Ana mora em São Paulo desde 2020.", "person:ana")
    plain = memory.fact("Bruno flew to Sao Tome last spring.", "person:bruno")
    cafe = memory.fact("Carla opened a café downtown.", "person:carla")
    for words in (["sao"], ["São"], ["SAO"]):
        assert _keyword_ids(_signals(read_ctx, memory, " ".join(words), keywords=words)) == {accented, plain}, words
    assert _keyword_ids(_signals(read_ctx, memory, "cafe", keywords=["cafe"])) == {cafe}
    with read_ctx.sessions() as session:
        total, counts = document_frequencies(session, memory.agent_id, term_queries(["são", "cafe"]), 13)
    assert (total, counts) == (13, [2, 1])

"""The keyword signal of an agent searched exactly finds every eligible fact holding a searched word, and no other.

Such an agent's facts are read in one pass that feeds both the semantic search and the keyword
pool (memory_core.read.signals); the pass must apply the same filters as each search alone:
this agent only, active facts only, ``min_confidence``, the session.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from memory_core.config import MemoryConfig
from memory_core.read.context import ReadContext
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
                keywords=["violin"],
                agent_facts=40,
                agent_index_min_facts=0,  # never an index of its own: searched exactly
                **request,
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

"""Relevant conversations (memory_core.read.conversations): past messages scored like facts."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from memory_core.db.text_search import event_search_vector_sql
from memory_core.read.context import ReadContext
from memory_core.read.conversations import relevant_conversations
from memory_core.read.keywords import term_queries
from memory_core.read.pipeline import retrieve
from memory_core.read.rank import recency_score
from tests.memory_core.read.conftest import NOW, MemoryBuilder


def _cosine(left: list[float], right: list[float]) -> float:
    dot = sum(a * b for a, b in zip(left, right, strict=True))
    return dot / (math.sqrt(sum(a * a for a in left)) * math.sqrt(sum(b * b for b in right)))


def test_term_queries_are_one_folded_prefix_per_distinct_word() -> None:
    # The text-search configuration folds accents in the database, documents and queries alike.
    assert term_queries(["série", "lgbtq", "série", "serie"]) == ["serie:*", "lgbtq:*"]
    assert term_queries([]) == []


def test_a_conversational_question_gets_the_turn_above_unrelated_speaker_facts(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    said = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    caroline = memory.entity("Caroline")
    # A long conversation: Caroline has many more facts than the graph signal brings (30).
    for number in range(60):
        memory.fact(
            f"Caroline cooked pasta number {number} for dinner",
            caroline,
            importance=0.9,
            speaker="Caroline",
            valid_from=said,
        )
    memory.refresh_fact_counts()
    turn = memory.event(
        "I went to a LGBTQ support group yesterday and it was so powerful.",
        speaker="Caroline",
        occurred_at=said,
        message_id="D1:3",
    )
    for number in range(10):
        memory.event(f"Cooking pasta again, batch {number}.", speaker="Caroline", occurred_at=said + timedelta(hours=1))

    result = retrieve(read_ctx, agent_id=memory.agent_id, query="When did Caroline go to the LGBTQ support group?")

    assert result.events[0].event_id == turn
    assert result.events[0].message_id == "D1:3"
    # Facts and events share one scale: the turn outranks every fact that is only "about Caroline".
    assert result.events[0].score > max(fact.score for fact in result.facts)
    assert "- (2023-05-08) Caroline: I went to a LGBTQ support group" in result.context


def test_rare_query_words_carry_the_keyword_match(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    said = NOW - timedelta(days=400)  # old: recency adds nothing
    rare = memory.event("We talked about Vertix at lunch.", speaker="Ana", occurred_at=said)
    for number in range(9):
        memory.event(f"Ana here, note {number}.", speaker="Ana", occurred_at=said)
    config = read_ctx.base_config
    # A query vector unrelated to every event: only the keyword signal can find anything.
    vector = read_ctx.embedder.embed_one("zebra quartz xylophone")
    assert vector is not None
    with read_ctx.sessions() as session:
        events = relevant_conversations(session, memory.agent_id, vector, ["ana", "vertix"], config, now=NOW)
    # "ana" is in all ten messages (their speaker), "vertix" in one: matching "ana" alone is worth
    # almost nothing and stays under the relevance bar; "vertix" carries the match.
    assert [event.event_id for event in events] == [rare]


def test_events_are_scored_with_the_fact_formula(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    said = NOW - timedelta(days=3)
    message = "Fui a um show de jazz com o Rafael"
    memory.event(message, speaker="Pedro", occurred_at=said)
    query = "show de jazz"
    vector = read_ctx.embedder.embed_one(query)
    stored = read_ctx.embedder.embed_one(message)
    assert vector is not None
    assert stored is not None
    config = read_ctx.base_config
    with read_ctx.sessions() as session:
        # No keywords: relevance is the cosine similarity, as for a fact found by the semantic signal.
        (event,) = relevant_conversations(session, memory.agent_id, vector, [], config, now=NOW)
    similarity = _cosine(vector, stored)
    recency = recency_score(said, NOW, float(config.recency_half_life_days))
    expected = 0.70 * similarity + 0.20 * recency + 0.10 * 0.5
    assert event.score == pytest.approx(expected, abs=1e-5)


def test_recency_alone_never_brings_an_unrelated_message(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    memory.event("Comprei pão e leite na padaria", speaker="Pedro")
    vector = read_ctx.embedder.embed_one("Qual é a banda de jazz preferida do Rafael?")
    assert vector is not None
    with read_ctx.sessions() as session:
        events = relevant_conversations(
            session, memory.agent_id, vector, ["banda", "jazz", "rafael"], read_ctx.base_config, now=NOW
        )
    assert events == []


def test_a_message_written_before_its_search_document_existed_is_matched_the_same(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    """Events older than migration 0014 have no stored search document: the read builds the same one."""
    said = NOW - timedelta(days=400)
    messages = [
        "I've been researching (adoption) agencies",
        "Fui ao [Recife] com a “Vertix” - pós-jogo",
        "¿Pesquisou a Vertix? ¡Sim! São Paulo/Recife",
        "We adopted a dog named Vertix",
    ]
    ids = [memory.event(message, speaker="Ana", occurred_at=said) for message in messages]
    for number in range(8):
        memory.event(f"Bruno falou da nota {number}.", speaker="Bruno", occurred_at=said)
    # The stored document is the one the read path builds (memory_core.db.text_search).
    same = memory.rows(
        f"SELECT count(*) FILTER (WHERE search_vector = {event_search_vector_sql()}), count(*) "
        "FROM memory_events WHERE agent_id = :agent"
    )
    assert tuple(same[0]) == (12, 12)
    vector = read_ctx.embedder.embed_one("zebra quartz xylophone")
    assert vector is not None
    words = ["researched", "adoption", "recife", "vertix", "pesquisando", "pos", "sao", "bruno"]

    def found() -> list[tuple[str, float]]:
        with read_ctx.sessions() as session:
            events = relevant_conversations(session, memory.agent_id, vector, words, read_ctx.base_config, now=NOW)
        return [(event.event_id, event.score) for event in events]

    with_documents = found()
    # The query's vector resembles none of them: the words found them, by stem, with different
    # weights (and a reply may come along).
    assert {event_id for event_id, _ in with_documents} >= set(ids)
    assert len({score for _, score in with_documents}) > 1

    def forget(condition: str) -> None:
        # Only an update of text or speaker writes the document again: this one leaves it NULL.
        memory.execute(f"UPDATE memory_events SET search_vector = NULL WHERE agent_id = :agent AND {condition}")

    forget("speaker = 'Ana' AND text LIKE '%Vertix%'")  # some old rows beside new ones
    assert found() == with_documents
    forget("true")
    nulls = memory.rows("SELECT count(*) FROM memory_events WHERE agent_id = :agent AND search_vector IS NULL")
    assert nulls[0][0] == 12
    assert found() == with_documents

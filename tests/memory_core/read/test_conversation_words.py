"""Relevant conversations match the words of the query by stem (migration 0014), through ``retrieve``.

Every message here has one embedding and every query another, orthogonal to it: the semantic
signal gives each message a similarity of 0, so a message is found, and ranked, by the keyword
signal alone. With no facts (no support) and messages 400 days old (no recency), an event's
score is ``w_sem x 0.7 x keyword + w_imp x 0.5``, so the keyword of each message can be read
back from its score exactly.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from memory_core.read.context import ReadContext
from memory_core.read.conversations import EVENT_KEYWORD_BLEND, relevant_conversations
from memory_core.read.pipeline import retrieve
from memory_core.read.planner import plan_retrieval
from memory_core.read.schemas import RetrievedEvent, RetrieveResult
from memory_core.write.repository import vector_literal
from tests.memory_core.read.conftest import NOW, MemoryBuilder
from tests.support.fixed_embedder import FixedEmbedder

DIMENSIONS = 384
# Every message's embedding, and every query's: cosine similarity 0.
STORED = [1.0] + [0.0] * (DIMENSIONS - 1)
ASKED = [0.0, 1.0] + [0.0] * (DIMENSIONS - 2)
SAID = NOW - timedelta(days=400)  # recency 0.5 ** (400 / 14): nothing


def _say(memory: MemoryBuilder, message: str, *, speaker: str = "Caroline", minutes: int = 0) -> str:
    """One message in a session of its own (so no message is another's reply), ``minutes`` after SAID."""
    return memory.event(
        message, speaker=speaker, session_id=f"s-{uuid.uuid4().hex[:8]}", occurred_at=SAID + timedelta(minutes=minutes)
    )


def _no_semantic_help(memory: MemoryBuilder) -> None:
    """Give every message of the agent the STORED embedding (the text and its search document are untouched)."""
    memory.execute(
        "UPDATE memory_events SET embedding_vec = CAST(:vec AS vector) WHERE agent_id = :agent",
        vec=vector_literal(STORED),
    )


def _ask(read_ctx: ReadContext, memory: MemoryBuilder, query: str, **overrides: Any) -> RetrieveResult:
    result = retrieve(
        replace(read_ctx, embedder=FixedEmbedder(ASKED)),
        agent_id=memory.agent_id,
        query=query,
        config_overrides=overrides or None,
    )
    assert not result.warnings
    return result


def _keyword(read_ctx: ReadContext, event: RetrievedEvent) -> float:
    """The keyword signal of an event found with no similarity, no support and no recency (module docstring)."""
    weights = read_ctx.base_config.score_weights
    return (event.score - weights["importance"] * 0.5) / (weights["semantic"] * EVENT_KEYWORD_BLEND)


def _found(result: RetrieveResult) -> list[str]:
    return [event.event_id for event in result.events]


def _keywords(read_ctx: ReadContext, events: Sequence[RetrievedEvent]) -> dict[str, float]:
    return {event.event_id: _keyword(read_ctx, event) for event in events}


def _idf(total: int, containing: int) -> float:
    """BM25's inverse document frequency, as the conversations statement computes it."""
    return math.log(1.0 + (total - containing + 0.5) / (containing + 0.5))


def test_a_question_finds_the_message_with_another_form_of_its_word(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    researching = _say(memory, "I've been researching adoption agencies")
    adopting = _say(memory, "We are adopting a rescue dog next month", speaker="Melanie", minutes=1)
    _say(memory, "She searched the attic for old photos", speaker="Melanie", minutes=2)
    _say(memory, "The weather was lovely at the lake", minutes=3)
    _no_semantic_help(memory)

    # "research" is not in the message, "researching" is: the English stem of both is "research".
    result = _ask(read_ctx, memory, "What did she research?")
    assert _found(result) == [researching]
    assert _keyword(read_ctx, result.events[0]) == pytest.approx(1.0, abs=1e-5)
    # Neither is a prefix of the other: only the stems match.
    assert _found(_ask(read_ctx, memory, "What had she researched?")) == [researching]
    # "adoption" and "adopting" share the stem "adopt".
    result = _ask(read_ctx, memory, "adoption")
    assert set(_found(result)) == {researching, adopting}
    assert _keywords(read_ctx, result.events) == pytest.approx({researching: 1.0, adopting: 1.0}, abs=1e-5)
    # Both match as well: the newer first.
    assert _found(_ask(read_ctx, memory, "Is she adopting?")) == [adopting, researching]


def test_the_keyword_match_ranks_the_stemmed_message_first_with_the_hashing_embedder(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    # The read context's own embedder: hashed words, so "researching" and "research" are unrelated
    # vectors, and the other messages share more words with the question.
    researching = memory.event("I've been researching adoption agencies", speaker="Caroline", occurred_at=SAID)
    memory.event("What did she say about the lake?", speaker="Melanie", occurred_at=SAID, session_id="other")
    memory.event("She did say it was lovely", speaker="Caroline", occurred_at=SAID, session_id="third")
    result = retrieve(read_ctx, agent_id=memory.agent_id, query="What did she research?")
    assert result.events[0].event_id == researching


def test_a_portuguese_question_finds_other_forms_of_its_verb(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    # Snowball's Portuguese stemmer takes "pesquisando", "pesquisei" and "pesquisa" to "pesquis".
    pesquisei = _say(memory, "Eu pesquisei agências de adoção", speaker="Ana")
    pesquisa = _say(memory, "A pesquisa da faculdade acabou ontem", speaker="Bruno", minutes=1)
    _say(memory, "Fui ao mercado comprar pão", speaker="Ana", minutes=2)
    _say(memory, "Ela procurou o gato pela casa toda", speaker="Bruno", minutes=3)
    _no_semantic_help(memory)

    result = _ask(read_ctx, memory, "O que ela pesquisando?")
    assert set(_found(result)) == {pesquisei, pesquisa}
    assert _keywords(read_ctx, result.events) == pytest.approx({pesquisei: 1.0, pesquisa: 1.0}, abs=1e-5)
    # A question word no message says ("andou") weighs in the floor of the scale: the matches
    # still score alike, below 1.
    result = _ask(read_ctx, memory, "O que ela andou pesquisando?")
    keywords = _keywords(read_ctx, result.events)
    assert set(keywords) == {pesquisei, pesquisa}
    assert keywords[pesquisei] == pytest.approx(keywords[pesquisa], abs=1e-9)
    assert 0.5 < keywords[pesquisei] < 1.0
    # A word written without its accents finds the accented one: both are folded before stemming.
    assert _found(_ask(read_ctx, memory, "adocao")) == [pesquisei]


def test_accents_do_not_matter_on_either_side(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    paulo = _say(memory, "Ana mora em São Paulo desde 2019", speaker="Ana")
    goiania = _say(memory, "Tomamos um café em Goiânia", speaker="Bruno", minutes=1)
    agata = _say(memory, "A Agata voltou de viagem", speaker="Bruno", minutes=2)
    _say(memory, "Bruno mora em Recife", speaker="Bruno", minutes=3)
    _no_semantic_help(memory)

    # The planner drops "sao" ("são" is also "are"): "paulo" finds it, as "Paulo" is written.
    assert _found(_ask(read_ctx, memory, "sao paulo")) == [paulo]
    assert _found(_ask(read_ctx, memory, "cafe em goiania")) == [goiania]
    assert _found(_ask(read_ctx, memory, "Café em Goiânia?")) == [goiania]
    assert _found(_ask(read_ctx, memory, "Ágata")) == [agata]


def test_stop_words_alone_never_make_a_message_relevant(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    plan = _say(memory, "What is the plan for the trip?", speaker="Melanie")
    wanted = _say(memory, "The trip is what she did want", minutes=1)
    _say(memory, "Is that the one she did pick?", speaker="Melanie", minutes=2)
    viagem = _say(memory, "O plano de viagem para o Recife é o que ela quer", speaker="Ana", minutes=3)
    _no_semantic_help(memory)

    # The planner keeps "is" (two letters, not one of its stop words): the English stemmer drops it.
    assert plan_retrieval("What is the?", max_facts=50).words == ("is",)
    assert _ask(read_ctx, memory, "What is the?").events == []
    # Every message is a candidate when the bar is 0: each with a keyword signal of 0.
    everything = _ask(read_ctx, memory, "What is the?", min_similarity=0.0).events
    assert len(everything) == 4
    assert all(_keyword(read_ctx, event) == pytest.approx(0.0, abs=1e-5) for event in everything)
    # Stop words of either language, each in a message of that language, and one the other drops.
    stop_words = ["what", "is", "the", "she", "did", "that", "o", "de", "para", "que", "ela", "é"]
    with read_ctx.sessions() as session:
        alone = relevant_conversations(session, memory.agent_id, ASKED, stop_words, read_ctx.base_config, now=NOW)
        with_trip = relevant_conversations(
            session, memory.agent_id, ASKED, [*stop_words, "trip"], read_ctx.base_config, now=NOW
        )
        with_viagem = relevant_conversations(
            session, memory.agent_id, ASKED, [*stop_words, "viagem"], read_ctx.base_config, now=NOW
        )
    assert alone == []
    # The stop words do not water the match of a real word down: it scores as it would alone.
    assert {event.event_id for event in with_trip} == {plan, wanted}
    assert all(_keyword(read_ctx, event) == pytest.approx(1.0, abs=1e-5) for event in with_trip)
    assert [event.event_id for event in with_viagem] == [viagem]


def test_the_rarer_word_weighs_more(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    # The message with the rare word is the oldest and its word comes last in the question: neither
    # recency nor word order can put it first, only its weight.
    vertix = _say(memory, "We docked at Vertix on the first night", speaker="Melanie")
    harbour = [_say(memory, f"The harbour was calm, day {day}", minutes=10 + day) for day in range(3)]
    for number in range(4):
        _say(memory, f"Nothing much happened, note {number}", speaker="Melanie", minutes=20 + number)
    _no_semantic_help(memory)

    result = _ask(read_ctx, memory, "How was the harbour in Vertix?")
    assert _found(result) == [vertix, *reversed(harbour)]
    # 8 messages: "vertix" in 1, "harbour" in 3; the best match scores 1.
    ratio = _idf(8, 3) / _idf(8, 1)
    assert ratio < 1.0
    assert _keywords(read_ctx, result.events) == pytest.approx({vertix: 1.0, **dict.fromkeys(harbour, ratio)}, abs=1e-5)


def test_a_word_whose_stems_repeat_an_earlier_words_is_counted_once(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    # "pesquisa" and "pesquisas" have the same stems in both languages: one word, not two.
    pesquisa = _say(memory, "A pesquisa acabou", speaker="Ana")
    vertix = _say(memory, "A Vertix ligou", speaker="Bruno", minutes=1)
    _say(memory, "Nada de novo", speaker="Ana", minutes=2)
    _no_semantic_help(memory)

    def keywords(words: list[str]) -> dict[str, float]:
        config = read_ctx.base_config
        with read_ctx.sessions() as session:
            events = relevant_conversations(session, memory.agent_id, ASKED, words, config, now=NOW)
        return _keywords(read_ctx, events)

    # Each word in one message of three: the two messages weigh the same.
    alike = pytest.approx({pesquisa: 1.0, vertix: 1.0}, abs=1e-5)
    assert keywords(["pesquisa", "vertix"]) == alike
    # Counted twice, "pesquisa" would make its message twice as good as the other (keyword 0.5).
    assert keywords(["pesquisa", "pesquisas", "vertix"]) == alike
    assert keywords(["pesquisas", "vertix", "pesquisa"]) == alike


def test_another_agents_messages_with_the_same_words_are_never_returned(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    mine = _say(memory, "We docked at Vertix on the first night", speaker="Melanie")
    my_others = [_say(memory, f"The harbour was calm, day {day}", minutes=1 + day) for day in range(3)]
    other = replace(memory, agent_id=memory.agent_id + "-other")
    # Newer, and matching more of the question: theirs would rank first if they were searched.
    theirs = [
        _say(other, f"Vertix harbour: we docked at Vertix harbour again, night {night}", minutes=60 + night)
        for night in range(20)
    ]
    _no_semantic_help(memory)
    _no_semantic_help(other)

    question = "Where did we dock in Vertix harbour?"
    result = _ask(read_ctx, memory, question)
    assert _found(result) == [mine]
    # Even when every message of the agent qualifies, none of the other agent's comes along.
    everything = _ask(read_ctx, memory, question, min_similarity=0.0)
    assert set(_found(everything)) == {mine, *my_others}
    # Nor do they count in this agent's word weights: over its own 4 messages, "dock" and "vertix"
    # are in 1 (the best match, 1.0), "harbour" in 3 (theirs would put "vertix" in 21 of 24).
    harbour = _idf(4, 3) / (2 * _idf(4, 1))
    assert _keywords(read_ctx, everything.events) == pytest.approx(
        {mine: 1.0, **dict.fromkeys(my_others, harbour)}, abs=1e-5
    )
    # And the other agent reads its own.
    found = _found(_ask(read_ctx, other, question))
    assert found
    assert set(found) <= set(theirs)

"""The message signal (memory_core.read.message_signal): facts said in a message that answers the query."""

from __future__ import annotations

from datetime import timedelta

from memory_core.read.context import ReadContext
from memory_core.read.pipeline import retrieve
from tests.memory_core.read.conftest import NOW, MemoryBuilder

SAID = NOW - timedelta(days=400)  # old: recency adds nothing
QUERY = "When did Caroline go to that meeting about adoption agencies?"


def _conversation(memory: MemoryBuilder) -> tuple[str, str, str]:
    """A message whose fact shares no word with QUERY, among unrelated messages with facts of their own."""
    caroline = memory.entity("Caroline")
    message = memory.event(
        "I went to the meeting about adopting and the agencies were so helpful!",
        speaker="Caroline",
        occurred_at=SAID,
        message_id="D1:3",
    )
    # The fact keeps none of the query's words: only its message matches.
    fact = memory.fact(
        "Caroline found the people there very helpful", caroline, source_event_id=message, valid_from=SAID
    )
    others = []
    for number in range(8):
        other = memory.event(f"Cooked pasta batch {number} tonight.", speaker="Caroline", occurred_at=SAID)
        others.append(
            memory.fact(f"Caroline cooked pasta batch {number}", caroline, source_event_id=other, valid_from=SAID)
        )
    memory.refresh_fact_counts()
    return message, fact, others[0]


def test_a_fact_is_found_through_the_message_it_was_said_in(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    message, fact, pasta = _conversation(memory)

    result = retrieve(read_ctx, agent_id=memory.agent_id, query=QUERY, verbose=True)

    facts = {item.fact_id: item for item in result.facts}
    assert fact in facts, "the fact of the matching message must be returned"
    found = facts[fact]
    assert found.scores["message"] > 0.5
    assert found.source_event_id == message
    assert found.message_id == "D1:3"
    # It outranks the facts of messages that do not answer.
    assert result.facts[0].fact_id == fact
    assert pasta not in facts or facts[pasta].score < found.score


def test_without_a_matching_message_the_fact_has_no_message_signal(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    _, fact, _ = _conversation(memory)

    result = retrieve(read_ctx, agent_id=memory.agent_id, query="What pasta did Caroline cook?")

    scores = {item.fact_id: item.scores for item in result.facts}
    # The pasta messages match; the adoption message scores low for this query, and its fact with it.
    assert scores.get(fact, {"message": 0.0})["message"] < 0.3
    assert all(item.fact_id != fact for item in result.facts[:3])


def test_the_message_signal_respects_the_fact_filters(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    message, fact, _ = _conversation(memory)
    # A fact of the matching message that was replaced, and one below the confidence floor.
    caroline = "person:caroline"
    old = memory.fact(
        "Caroline went to the adoption meeting alone",
        caroline,
        source_event_id=message,
        valid_from=SAID,
        valid_to=SAID + timedelta(days=1),
    )
    doubtful = memory.fact(
        "Caroline maybe adopted a cat", caroline, source_event_id=message, valid_from=SAID, confidence=0.05
    )

    result = retrieve(read_ctx, agent_id=memory.agent_id, query=QUERY)

    returned = {item.fact_id for item in result.facts}
    assert fact in returned
    assert old not in returned
    assert doubtful not in returned


def test_another_agents_facts_never_come_through_a_message(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    _conversation(memory)
    other = MemoryBuilder(memory.engine, memory.embedder, memory.agent_id + "-other")
    other_message, other_fact, _ = _conversation(other)

    result = retrieve(read_ctx, agent_id=memory.agent_id, query=QUERY)

    assert other_fact not in {item.fact_id for item in result.facts}
    assert other_message not in {item.event_id for item in result.events}


def test_the_context_does_not_repeat_a_fact_its_message_shows(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    _conversation(memory)

    result = retrieve(read_ctx, agent_id=memory.agent_id, query=QUERY)

    assert "Caroline: I went to the meeting about adopting" in result.context
    assert "Caroline found the people there very helpful" not in result.context
    # The API still lists the fact: only the context string leaves it out.
    assert any(item.fact_text == "Caroline found the people there very helpful" for item in result.facts)

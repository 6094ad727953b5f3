"""The query without its names (memory_core.read.query_names), and what relevant conversations do with it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memory_core.read.context import ReadContext
from memory_core.read.pipeline import retrieve
from memory_core.read.query_names import without_names
from tests.memory_core.read.conftest import NOW, MemoryBuilder


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did Caroline research?", "What did research?"),
        ("What is Caroline's identity?", "What is identity?"),
        ("Onde a Ana Maria mora?", "Onde a mora?"),
        ("When did Melanie go camping in June?", "When did go camping in June?"),  # a month is no name
        ("What LGBTQ+ events has Caroline attended?", "What LGBTQ+ events has attended?"),  # acronyms stay
        ("Which book did Caroline recommend to Melanie, Becoming Nicole?", "Which book did recommend to?"),
        ("What did you do last week?", None),  # no name: the query's own embedding serves
        ("Caroline?", None),  # nothing left
    ],
)
def test_names_are_left_out_of_the_query(query: str, expected: str | None) -> None:
    assert without_names(query) == expected


def test_a_message_that_only_addresses_the_named_person_does_not_outrank_the_answer(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    said = NOW - timedelta(days=30)
    # Another session, another day: the greeting is not shown as the answer's reply.
    greeting = memory.event(
        "Caroline! So glad to hear from you, Caroline.", speaker="Melanie", session_id="s1", occurred_at=said
    )
    answer = memory.event(
        "Researching adoption agencies, it has been a dream.",
        speaker="Caroline",
        session_id="s2",
        occurred_at=said + timedelta(days=2),
    )
    for number in range(8):
        memory.event(
            f"Talking about the weather, part {number}.", speaker="Caroline", session_id="s3", occurred_at=said
        )
    query = "What was Caroline researching?"

    def scores(**overrides: object) -> dict[str, float]:
        result = retrieve(read_ctx, agent_id=memory.agent_id, query=query, config_overrides=overrides)
        return {event.event_id: event.score for event in result.events}

    with_names = scores(event_query_unnamed_share=0.0, min_score=0.0)
    without = scores(min_score=0.0)
    # The name in the query's embedding made the greeting look relevant; compared with the query
    # without names (the default), it weighs less and the answer comes first.
    assert with_names.get(greeting, 0.0) > without.get(greeting, 0.0)
    assert next(iter(without)) == answer
    assert without[answer] > without.get(greeting, 0.0)

"""A greeting with a name, end to end: no "Hi, Sam is Sam." outranking what Sam said about their cat."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.workers.conftest import WritePath

SAID = datetime(2025, 3, 10, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("greeting", "pet", "query", "expected"),
    [
        ("Hi, I'm Sam.", "I have a cat named Luna.", "What pets does Sam have?", "Sam has a cat named Luna."),
        (
            "Oi, eu sou o Sam.",
            "Eu tenho uma gata chamada Luna.",
            "Que bichos o Sam tem?",
            "Sam tem uma gata chamada Luna.",
        ),
    ],
)
def test_the_introduction_stores_no_fact_and_the_pet_ranks_first(
    write_path: WritePath, greeting: str, pet: str, query: str, expected: str
) -> None:
    events = [
        write_path.post(greeting, "Sam", occurred_at=SAID.isoformat()),
        write_path.post(pet, "Sam", occurred_at=(SAID + timedelta(minutes=1)).isoformat()),
    ]
    assert set(write_path.wait(events).values()) == {"done"}
    texts = [fact["fact_text"] for fact in write_path.memory.all_facts(write_path.agent_id)]
    assert texts == [expected]
    answer = write_path.client.post(f"/v1/agents/{write_path.agent_id}/retrieve", json={"query": query})
    assert answer.status_code == 200
    assert [fact["fact_text"] for fact in answer.json()["facts"]][:1] == [expected]

"""Batched reconciliation against a local OpenAI-compatible server: each decision checked on its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from memory_core.cognition import Skill, SkillOutputError
from memory_core.cognition.llm import BatchReconcileSkill
from memory_core.cognition.models import BatchReconcileInput, ExistingFact, ReconcileInput
from memory_core.providers import OpenAIChatProvider
from tests.support.openai_stub import OpenAIStub, StubReply

USAGE = {"prompt_tokens": 600, "completion_tokens": 90, "total_tokens": 690}


def new_fact(name: str, text: str, existing_ids: list[str]) -> ReconcileInput:
    return ReconcileInput(
        entity_key=f"person:{name.lower()}",
        entity_name=name,
        new_text=text,
        new_attribute_key="location.residence",
        new_valid_from=datetime(2025, 6, 15, 12, 0, tzinfo=UTC),
        existing=[
            ExistingFact(
                fact_id=fact_id,
                text=f"{name} lives in {fact_id}",
                attribute_key="location.residence",
                valid_from=datetime(2023, 1, 10, tzinfo=UTC),
                similarity=0.7,
            )
            for fact_id in existing_ids
        ],
    )


BATCH = BatchReconcileInput(
    items=[
        new_fact("Ana", "Ana lives in Porto", ["fact-lisbon"]),
        new_fact("Bea", "Bea lives in Faro", ["fact-braga"]),
        new_fact("Caio", "Caio lives in Evora", ["fact-tomar"]),
        new_fact("Duda", "Duda lives in Leiria", ["fact-beja"]),
    ]
)


def test_each_fact_is_rendered_with_its_own_existing_facts_under_its_number(
    stub: OpenAIStub, provider: OpenAIChatProvider
) -> None:
    decisions = [{"index": n, "action": "ADD", "target_fact_id": None, "reason": "new"} for n in range(1, 5)]
    stub.enqueue_chat(StubReply.text(json.dumps({"decisions": decisions}), usage=USAGE))
    skill = BatchReconcileSkill(provider)
    assert isinstance(skill, Skill)

    outcome = skill.run(BATCH)

    assert outcome.output.errors == [None] * 4
    assert [result.action for result in outcome.output.results if result] == ["ADD"] * 4
    assert outcome.usage.input_tokens == 600
    user = stub.chat_requests[0].body["messages"][1]["content"]
    sections = user.split("### Fact ")[1:]
    assert [section.split("\n", 1)[0] for section in sections] == ["1", "2", "3", "4"]
    assert "fact-lisbon" in sections[0]
    assert "fact-braga" not in sections[0]
    assert "Entity: Duda" in sections[3]
    assert "fact-beja" in sections[3]


def test_an_unusable_decision_costs_only_its_fact(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    decisions = [
        {"index": 1, "action": "UPDATE", "target_fact_id": "fact-lisbon", "reason": "moved"},
        # A target listed under another number: not this fact's to change.
        {"index": 2, "action": "UPDATE", "target_fact_id": "fact-lisbon", "reason": "moved"},
        {"index": 3, "action": "SHRUG", "target_fact_id": None, "reason": "?"},
        {"index": 9, "action": "ADD", "target_fact_id": None, "reason": "no such fact"},
        {"index": 4, "action": "ADD", "target_fact_id": "fact-beja", "reason": "new"},
        {"index": 4, "action": "ADD", "target_fact_id": None, "reason": "again"},
    ]
    stub.enqueue_chat(StubReply.text(json.dumps({"decisions": decisions}), usage=USAGE))

    output = BatchReconcileSkill(provider).run(BATCH).output

    first = output.results[0]
    assert first is not None
    assert (first.action, first.target_fact_id) == ("UPDATE", "fact-lisbon")
    assert output.results[1:] == [None, None, None]
    assert output.errors[1] == "targets unknown fact 'fact-lisbon'"
    assert output.errors[2] is not None
    assert output.errors[2].startswith("unusable decision")
    assert output.errors[3] == "decided more than once"
    assert output.shares[0] > 0
    assert output.shares[1:] == [0, 0, 0]


def test_an_answer_without_decisions_raises(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(StubReply.text("I would update the first one.", usage=USAGE))
    with pytest.raises(SkillOutputError):
        BatchReconcileSkill(provider).run(BATCH)

"""LLM reconciliation (ADD/UPDATE/NOOP/DELETE) against a local OpenAI-compatible server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_core.cognition import Skill, SkillOutputError
from memory_core.cognition.llm import ReconcileSkill
from memory_core.cognition.models import ExistingFact, ReconcileInput
from memory_core.providers import OpenAIChatProvider, RetryableProviderError, TokenUsage
from tests.support.openai_stub import OpenAIStub, StubReply

USAGE = {"prompt_tokens": 320, "completion_tokens": 30, "total_tokens": 350}


def ricardo(existing: list[ExistingFact] | None = None) -> ReconcileInput:
    return ReconcileInput(
        entity_key="person:ricardo_gomes",
        entity_name="Ricardo Gomes",
        new_text="Ricardo Gomes se mudou para Austin, Texas",
        new_attribute_key="location.residence",
        new_valid_from=datetime(2025, 6, 15, 12, 0, tzinfo=UTC),
        existing=existing
        if existing is not None
        else [
            ExistingFact(
                fact_id="fact-sp",
                text="Ricardo Gomes mora em São Paulo",
                attribute_key="location.residence",
                valid_from=datetime(2023, 1, 10, 9, 0, tzinfo=UTC),
                similarity=0.72,
            ),
            ExistingFact(
                fact_id="fact-jazz",
                text="Ricardo Gomes gosta de jazz",
                valid_from=datetime(2024, 3, 2, tzinfo=UTC),
                similarity=0.51,
            ),
        ],
    )


def test_reconcile_parses_an_update_and_sends_ids_dates_and_similarities(
    stub: OpenAIStub, provider: OpenAIChatProvider
) -> None:
    stub.enqueue_chat(
        StubReply.text('{"action": "UPDATE", "target_fact_id": "fact-sp", "reason": "He moved."}', usage=USAGE)
    )
    skill = ReconcileSkill(provider)

    outcome = skill.run(ricardo())

    assert isinstance(skill, Skill)
    assert skill.name == "reconcile"
    assert outcome.output.action == "UPDATE"
    assert outcome.output.target_fact_id == "fact-sp"
    assert outcome.output.reason == "He moved."
    assert outcome.usage == TokenUsage(input_tokens=320, output_tokens=30, total_tokens=350, calls=1, model="gpt-stub")
    [request] = stub.chat_requests
    assert request.body["response_format"]["type"] == "json_schema"
    assert request.body["response_format"]["json_schema"]["strict"] is True
    user = request.body["messages"][1]["content"]
    assert (
        "NEW fact (since 2025-06-15 12:00 UTC): Ricardo Gomes se mudou para Austin, Texas [location.residence]"
    ) in user
    assert (
        "- id fact-sp | since 2023-01-10 09:00 UTC | similarity 0.72 | Ricardo Gomes mora em São Paulo "
        "[location.residence]"
    ) in user
    assert "id fact-jazz" in user


def test_reconcile_add_drops_any_target(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat('{"action": "ADD", "target_fact_id": "fact-sp", "reason": "Unrelated."}')

    output = ReconcileSkill(provider).run(ricardo()).output

    assert (output.action, output.target_fact_id) == ("ADD", None)


def test_reconcile_unknown_target_is_an_output_error(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(StubReply.text('{"action": "UPDATE", "target_fact_id": "fact-999", "reason": "x"}', usage=USAGE))

    with pytest.raises(SkillOutputError) as caught:
        ReconcileSkill(provider).run(ricardo())

    assert caught.value.skill == "reconcile"
    assert "fact-999" in caught.value.message
    assert "fact-999" in caught.value.raw_text
    assert caught.value.usage.total_tokens == 350


def test_reconcile_missing_target_is_an_output_error(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat('{"action": "NOOP", "reason": "Known."}')

    with pytest.raises(SkillOutputError, match="names no target"):
        ReconcileSkill(provider).run(ricardo())


def test_reconcile_invalid_action_is_an_output_error(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat('{"action": "MERGE", "target_fact_id": "fact-sp"}')

    with pytest.raises(SkillOutputError, match="ReconcileOutput schema"):
        ReconcileSkill(provider).run(ricardo())


def test_reconcile_without_existing_facts_adds_without_a_call(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    outcome = ReconcileSkill(provider).run(ricardo(existing=[]))

    assert outcome.output.action == "ADD"
    assert outcome.usage.is_zero
    assert stub.call_count == 0


def test_reconcile_rate_limit_propagates(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(StubReply.error(429, headers={"Retry-After": "5"}))

    with pytest.raises(RetryableProviderError) as caught:
        ReconcileSkill(provider).run(ricardo())

    assert caught.value.retry_after_s == 5

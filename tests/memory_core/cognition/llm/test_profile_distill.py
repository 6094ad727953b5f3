"""LLM profile and distill skills against a local OpenAI-compatible server, with their offline fallbacks."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from memory_core.cognition.llm.distill import DistillSkill
from memory_core.cognition.llm.profile import ProfileSkill
from memory_core.cognition.maintenance_models import DistillInput, FactLine, ProfileInput
from memory_core.cognition.offline.distill import OfflineDistillSkill
from memory_core.cognition.offline.profile import OfflineProfileSkill
from memory_core.cognition.skill import FallbackSkill
from memory_core.providers import OpenAIChatProvider
from tests.support.openai_stub import OpenAIStub

FACTS = [
    FactLine(
        fact_id="f1", text="Ana é enfermeira", attribute_key="work.role", valid_from=datetime(2024, 1, 5, tzinfo=UTC)
    ),
    FactLine(fact_id="f2", text="Ana mora em Recife", attribute_key="location.residence"),
]
MEETUPS = [
    FactLine(fact_id=f"m{i}", text=f"Rafael went to a {topic} meetup", valid_from=datetime(2024, i, 5, tzinfo=UTC))
    for i, topic in ((3, "Python"), (4, "data"), (5, "Rust"))
]


def test_profile_skill_sends_the_facts_and_returns_the_profile(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(json.dumps({"profile_text": "  Ana é enfermeira e mora em Recife.  "}))
    skill = ProfileSkill(provider)

    outcome = skill.run(ProfileInput(entity_name="Ana", entity_type="person", facts=FACTS, previous_profile="Ana."))

    assert skill.name == "build_profile"
    assert outcome.output.profile_text == "Ana é enfermeira e mora em Recife."
    assert outcome.usage.total_tokens > 0
    [request] = stub.chat_requests
    assert request.body["response_format"]["type"] == "json_schema"
    assert request.body["response_format"]["json_schema"]["strict"] is True
    user = request.body["messages"][1]["content"]
    assert "Ana (person)" in user
    assert "- [2024-01-05] Ana é enfermeira (work.role)" in user
    assert "<previous_profile>\nAna.\n</previous_profile>" in user


def test_profile_falls_back_to_rules_on_invalid_json_or_an_empty_profile(
    stub: OpenAIStub, provider: OpenAIChatProvider
) -> None:
    stub.enqueue_chat("Sure! Ana is a nurse.", json.dumps({"profile_text": "   "}))
    skill = FallbackSkill(ProfileSkill(provider), OfflineProfileSkill())
    profile_input = ProfileInput(entity_name="Ana", entity_type="person", facts=FACTS)

    for _ in range(2):
        outcome = skill.run(profile_input)
        assert outcome.used_fallback
        assert outcome.error is not None
        assert outcome.error.startswith("build_profile: ")
        assert outcome.output.profile_text.startswith("Ana (person)\n")
        assert "Ana mora em Recife." in outcome.output.profile_text
        assert outcome.usage.total_tokens > 0
    assert len(stub.chat_requests) == 2


def test_distill_skill_keeps_only_known_fact_ids(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    answer = {
        "statements": [
            {"text": " Rafael attends tech meetups  monthly ", "source_fact_ids": ["m3", "m4", "invented"]},
            {"text": "   ", "source_fact_ids": ["m5"]},
        ]
    }
    stub.enqueue_chat(json.dumps(answer))

    outcome = DistillSkill(provider).run(DistillInput(entity_name="Rafael", facts=MEETUPS))

    [statement] = outcome.output.statements
    assert statement.text == "Rafael attends tech meetups monthly"
    assert statement.source_fact_ids == ["m3", "m4"]
    user = stub.chat_requests[0].body["messages"][1]["content"]
    assert "- id=m3 [2024-03-05] Rafael went to a Python meetup" in user


def test_distill_falls_back_to_rules_on_invalid_json(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat('{"statements": [{"text": "unterminated')
    skill = FallbackSkill(DistillSkill(provider), OfflineDistillSkill())

    outcome = skill.run(DistillInput(entity_name="Rafael", facts=MEETUPS))

    assert outcome.used_fallback
    assert outcome.error is not None
    assert "not valid JSON" in outcome.error
    [statement] = outcome.output.statements
    assert statement.text == "Rafael went to a meetup (3x, 2024-03-05 - 2024-05-05)"
    assert sorted(statement.source_fact_ids) == ["m3", "m4", "m5"]

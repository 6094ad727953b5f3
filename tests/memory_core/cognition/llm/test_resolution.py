"""LLM disambiguation among the top candidates, against a local OpenAI-compatible server."""

from __future__ import annotations

import pytest

from memory_core.cognition import Skill, SkillOutputError
from memory_core.cognition.llm import DisambiguationSkill
from memory_core.cognition.models import DisambiguationInput, EntityCandidate
from memory_core.providers import OpenAIChatProvider, RetryableProviderError, TokenUsage
from tests.support.openai_stub import OpenAIStub, StubReply

USAGE = {"prompt_tokens": 260, "completion_tokens": 25, "total_tokens": 285}


def guili(**changes: object) -> DisambiguationInput:
    values: dict[str, object] = {
        "mention": "Guili",
        "mention_type": "person",
        "message": "Falei com o Guili sobre o projeto.",
        "candidates": [
            EntityCandidate(
                canonical_key="person:guilherme_maturana",
                display_name="Guilherme Maturana",
                entity_type="person",
                similarity=0.72,
                summary="Rafael's friend and project partner.",
            ),
            EntityCandidate(
                canonical_key="place:guildford", display_name="Guildford", entity_type="place", similarity=0.55
            ),
        ],
    }
    values.update(changes)
    return DisambiguationInput.model_validate(values)


def test_disambiguation_parses_the_chosen_key(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(
        StubReply.text('{"match": "person:guilherme_maturana", "reason": "Guili is his nickname."}', usage=USAGE)
    )
    skill = DisambiguationSkill(provider)

    outcome = skill.run(guili())

    assert isinstance(skill, Skill)
    assert skill.name == "disambiguate"
    assert outcome.output.match == "person:guilherme_maturana"
    assert outcome.output.reason == "Guili is his nickname."
    assert outcome.usage == TokenUsage(input_tokens=260, output_tokens=25, total_tokens=285, calls=1, model="gpt-stub")
    [request] = stub.chat_requests
    assert request.body["response_format"]["type"] == "json_schema"
    assert request.body["response_format"]["json_schema"]["strict"] is True
    user = request.body["messages"][1]["content"]
    assert 'Mention: "Guili" (person)' in user
    assert "key person:guilherme_maturana" in user
    assert "similarity 0.72" in user
    assert "Rafael's friend and project partner." in user


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"match": null, "reason": "A different person."}', None),
        ('{"match": "none", "reason": "A different person."}', None),
        ('{"match": "Guilherme Maturana", "reason": "Same person."}', "person:guilherme_maturana"),
    ],
)
def test_disambiguation_accepts_no_match_and_a_display_name(
    stub: OpenAIStub, provider: OpenAIChatProvider, answer: str, expected: str | None
) -> None:
    stub.enqueue_chat(answer)

    assert DisambiguationSkill(provider).run(guili()).output.match == expected


def test_disambiguation_unknown_candidate_is_an_output_error(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(StubReply.text('{"match": "person:someone_else", "reason": "?"}', usage=USAGE))

    with pytest.raises(SkillOutputError) as caught:
        DisambiguationSkill(provider).run(guili())

    assert caught.value.skill == "disambiguate"
    assert "person:someone_else" in caught.value.message
    assert "person:someone_else" in caught.value.raw_text
    assert caught.value.usage.total_tokens == 285


def test_disambiguation_without_candidates_makes_no_call(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    outcome = DisambiguationSkill(provider).run(guili(candidates=[]))

    assert outcome.output.match is None
    assert outcome.usage.is_zero
    assert stub.call_count == 0


def test_disambiguation_rate_limit_propagates(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(StubReply.error(429))

    with pytest.raises(RetryableProviderError):
        DisambiguationSkill(provider).run(guili())

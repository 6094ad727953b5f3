"""LLM emotion tagging against a local OpenAI-compatible server."""

from __future__ import annotations

import pytest

from memory_core.cognition import Skill, SkillOutputError
from memory_core.cognition.llm import EmotionSkill
from memory_core.cognition.models import EmotionInput, EmotionOutput
from memory_core.providers import OpenAIChatProvider, RetryableProviderError
from tests.support.openai_stub import OpenAIStub, StubReply


def test_emotion_parses_and_lower_cases_the_label(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat('{"emotion": " Excitement ", "intensity": 0.8, "energy": "high"}')
    skill = EmotionSkill(provider)

    outcome = skill.run(EmotionInput(text="Passei no mestrado!!!"))

    assert isinstance(skill, Skill)
    assert skill.name == "tag_emotion"
    assert outcome.output == EmotionOutput(emotion="excitement", intensity=0.8, energy="high")
    assert outcome.usage.total_tokens > 0
    [request] = stub.chat_requests
    assert request.body["response_format"]["type"] == "json_schema"
    assert request.body["response_format"]["json_schema"]["strict"] is True
    assert request.body["messages"][1]["content"] == "<message>\nPassei no mestrado!!!\n</message>"


def test_emotion_out_of_range_intensity_is_an_output_error(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat('{"emotion": "joy", "intensity": 7, "energy": "high"}')

    with pytest.raises(SkillOutputError) as caught:
        EmotionSkill(provider).run(EmotionInput(text="Yay"))

    assert caught.value.skill == "tag_emotion"
    assert caught.value.usage.total_tokens > 0


def test_emotion_rate_limit_propagates(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(StubReply.error(429))

    with pytest.raises(RetryableProviderError):
        EmotionSkill(provider).run(EmotionInput(text="ok"))

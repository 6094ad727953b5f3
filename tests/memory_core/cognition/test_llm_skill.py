"""LLMSkill plumbing against a local OpenAI-compatible server, through the real provider."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from memory_core.cognition import FallbackSkill, LLMSkill, Skill, SkillOutcome, SkillOutputError
from memory_core.providers import OpenAIChatProvider, RetryableProviderError, TokenUsage
from tests.support.openai_stub import OpenAIStub, StubReply

USAGE = {"prompt_tokens": 210, "completion_tokens": 18, "total_tokens": 228}
SPENT = TokenUsage(input_tokens=210, output_tokens=18, total_tokens=228, calls=1, model="gpt-stub")


class Residence(BaseModel):
    """Example output model: where the user lives and since when."""

    city: str
    since_year: int | None = None


class FirstCapitalisedWord:
    """Example offline counterpart: a deterministic rule, no tokens."""

    name = "extract_residence"

    def run(self, message: str, /) -> SkillOutcome[Residence]:
        words = [word.strip(".,") for word in message.split()[1:] if word[:1].isupper()]
        return SkillOutcome(output=Residence(city=words[0] if words else "unknown"))


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


def make_skill(stub: OpenAIStub) -> LLMSkill[str, Residence]:
    provider = OpenAIChatProvider(api_key="sk-test", model="gpt-stub", base_url=stub.base_url, timeout_s=5)
    return LLMSkill(
        name="extract_residence",
        system_prompt="Find where the user lives.",
        render_user=lambda message: f"Message: {message}",
        output_model=Residence,
        provider=provider,
        max_tokens=300,
    )


def test_valid_json_becomes_the_output_model_with_usage(stub: OpenAIStub) -> None:
    stub.enqueue_chat(StubReply.text('{"city": "Recife", "since_year": 2021}', usage=USAGE))
    skill = make_skill(stub)

    outcome = skill.run("I have lived in Recife since 2021.")

    assert isinstance(skill, Skill)
    assert outcome.output == Residence(city="Recife", since_year=2021)
    assert outcome.usage == SPENT
    assert not outcome.used_fallback
    assert outcome.error is None
    assert outcome.duration_ms > 0
    [request] = stub.chat_requests
    assert request.body["response_format"]["type"] == "json_schema"
    assert request.body["response_format"]["json_schema"]["strict"] is True
    assert request.body["temperature"] == 0
    assert request.body["max_tokens"] == 300
    system, user = request.body["messages"]
    assert system["role"] == "system"
    assert system["content"].startswith("Find where the user lives.")
    # The strict schema travels in response_format only: written into the prompt too, it would be paid twice.
    assert system["content"] == "Find where the user lives."
    assert request.body["response_format"]["json_schema"]["schema"]["properties"]["city"] == {"type": "string"}
    assert user == {"role": "user", "content": "Message: I have lived in Recife since 2021."}


@pytest.mark.parametrize(
    "answer",
    [
        '```json\n{"city": "Recife"}\n```',
        '```\n{"city": "Recife"}\n```',
        'Sure! Here is the JSON: {"city": "Recife"}',
    ],
)
def test_fenced_or_wrapped_json_is_accepted(stub: OpenAIStub, answer: str) -> None:
    stub.enqueue_chat(answer)

    assert make_skill(stub).run("I live in Recife.").output == Residence(city="Recife")


def test_invalid_json_raises_with_the_tokens_spent(stub: OpenAIStub) -> None:
    stub.enqueue_chat(StubReply.text("The user lives in Recife.", usage=USAGE))

    with pytest.raises(SkillOutputError) as caught:
        make_skill(stub).run("I live in Recife.")

    assert "not valid JSON" in str(caught.value)
    assert caught.value.skill == "extract_residence"
    assert caught.value.raw_text == "The user lives in Recife."
    assert caught.value.usage == SPENT


def test_json_not_matching_the_schema_raises_with_the_tokens_spent(stub: OpenAIStub) -> None:
    stub.enqueue_chat(StubReply.text('{"town": "Recife", "since_year": "long ago"}', usage=USAGE))

    with pytest.raises(SkillOutputError) as caught:
        make_skill(stub).run("I live in Recife.")

    message = str(caught.value)
    assert "does not match the Residence schema" in message
    assert "city" in message
    assert caught.value.usage == SPENT


def test_rate_limit_propagates_untouched_for_the_task_queue(stub: OpenAIStub) -> None:
    stub.enqueue_chat(StubReply.error(429, headers={"Retry-After": "7"}))

    with pytest.raises(RetryableProviderError) as caught:
        make_skill(stub).run("I live in Recife.")

    assert caught.value.retry_after_s == 7
    assert stub.call_count == 1


def test_fallback_skill_rescues_a_garbage_answer_and_keeps_the_cost(stub: OpenAIStub) -> None:
    stub.enqueue_chat(StubReply.text("no idea", usage=USAGE), '{"city": "Natal"}')
    skill = FallbackSkill(make_skill(stub), FirstCapitalisedWord())

    rescued = skill.run("I live in Recife.")
    normal = skill.run("I live in Natal.")

    assert rescued.output == Residence(city="Recife")
    assert rescued.used_fallback
    assert rescued.usage == SPENT
    assert rescued.error is not None
    assert rescued.error.startswith("extract_residence: answer is not valid JSON")
    assert normal.output == Residence(city="Natal")
    assert not normal.used_fallback


def test_fallback_skill_does_not_hide_provider_errors(stub: OpenAIStub) -> None:
    stub.enqueue_chat(StubReply.error(503))
    skill = FallbackSkill(make_skill(stub), FirstCapitalisedWord())

    with pytest.raises(RetryableProviderError):
        skill.run("I live in Recife.")


def test_skill_output_error_survives_pickling() -> None:
    error = SkillOutputError("answer is not valid JSON", skill="extract", raw_text="nope", usage=SPENT)

    restored = pickle.loads(pickle.dumps(error))

    assert (str(restored), restored.skill, restored.raw_text, restored.usage) == (
        "answer is not valid JSON",
        "extract",
        "nope",
        SPENT,
    )

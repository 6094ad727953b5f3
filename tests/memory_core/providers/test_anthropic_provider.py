"""The Anthropic provider through the real ``anthropic`` client against a local Messages API stub."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from memory_core.providers import (
    AnthropicChatProvider,
    LLMProvider,
    ProviderRequestError,
    RetryableProviderError,
    TokenUsage,
)
from memory_core.providers.anthropic_llm import JSON_ONLY_INSTRUCTION
from tests.support.anthropic_stub import AnthropicStub
from tests.support.openai_stub import StubReply

API_KEY = "sk-ant-test"


@pytest.fixture
def stub() -> Iterator[AnthropicStub]:
    with AnthropicStub(api_key=API_KEY) as server:
        yield server


def provider(stub: AnthropicStub, *, api_key: str = API_KEY, timeout_s: float = 5.0) -> AnthropicChatProvider:
    return AnthropicChatProvider(api_key=api_key, model="claude-stub", base_url=stub.base_url, timeout_s=timeout_s)


def test_system_messages_json_mode_fences_and_usage(stub: AnthropicStub) -> None:
    stub.enqueue_messages(
        StubReply.text('```json\n{"city": "Lisbon"}\n```', usage={"input_tokens": 120, "output_tokens": 15})
    )
    claude = provider(stub)

    result = claude.complete(
        [
            {"role": "system", "content": "You extract facts."},
            {"role": "user", "content": "I live in Lisbon."},
        ],
        response_format={"type": "json_object"},
        max_tokens=200,
    )

    assert isinstance(claude, LLMProvider)
    assert json.loads(result.text) == {"city": "Lisbon"}
    assert result.usage == TokenUsage(
        input_tokens=120, output_tokens=15, total_tokens=135, calls=1, model="claude-stub"
    )
    assert result.model == "claude-stub"
    [request] = stub.message_requests
    assert request.body["system"] == "You extract facts.\n\n" + JSON_ONLY_INSTRUCTION
    assert request.body["messages"] == [{"role": "user", "content": "I live in Lisbon."}]
    assert request.body["max_tokens"] == 200


def test_plain_answer_is_left_alone_and_default_max_tokens_is_sent(stub: AnthropicStub) -> None:
    stub.enqueue_messages("```python\nprint('hi')\n```")

    result = provider(stub).complete(
        [{"role": "user", "content": "Show code."}, {"role": "user", "content": "In Python."}]
    )

    assert result.text == "```python\nprint('hi')\n```"
    [request] = stub.message_requests
    assert "system" not in request.body
    assert request.body["max_tokens"] == 4096
    # Consecutive user turns are merged: the API wants roles to alternate.
    assert request.body["messages"] == [{"role": "user", "content": "Show code.\n\nIn Python."}]


def test_rate_limit_is_retryable_with_retry_after_and_one_request(stub: AnthropicStub) -> None:
    stub.enqueue_messages(StubReply.error(429, "Number of requests has exceeded your rate limit", {"retry-after": "3"}))

    with pytest.raises(RetryableProviderError) as caught:
        provider(stub).complete([{"role": "user", "content": "hi"}])

    assert caught.value.retry_after_s == 3
    assert caught.value.status_code == 429
    assert "exceeded your rate limit" in str(caught.value)
    assert stub.call_count == 1


@pytest.mark.parametrize("status", [500, 529])
def test_server_errors_and_overload_are_retryable(stub: AnthropicStub, status: int) -> None:
    stub.enqueue_messages(StubReply.error(status, "Overloaded"))

    with pytest.raises(RetryableProviderError) as caught:
        provider(stub).complete([{"role": "user", "content": "hi"}])

    assert caught.value.status_code == status
    assert stub.call_count == 1


def test_timeout_is_retryable(stub: AnthropicStub) -> None:
    stub.enqueue_messages(StubReply.slow(5.0))

    with pytest.raises(RetryableProviderError, match="timed out"):
        provider(stub, timeout_s=0.3).complete([{"role": "user", "content": "hi"}])

    assert stub.call_count == 1


def test_bad_key_is_a_request_error(stub: AnthropicStub) -> None:
    with pytest.raises(ProviderRequestError) as caught:
        provider(stub, api_key="sk-ant-wrong").complete([{"role": "user", "content": "hi"}])

    assert not isinstance(caught.value, RetryableProviderError)
    assert caught.value.status_code == 401


def test_missing_extra_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry makes "import anthropic" fail as if the package were absent.
    monkeypatch.setitem(sys.modules, "anthropic", None)

    with pytest.raises(ProviderRequestError, match=r"pip install 'arandu-service\[anthropic\]'"):
        AnthropicChatProvider(api_key=API_KEY, model="claude-stub")

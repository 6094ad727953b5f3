"""The OpenAI chat and embedding providers against a local OpenAI-compatible server (real HTTP)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from email.utils import formatdate

import pytest

from memory_core.providers import (
    OpenAIChatProvider,
    OpenAIEmbeddingProvider,
    ProviderRequestError,
    ProviderResponseError,
    RetryableProviderError,
    TokenUsage,
)
from tests.support.openai_stub import OpenAIStub, StubReply, stub_vector

API_KEY = "sk-test-key"
MESSAGES = [
    {"role": "system", "content": "Extract the city the user lives in as JSON."},
    {"role": "user", "content": "I moved to Rio de Janeiro last year."},
]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(api_key=API_KEY) as server:
        yield server


def chat(stub: OpenAIStub, *, timeout_s: float = 5.0, api_key: str = API_KEY) -> OpenAIChatProvider:
    return OpenAIChatProvider(api_key=api_key, model="gpt-stub", base_url=stub.base_url, timeout_s=timeout_s)


def embedder(
    stub: OpenAIStub, *, model: str = "text-embedding-3-small", dimensions: int = 1536
) -> OpenAIEmbeddingProvider:
    return OpenAIEmbeddingProvider(api_key=API_KEY, model=model, dimensions=dimensions, base_url=stub.base_url)


# -- chat ----------------------------------------------------------------------


def test_json_mode_is_sent_and_the_answer_comes_back_with_usage(stub: OpenAIStub) -> None:
    stub.enqueue_chat(
        StubReply.text(
            '{"city": "Rio de Janeiro"}', usage={"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40}
        )
    )

    result = chat(stub).complete(MESSAGES, response_format={"type": "json_object"}, max_tokens=64)

    assert json.loads(result.text) == {"city": "Rio de Janeiro"}
    assert result.usage == TokenUsage(input_tokens=31, output_tokens=9, total_tokens=40, calls=1, model="gpt-stub")
    assert result.model == "gpt-stub"
    [request] = stub.chat_requests
    assert request.body["response_format"] == {"type": "json_object"}
    assert request.body["messages"] == MESSAGES
    assert request.body["model"] == "gpt-stub"
    assert request.body["temperature"] == 0
    # A custom base_url means a compatible server, which understands max_tokens.
    assert request.body["max_tokens"] == 64
    assert "max_completion_tokens" not in request.body


def test_plain_text_request_sends_no_response_format(stub: OpenAIStub) -> None:
    stub.enqueue_chat("Rio de Janeiro")

    result = chat(stub).complete(MESSAGES, temperature=0.7)

    assert result.text == "Rio de Janeiro"
    assert result.usage.total_tokens > 0
    [request] = stub.chat_requests
    assert "response_format" not in request.body
    assert "max_tokens" not in request.body
    assert request.body["temperature"] == 0.7


def test_timeout_is_retryable_and_the_sdk_does_not_retry(stub: OpenAIStub) -> None:
    stub.enqueue_chat(StubReply.slow(5.0))
    started = time.perf_counter()

    with pytest.raises(RetryableProviderError) as caught:
        chat(stub, timeout_s=0.3).complete(MESSAGES)

    assert time.perf_counter() - started < 3.0
    assert "timed out" in str(caught.value)
    assert caught.value.retry_after_s is None
    assert stub.call_count == 1


def test_rate_limit_carries_retry_after_and_is_requested_once(stub: OpenAIStub) -> None:
    stub.enqueue_chat(StubReply.error(429, "Rate limit reached for gpt-stub", headers={"Retry-After": "7"}))

    with pytest.raises(RetryableProviderError) as caught:
        chat(stub).complete(MESSAGES)

    assert caught.value.retry_after_s == 7
    assert caught.value.status_code == 429
    assert "Rate limit reached" in str(caught.value)
    assert stub.call_count == 1


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
        ({"Retry-After": "0.5"}, 0.5),
    ],
)
def test_retry_after_header_variants(stub: OpenAIStub, headers: dict[str, str], expected: float) -> None:
    stub.enqueue_chat(StubReply.error(429, headers=headers))

    with pytest.raises(RetryableProviderError) as caught:
        chat(stub).complete(MESSAGES)

    assert caught.value.retry_after_s == pytest.approx(expected)


def test_retry_after_as_http_date(stub: OpenAIStub) -> None:
    stub.enqueue_chat(StubReply.error(503, headers={"Retry-After": formatdate(time.time() + 30, usegmt=True)}))

    with pytest.raises(RetryableProviderError) as caught:
        chat(stub).complete(MESSAGES)

    assert caught.value.retry_after_s is not None
    assert 25 <= caught.value.retry_after_s <= 30


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_are_retryable(stub: OpenAIStub, status: int) -> None:
    stub.enqueue_chat(StubReply.error(status, "The server had an error while processing your request."))

    with pytest.raises(RetryableProviderError) as caught:
        chat(stub).complete(MESSAGES)

    assert caught.value.status_code == status
    assert caught.value.retry_after_s is None
    assert stub.call_count == 1


def test_wrong_api_key_is_a_request_error(stub: OpenAIStub) -> None:
    with pytest.raises(ProviderRequestError) as caught:
        chat(stub, api_key="sk-wrong").complete(MESSAGES)

    assert not isinstance(caught.value, RetryableProviderError)
    assert caught.value.status_code == 401
    assert "401" in str(caught.value)
    assert "Incorrect API key" in str(caught.value)
    assert stub.call_count == 1


@pytest.mark.parametrize("status", [400, 403, 404])
def test_other_client_errors_are_request_errors(stub: OpenAIStub, status: int) -> None:
    stub.enqueue_chat(StubReply.error(status, f"problem {status}"))

    with pytest.raises(ProviderRequestError) as caught:
        chat(stub).complete(MESSAGES)

    assert caught.value.status_code == status
    assert f"problem {status}" in str(caught.value)


def test_unreachable_server_is_retryable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAIChatProvider(api_key=API_KEY, model="gpt-stub", base_url=f"http://127.0.0.1:{port}/v1")

    with pytest.raises(RetryableProviderError, match="could not connect"):
        provider.complete(MESSAGES)


def test_missing_key_without_base_url_is_refused_up_front() -> None:
    with pytest.raises(ProviderRequestError, match="OPENAI_API_KEY"):
        OpenAIChatProvider(api_key=None, model="gpt-4o-mini")


def test_self_hosted_server_works_without_a_key() -> None:
    with OpenAIStub() as open_server:
        open_server.enqueue_chat('{"ok": true}')
        provider = OpenAIChatProvider(api_key=None, model="llama3", base_url=open_server.base_url)

        assert json.loads(provider.complete(MESSAGES).text) == {"ok": True}


# -- embeddings ----------------------------------------------------------------


def test_embeddings_are_batched_and_returned_in_order(stub: OpenAIStub) -> None:
    texts = [f"memory number {index}" for index in range(600)]

    vectors = embedder(stub, dimensions=64).embed(texts)

    assert len(vectors) == 600
    assert vectors[0] == pytest.approx(stub_vector(texts[0], 64))
    assert vectors[599] == pytest.approx(stub_vector(texts[599], 64))
    batches = [request.body["input"] for request in stub.embedding_requests]
    assert [len(batch) for batch in batches] == [256, 256, 88]
    assert [text for batch in batches for text in batch] == texts
    first = stub.embedding_requests[0].body
    assert first["dimensions"] == 64
    assert first["encoding_format"] == "float"
    assert first["model"] == "text-embedding-3-small"


def test_base64_vectors_are_decoded(stub: OpenAIStub) -> None:
    provider = OpenAIEmbeddingProvider(
        api_key=API_KEY,
        model="text-embedding-3-small",
        dimensions=256,
        base_url=stub.base_url,
        encoding_format="base64",
    )

    vectors = provider.embed(["I live in Lisbon", "I work in Porto"])

    assert stub.embedding_requests[0].body["encoding_format"] == "base64"
    # float32 on the wire.
    assert vectors[0] == pytest.approx(stub_vector("I live in Lisbon", 256), abs=1e-6)
    assert vectors[1] == pytest.approx(stub_vector("I work in Porto", 256), abs=1e-6)


def test_a_server_answering_floats_to_a_base64_request_is_understood(stub: OpenAIStub) -> None:
    # Not every compatible server implements base64: floats are read whatever was asked, in index order.
    stub.enqueue_embeddings(
        StubReply(body={"data": [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1, 0.5]}]})
    )
    provider = OpenAIEmbeddingProvider(
        api_key=API_KEY, model="nomic-embed-text", dimensions=2, base_url=stub.base_url, encoding_format="base64"
    )

    assert provider.embed(["first", "second"]) == [[1.0, 0.5], [0.0, 1.0]]


@pytest.mark.parametrize(
    "body",
    [
        {"object": "list"},
        {"data": [{"index": 0, "embedding": "not base64 at all!"}]},
        {"data": [{"index": 0, "embedding": {"x": 1}}]},
        {"data": [{"index": 0, "embedding": ["a", "b"]}]},
        {"data": [{"index": 3, "embedding": [0.1, 0.2]}]},
        {"data": []},
    ],
)
def test_an_answer_that_is_not_the_embeddings_asked_for_is_a_response_error(stub: OpenAIStub, body: object) -> None:
    stub.enqueue_embeddings(StubReply(body=body))

    with pytest.raises(ProviderResponseError) as caught:
        embedder(stub, model="nomic-embed-text", dimensions=2).embed(["I live in Lisbon"])

    assert "nomic-embed-text" in str(caught.value)


def test_dimensions_are_only_requested_from_models_that_accept_them(stub: OpenAIStub) -> None:
    provider = embedder(stub, model="nomic-embed-text", dimensions=1536)

    vector = provider.embed_one("I live in Lisbon")

    assert vector is not None
    assert len(vector) == 1536
    assert "dimensions" not in stub.embedding_requests[0].body


def test_wrong_dimension_from_server_is_a_response_error(stub: OpenAIStub) -> None:
    stub.enqueue_embeddings(StubReply(dimensions=768))

    with pytest.raises(ProviderResponseError) as caught:
        embedder(stub, dimensions=1536).embed(["I live in Lisbon"])

    assert "768" in str(caught.value)
    assert "1536" in str(caught.value)


def test_blank_texts_get_zero_vectors_without_being_sent(stub: OpenAIStub) -> None:
    provider = embedder(stub, dimensions=32)

    vectors = provider.embed(["first", "   ", "", "second"])

    assert vectors[1] == [0.0] * 32
    assert vectors[2] == [0.0] * 32
    assert vectors[0] == pytest.approx(stub_vector("first", 32))
    assert vectors[3] == pytest.approx(stub_vector("second", 32))
    assert [request.body["input"] for request in stub.embedding_requests] == [["first", "second"]]
    assert provider.embed_one(" \n ") is None
    assert provider.embed([]) == []
    assert stub.call_count == 1


def test_embedding_rate_limit_maps_like_chat(stub: OpenAIStub) -> None:
    stub.enqueue_embeddings(StubReply.error(429, headers={"retry-after-ms": "2000"}))

    with pytest.raises(RetryableProviderError) as caught:
        embedder(stub).embed_one("hello")

    assert caught.value.retry_after_s == 2.0
    assert stub.call_count == 1


def test_concurrent_calls_share_one_provider(stub: OpenAIStub) -> None:
    from concurrent.futures import ThreadPoolExecutor

    stub.latency_s = 0.2
    provider = chat(stub)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: provider.complete(MESSAGES), range(8)))

    assert [result.text for result in results] == ["{}"] * 8
    assert stub.call_count == 8
    # Eight 0.2 s answers in parallel, not one after the other.
    assert time.perf_counter() - started < 1.2

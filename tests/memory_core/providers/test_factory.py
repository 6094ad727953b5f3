"""Settings in, configured providers out."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from memory_core.providers import (
    AnthropicChatProvider,
    HashingEmbedder,
    OpenAIChatProvider,
    OpenAIEmbeddingProvider,
    ProviderRequestError,
    build_embedding_provider,
    build_llm_provider,
)
from memory_core.settings import load_settings
from tests.support.anthropic_stub import AnthropicStub
from tests.support.openai_stub import OpenAIStub

MESSAGES = [{"role": "user", "content": "Where do I live?"}]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("ARANDU_", "OPENAI_")):
            monkeypatch.delenv(name)


@pytest.fixture
def openai_stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(api_key="sk-openai") as stub:
        yield stub


def test_fresh_checkout_runs_offline_with_the_hashing_embedder() -> None:
    settings = load_settings()

    assert build_llm_provider(settings) is None
    embedder = build_embedding_provider(settings)
    assert isinstance(embedder, HashingEmbedder)
    assert embedder.dimensions == 384
    vector = embedder.embed_one("I live in Porto")
    assert vector is not None
    assert len(vector) == 384


def test_hashing_embedder_follows_the_configured_dimension() -> None:
    embedder = build_embedding_provider(load_settings(embedding_dimensions=256))

    assert isinstance(embedder, HashingEmbedder)
    assert len(embedder.embed(["I live in Porto"])[0]) == 256


def test_openai_api_key_from_the_environment_configures_openai(
    monkeypatch: pytest.MonkeyPatch, openai_stub: OpenAIStub
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    settings = load_settings(llm_base_url=openai_stub.base_url, llm_timeout_s=5)

    llm = build_llm_provider(settings)
    embedder = build_embedding_provider(settings)

    assert isinstance(llm, OpenAIChatProvider)
    assert llm.model == "gpt-4o-mini"
    assert isinstance(embedder, OpenAIEmbeddingProvider)
    assert (embedder.model, embedder.dimensions) == ("text-embedding-3-small", 1536)
    # The stub answers 401 to any other key, so these prove the key and URL reached the client.
    assert llm.complete(MESSAGES).text == "{}"
    vector = embedder.embed_one("I live in Porto")
    assert vector is not None
    assert len(vector) == 1536
    assert openai_stub.embedding_requests[0].body["model"] == "text-embedding-3-small"


def test_self_hosted_openai_compatible_server_needs_no_key(openai_stub: OpenAIStub) -> None:
    with OpenAIStub() as local_server:
        local_server.enqueue_chat('{"city": "Porto"}')
        settings = load_settings(llm_provider="openai", llm_base_url=local_server.base_url, llm_model="llama3.1")

        llm = build_llm_provider(settings)

        assert isinstance(llm, OpenAIChatProvider)
        assert json.loads(llm.complete(MESSAGES).text) == {"city": "Porto"}
        assert local_server.chat_requests[0].body["model"] == "llama3.1"
        assert isinstance(build_embedding_provider(settings), HashingEmbedder)


def test_embedding_base_url_wins_over_the_llm_base_url(openai_stub: OpenAIStub) -> None:
    settings = load_settings(
        llm_provider="openai",
        llm_api_key="sk-openai",
        llm_base_url="http://127.0.0.1:9/v1",
        embedding_provider="openai",
        embedding_model="nomic-embed-text",
        embedding_dimensions=768,
        embedding_base_url=openai_stub.base_url,
    )
    openai_stub.default_dimensions = 768

    embedder = build_embedding_provider(settings)

    assert embedder.embed(["I live in Porto"])[0] != [0.0] * 768
    assert openai_stub.embedding_requests[0].body["model"] == "nomic-embed-text"


def test_anthropic_llm_with_hashing_embeddings() -> None:
    with AnthropicStub(api_key="sk-ant") as stub:
        stub.enqueue_messages('{"city": "Porto"}')
        settings = load_settings(llm_provider="anthropic", llm_api_key="sk-ant", llm_base_url=stub.base_url)

        llm = build_llm_provider(settings)

        assert isinstance(llm, AnthropicChatProvider)
        assert llm.model == "claude-sonnet-4-20250514"
        assert json.loads(llm.complete(MESSAGES).text) == {"city": "Porto"}
        assert isinstance(build_embedding_provider(settings), HashingEmbedder)


def test_openai_embeddings_beside_anthropic_use_the_openai_key(
    monkeypatch: pytest.MonkeyPatch, openai_stub: OpenAIStub
) -> None:
    settings = load_settings(
        llm_provider="anthropic",
        llm_api_key="sk-ant",
        embedding_provider="openai",
        embedding_base_url=openai_stub.base_url,
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")

    embedder = build_embedding_provider(settings)

    # The Anthropic key would be refused by the stub with a 401.
    assert len(embedder.embed(["I live in Porto"])[0]) == 1536


def test_openai_embeddings_beside_anthropic_without_openai_key_are_refused() -> None:
    settings = load_settings(llm_provider="anthropic", llm_api_key="sk-ant", embedding_provider="openai")

    with pytest.raises(ProviderRequestError, match="OPENAI_API_KEY"):
        build_embedding_provider(settings)


def test_local_embedder_with_another_dimension_is_refused_before_loading() -> None:
    settings = load_settings(embedding_provider="local", embedding_dimensions=512)

    with pytest.raises(ProviderRequestError) as caught:
        build_embedding_provider(settings)

    assert "ARANDU_EMBEDDING_DIMENSIONS=512" in str(caught.value)
    assert "384" in str(caught.value)

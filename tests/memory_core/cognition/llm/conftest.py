"""A local OpenAI-compatible server and the real provider pointed at it (real HTTP, no mocks)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memory_core.providers import OpenAIChatProvider
from tests.support.openai_stub import OpenAIStub


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    """A running OpenAI stub, stopped after the test."""
    with OpenAIStub() as server:
        yield server


@pytest.fixture
def provider(stub: OpenAIStub) -> OpenAIChatProvider:
    """The production OpenAI provider talking to the stub."""
    return OpenAIChatProvider(api_key="sk-test", model="gpt-stub", base_url=stub.base_url, timeout_s=10)

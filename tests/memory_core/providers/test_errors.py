"""Error classification helpers shared by every provider."""

from __future__ import annotations

import pickle
from email.utils import formatdate

import pytest

from memory_core.providers import (
    ProviderRequestError,
    RetryableProviderError,
    TokenUsage,
    parse_retry_after,
    strip_code_fences,
)
from memory_core.providers.errors import is_retryable_status

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after-ms": "350"}, 0.35),
        ({"retry-after-ms": "garbage", "retry-after": "2"}, 2.0),
        ({"retry-after": formatdate(NOW + 42, usegmt=True)}, 42.0),
        ({"retry-after": formatdate(NOW - 42, usegmt=True)}, 0.0),
        ({"retry-after": "-5"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str] | None, expected: float | None) -> None:
    assert parse_retry_after(headers, now=lambda: NOW) == expected


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(400, False), (401, False), (404, False), (408, True), (429, True), (500, True), (529, True)],
)
def test_retryable_statuses(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable


def test_errors_survive_pickling_with_their_details() -> None:
    # Celery pickles exceptions when it records a retry or a failure.
    error = RetryableProviderError("openai returned HTTP 429", provider="openai", status_code=429, retry_after_s=7.0)

    restored = pickle.loads(pickle.dumps(error))

    assert type(restored) is RetryableProviderError
    assert str(restored) == "openai returned HTTP 429"
    assert (restored.provider, restored.status_code, restored.retry_after_s) == ("openai", 429, 7.0)
    request_error = pickle.loads(pickle.dumps(ProviderRequestError("bad key", status_code=401)))
    assert request_error.status_code == 401


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', '{"a": 1}'),
        ('```json\n{"a": 1}\n```', '{"a": 1}'),
        ('```\n{"a": 1}\n```\n', '{"a": 1}'),
        ('  ```JSON\n{"a": 1}```', '{"a": 1}'),
        ('Here you go:\n```json\n{"a": 1}\n```\nAnything else?', '{"a": 1}'),
        ('```json\n{"a": 1}', '{"a": 1}'),
    ],
)
def test_strip_code_fences(text: str, expected: str) -> None:
    assert strip_code_fences(text) == expected


def test_token_usage_adds_up_and_fills_the_total() -> None:
    total = TokenUsage(input_tokens=10, output_tokens=5) + TokenUsage(input_tokens=1, output_tokens=2, total_tokens=4)

    assert total == TokenUsage(input_tokens=11, output_tokens=7, total_tokens=19)
    assert TokenUsage(input_tokens=3, output_tokens=4).total_tokens == 7
    assert TokenUsage().is_zero

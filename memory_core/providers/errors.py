"""Provider failures, split by what the caller should do about them.

There is exactly one retryable type: Celery owns retries and backoff, so a task only
needs to know *whether* to retry and how long the provider asked it to wait. The
SDKs' own retries are turned off for the same reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = [
    "ProviderError",
    "ProviderRequestError",
    "ProviderResponseError",
    "RetryableProviderError",
    "is_retryable_status",
    "parse_retry_after",
    "translate_sdk_error",
]


class ProviderError(Exception):
    """Base of every LLM/embedding provider failure.

    ``provider`` names the backend ("openai", "anthropic", ...) and ``status_code`` is
    the HTTP status when there was a response.
    """

    def __init__(self, message: str, *, provider: str | None = None, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.status_code = status_code

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only attributes would be lost by the default Exception pickling,
        # and Celery pickles exceptions when it records a failed or retried task.
        return (self.__class__, (self.message,), self.__dict__.copy())


class RetryableProviderError(ProviderError):
    """Trying again later may succeed: rate limit, 5xx, timeout, connection failure.

    ``retry_after_s`` is the delay the provider asked for (``retry-after-ms`` or
    ``retry-after``), or ``None`` when it did not say.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        status_code: int | None = None,
        retry_after_s: float | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message, provider=provider, status_code=status_code)
        self.retry_after_s = retry_after_s
        self.reason = reason or _reason_for_status(status_code)

    @property
    def is_throttling(self) -> bool:
        """Rate limited or unreachable: waiting is the cure, so the task retries instead of falling back."""
        return self.reason in ("rate_limited", "connection")


class ProviderRequestError(ProviderError):
    """The request itself is wrong (bad key, unknown model, bad input, missing extra); retrying cannot help."""


class ProviderResponseError(ProviderError):
    """The provider answered, but not what was asked (wrong vector dimension, missing items)."""


def _reason_for_status(status_code: int | None) -> str:
    if status_code == 429:
        return "rate_limited"
    if status_code == 408:
        return "timeout"
    if status_code is not None and status_code >= 500:
        return "server_error"
    return "unavailable"


# 408 is the server giving up on a slow request: a timeout, like the client-side one.
_RETRYABLE_STATUSES = frozenset({408, 429})


def is_retryable_status(status_code: int) -> bool:
    """Whether an HTTP status means "try again later" (408, 429 and every 5xx)."""
    return status_code in _RETRYABLE_STATUSES or status_code >= 500


def _header(headers: object, name: str) -> str | None:
    getter = getattr(headers, "get", None)
    if getter is None:
        return None
    value = getter(name)
    if value is None:
        # Plain dicts are case-sensitive, unlike HTTP client header objects.
        value = getter(name.title())
    return value if isinstance(value, str) else None


def parse_retry_after(headers: object, *, now: Callable[[], float] = time.time) -> float | None:
    """Seconds a provider asked to wait, from ``retry-after-ms`` or ``retry-after``.

    ``retry-after`` may be a number of seconds or an HTTP date. Returns ``None`` when
    neither header is present or readable; never returns a negative delay.
    """
    millis = _header(headers, "retry-after-ms")
    if millis is not None:
        try:
            value = float(millis)
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(value / 1000.0, 0.0)
    raw = _header(headers, "retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        moment = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    return max(moment.timestamp() - now(), 0.0)


def translate_sdk_error(
    error: Exception,
    *,
    provider: str,
    connection_errors: tuple[type[Exception], ...],
    status_errors: tuple[type[Exception], ...],
) -> ProviderError:
    """Map an OpenAI/Anthropic SDK exception to the provider error hierarchy.

    Both SDKs share one shape: connection errors (timeouts included) carry no
    response, status errors carry ``status_code``, ``message`` and ``response.headers``.
    Anything else from the SDK (e.g. a missing key) is a request error.
    """
    if isinstance(error, connection_errors):
        timed_out = "timeout" in type(error).__name__.lower()
        kind = "timed out" if timed_out else "could not connect"
        return RetryableProviderError(
            f"{provider} request {kind}: {error}", provider=provider, reason="timeout" if timed_out else "connection"
        )
    if isinstance(error, status_errors):
        status = getattr(error, "status_code", None)
        status_code = status if isinstance(status, int) else 0
        # Anthropic keeps the body's human-readable text apart from the SDK's summary.
        message = getattr(error, "api_message", None) or getattr(error, "message", None) or str(error)
        text = f"{provider} returned HTTP {status_code}: {message}"
        if is_retryable_status(status_code):
            headers = getattr(getattr(error, "response", None), "headers", None)
            return RetryableProviderError(
                text,
                provider=provider,
                status_code=status_code,
                retry_after_s=parse_retry_after(headers),
            )
        return ProviderRequestError(text, provider=provider, status_code=status_code)
    return ProviderRequestError(f"{provider} request failed: {error}", provider=provider)

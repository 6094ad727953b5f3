"""What the rest of the service needs from an LLM or an embedding backend.

Both protocols are synchronous on purpose: they are called from Celery thread-pool
workers and from sync FastAPI handlers, where an event loop would only add a hop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "EmbeddingProvider",
    "LLMProvider",
    "LLMResult",
    "TokenUsage",
    "schema_instruction",
    "strip_code_fences",
]


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens spent by one or more LLM calls; ``a + b`` adds them up.

    ``total_tokens`` is what the provider reported, but never less than
    ``input_tokens + output_tokens`` (some servers omit it or report 0).
    ``cached_input_tokens`` is the part of ``input_tokens`` the provider served from its
    prompt cache (0 when it does not say). ``calls`` counts the answers received (a provider
    reports 1 per completion; offline rules 0) and ``model`` names the model that answered
    (the first one when calls to different models are added up; ``None`` without a call).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_input_tokens: int = 0
    calls: int = 0
    model: str | None = None

    def __post_init__(self) -> None:
        floor = self.input_tokens + self.output_tokens
        if self.total_tokens < floor:
            object.__setattr__(self, "total_tokens", floor)

    def __add__(self, other: TokenUsage) -> TokenUsage:
        if not isinstance(other, TokenUsage):
            return NotImplemented
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            calls=self.calls + other.calls,
            model=self.model or other.model,
        )

    @property
    def is_zero(self) -> bool:
        """True when no token was spent (offline skills, cache hits)."""
        return self.total_tokens == 0


@dataclass(frozen=True, slots=True)
class LLMResult:
    """One completion: the answer text, the tokens it cost and the model that answered."""

    text: str
    usage: TokenUsage
    model: str


@runtime_checkable
class LLMProvider(Protocol):
    """A chat model behind a blocking call.

    Implementations raise :class:`~memory_core.providers.errors.RetryableProviderError`
    for rate limits, 5xx, timeouts and connection failures (the caller's task queue
    retries them) and :class:`~memory_core.providers.errors.ProviderRequestError` for
    anything retrying cannot fix.
    """

    def complete(
        self,
        messages: list[dict[str, str]],
        temperature: float = 0,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        timeout_s: float | None = None,
    ) -> LLMResult:
        """Answer ``messages`` (``{"role": ..., "content": ...}`` dicts, system first).

        ``timeout_s`` bounds this call when it is shorter than the provider's own timeout (a
        timeout raises :class:`~memory_core.providers.errors.RetryableProviderError`).
        """
        ...


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns texts into vectors of a fixed dimension.

    Blank texts have no meaning to embed: ``embed`` gives them a zero vector (so the
    output stays aligned with the input) and ``embed_one`` gives ``None`` (so a
    caller cannot store a zero vector by accident: cosine distance to it is undefined).
    """

    @property
    def dimensions(self) -> int:
        """Length of every vector this provider returns."""
        ...

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in input order."""
        ...

    def embed_one(self, text: str) -> list[float] | None:
        """The vector of ``text``, or ``None`` when the text is empty or whitespace."""
        ...


_LEADING_FENCE = re.compile(r"\A```[A-Za-z0-9_+-]*[ \t]*\n?")
_TRAILING_FENCE = re.compile(r"\n?[ \t]*```\s*\Z")
_EMBEDDED_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n(.*?)\n[ \t]*```", re.DOTALL)


def strip_code_fences(text: str) -> str:
    """Remove a markdown code fence around a model's answer.

    Models asked for JSON sometimes wrap it in ```json ... ``` or put a sentence
    before the fenced block; both come back as the bare block content.
    """
    stripped = text.strip()
    if stripped.startswith("```"):
        body = _LEADING_FENCE.sub("", stripped, count=1)
        return _TRAILING_FENCE.sub("", body, count=1).strip()
    embedded = _EMBEDDED_FENCE.search(stripped)
    if embedded is not None:
        return embedded.group(1).strip()
    return stripped


def salvage_list(raw_text: str, key: str) -> list[Any] | None:
    """The list under ``key`` of a JSON answer that failed validation as a whole (None when it has none).

    Batched skills keep what their parts got right: one malformed part must not lose its neighbours.
    """
    text = strip_code_fences(raw_text)
    first, last = text.find("{"), text.rfind("}")
    for candidate in (text, text[first : last + 1] if 0 <= first < last else ""):
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get(key), list):
            return list(data[key])
    return None


def schema_instruction(schema: dict[str, Any]) -> str:
    """The system-prompt paragraph asking for JSON matching ``schema`` (JSON mode, or no structured output)."""
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    return f"Reply with one JSON object, and nothing else, that validates against this JSON Schema:\n{text}"

"""Claude through the ``anthropic`` SDK (the optional ``anthropic`` extra).

The Messages API has no JSON mode, so ``response_format={"type": "json_object"}``
becomes an instruction in the system prompt, and a fenced answer is unwrapped. A strict
schema (``{"type": "json_schema", ...}``) becomes tool use: one tool whose ``input_schema``
is the schema, and ``tool_choice`` forcing it, so the answer is the tool call's input.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from memory_core.providers.errors import ProviderError, ProviderRequestError, translate_sdk_error
from memory_core.providers.protocols import LLMResult, TokenUsage, strip_code_fences

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import MessageParam

__all__ = ["JSON_ONLY_INSTRUCTION", "AnthropicChatProvider"]

JSON_ONLY_INSTRUCTION = (
    "Answer with exactly one JSON object and nothing else: no prose before or after it, no markdown code fences."
)


def _translate_anthropic_error(error: Exception) -> ProviderError:
    import anthropic  # deferred: the optional extra is only loaded by the provider

    return translate_sdk_error(
        error,
        provider="anthropic",
        connection_errors=(anthropic.APIConnectionError,),
        status_errors=(anthropic.APIStatusError,),
    )


def _split_messages(messages: list[dict[str, str]]) -> tuple[list[str], list[dict[str, str]]]:
    system: list[str] = []
    turns: list[dict[str, str]] = []
    for message in messages:
        role = message.get("role", "user")
        content = message.get("content", "")
        if role == "system":
            system.append(content)
        elif turns and turns[-1]["role"] == role:
            # The API wants user and assistant turns to alternate.
            turns[-1] = {"role": role, "content": turns[-1]["content"] + "\n\n" + content}
        else:
            turns.append({"role": "assistant" if role == "assistant" else "user", "content": content})
    return system, turns


def _answer_tool(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """The tool whose input is the answer, for a ``json_schema`` response format (else ``None``)."""
    if response_format is None or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema") or {}
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        return None
    return {
        "name": str(spec.get("name") or "answer"),
        "description": "Give your answer as this tool's input.",
        "input_schema": schema,
    }


class AnthropicChatProvider:
    """:class:`~memory_core.providers.protocols.LLMProvider` over the Anthropic Messages API.

    ``max_tokens`` is required by the API; the constructor's value is used when a
    call does not pass one. ``temperature`` is accepted for the protocol but not
    sent: the current Messages API (anthropic SDK 2.x) has no sampling temperature.
    """

    def __init__(
        self,
        api_key: str,
        model: str,
        base_url: str | None = None,
        timeout_s: float = 30,
        max_tokens: int = 4096,
    ) -> None:
        try:
            import anthropic  # deferred: optional extra, see the module docstring
        except ImportError as error:
            raise ProviderRequestError(
                "ARANDU_LLM_PROVIDER=anthropic needs the anthropic extra: pip install 'arandu-service[anthropic]'",
                provider="anthropic",
            ) from error
        if not api_key:
            raise ProviderRequestError("anthropic needs ARANDU_LLM_API_KEY", provider="anthropic")
        self.model = model
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        # Celery owns retries; the SDK's would multiply attempts and hide rate limits.
        self._client: anthropic.Anthropic = anthropic.Anthropic(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0
        )
        self._sdk_error: type[Exception] = anthropic.AnthropicError

    def complete(
        self,
        messages: list[dict[str, str]],
        temperature: float = 0,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        timeout_s: float | None = None,
    ) -> LLMResult:
        """Send ``messages`` (system ones go to the ``system`` parameter) and return the text and usage.

        ``timeout_s`` bounds this call more tightly than the client's own timeout (never beyond it).
        """
        system, turns = _split_messages(messages)
        tool = _answer_tool(response_format)
        wants_json = tool is None and response_format is not None and response_format.get("type") == "json_object"
        if wants_json:
            system.append(JSON_ONLY_INSTRUCTION)
        if not turns:
            raise ProviderRequestError("anthropic needs at least one user message", provider="anthropic")
        options: dict[str, Any] = {}
        if timeout_s is not None:
            options["timeout"] = min(timeout_s, self.timeout_s)
        if system:
            options["system"] = "\n\n".join(system)
        if tool is not None:
            options["tools"] = [tool]
            options["tool_choice"] = {"type": "tool", "name": tool["name"]}
        try:
            reply = self._client.messages.create(
                model=self.model,
                messages=cast("list[MessageParam]", turns),
                max_tokens=max_tokens or self.max_tokens,
                **options,
            )
        except self._sdk_error as error:
            raise _translate_anthropic_error(error) from error
        text = "".join(block.text for block in reply.content if block.type == "text")
        if tool is not None:
            called = next((block for block in reply.content if block.type == "tool_use"), None)
            # The forced tool's input is the answer; a reply without it falls to tolerant parsing of the text.
            if called is not None:
                text = json.dumps(called.input, ensure_ascii=False)
        elif wants_json:
            text = strip_code_fences(text)
        # Prompt-cache reads and writes are input tokens too (Anthropic counts them apart from
        # input_tokens); only the reads were served from the cache. Older SDKs lack the fields.
        cache_written = getattr(reply.usage, "cache_creation_input_tokens", None) or 0
        cache_read = getattr(reply.usage, "cache_read_input_tokens", None) or 0
        model = str(reply.model or self.model)
        usage = TokenUsage(
            input_tokens=reply.usage.input_tokens + cache_written + cache_read,
            output_tokens=reply.usage.output_tokens,
            cached_input_tokens=cache_read,
            calls=1,
            model=model,
        )
        return LLMResult(text=text, usage=usage, model=model)

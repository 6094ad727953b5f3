"""Chat completions through the ``openai`` SDK, for OpenAI and any compatible server.

A ``base_url`` points it at Ollama, vLLM, LM Studio or a proxy. The SDK is imported
when the first provider is built, not when this module is: the import costs most
of a second, and offline processes never need it.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import TYPE_CHECKING, Any, cast

from memory_core.providers.errors import ProviderError, ProviderRequestError, ProviderResponseError, translate_sdk_error
from memory_core.providers.protocols import LLMResult, TokenUsage, schema_instruction

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
    from openai.types.chat.completion_create_params import ResponseFormat

__all__ = ["FORMAT_LEVELS", "OpenAIChatProvider", "make_openai_client", "translate_openai_error"]

logger = logging.getLogger(__name__)

# Local OpenAI-compatible servers ignore the key, but the SDK refuses to start without one.
_PLACEHOLDER_KEY = "not-needed"


def make_openai_client(api_key: str | None, base_url: str | None, timeout_s: float) -> openai.OpenAI:
    """An ``openai.OpenAI`` client with the SDK's retries off and a whole-request timeout.

    Raises :class:`ProviderRequestError` when there is neither a key nor a ``base_url``
    (only a self-hosted server can do without a key).
    """
    import openai  # deferred: see the module docstring

    if not api_key:
        if not base_url:
            raise ProviderRequestError(
                "openai needs an API key: set ARANDU_LLM_API_KEY or OPENAI_API_KEY "
                "(or ARANDU_LLM_BASE_URL for a self-hosted OpenAI-compatible server)",
                provider="openai",
            )
        api_key = _PLACEHOLDER_KEY
    # Celery owns retries (with the provider's Retry-After); SDK retries would
    # multiply attempts and hide rate limits from the task.
    return openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)


def translate_openai_error(error: Exception) -> ProviderError:
    """Map an ``openai`` SDK exception to :class:`RetryableProviderError` or :class:`ProviderRequestError`."""
    import openai  # deferred: already loaded by the client that raised

    return translate_sdk_error(
        error,
        provider="openai",
        connection_errors=(openai.APIConnectionError,),
        status_errors=(openai.APIStatusError,),
    )


#: What a server may understand, best first: a strict JSON schema, JSON mode, nothing (tolerant parsing).
FORMAT_LEVELS: tuple[str, ...] = ("json_schema", "json_object", "none")

# A 400 naming one of these is a server refusing the response_format, not a bad request of ours.
_FORMAT_REFUSAL = re.compile(r"response_format|json_schema|json_object|structured|schema", re.IGNORECASE)


def _refuses_format(error: ProviderError) -> bool:
    """Whether ``error`` is the endpoint saying it does not support the ``response_format`` sent."""
    return (
        isinstance(error, ProviderRequestError)
        and error.status_code in (400, 422)
        and bool(_FORMAT_REFUSAL.search(str(error)))
    )


def _with_schema(
    messages: list[dict[str, str]], asked: dict[str, Any] | None, sent: dict[str, Any] | None
) -> list[dict[str, str]]:
    """``messages``, with the asked JSON schema written into the system message when it is not sent as one.

    A skill asking for a strict schema leaves it out of its prompt (the endpoint gets it in
    ``response_format``); an endpoint that refused it must still be told what to answer.
    """
    if asked is None or asked.get("type") != "json_schema" or (sent is not None and sent.get("type") == "json_schema"):
        return messages
    schema = (asked.get("json_schema") or {}).get("schema")
    if not isinstance(schema, dict):
        return messages
    note = schema_instruction(schema)
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{messages[0].get('content', '').rstrip()}\n\n{note}"}, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


class OpenAIChatProvider:
    """:class:`~memory_core.providers.protocols.LLMProvider` over ``POST /chat/completions``.

    ``max_tokens`` is sent as ``max_completion_tokens`` to api.openai.com (newer
    models reject the old name) and as ``max_tokens`` to a custom ``base_url``
    (what compatible servers understand).

    Structured outputs are probed once per provider (one endpoint and model) in a process: a
    ``json_schema`` request the endpoint refuses with a 400 about the response format (older
    Ollama and vLLM builds, servers without guided decoding) is sent again in JSON mode, and the
    provider remembers it (``format_level``); a refused JSON mode is sent again without any
    ``response_format``, the skill's tolerant parsing then finding the object in the answer.
    """

    def __init__(self, api_key: str | None, model: str, base_url: str | None = None, timeout_s: float = 30) -> None:
        import openai  # deferred: see the module docstring

        self.model = model
        self.base_url = base_url
        self.timeout_s = timeout_s
        self._client = make_openai_client(api_key, base_url, timeout_s)
        self._sdk_error: type[Exception] = openai.OpenAIError
        self._format_level = 0
        self._format_lock = threading.Lock()

    @property
    def format_level(self) -> str:
        """The richest ``response_format`` this endpoint accepted so far (``json_schema`` until refused)."""
        return FORMAT_LEVELS[self._format_level]

    def _degrade(self, refused: int) -> None:
        """Remember that the endpoint refused the format of level ``refused``."""
        with self._format_lock:
            if self._format_level <= refused:
                self._format_level = refused + 1
                logger.warning(
                    "%s at %s refused response_format %s; using %s from now on",
                    self.model,
                    self.base_url or "api.openai.com",
                    FORMAT_LEVELS[refused],
                    FORMAT_LEVELS[self._format_level],
                )

    def _format_for(self, response_format: dict[str, Any] | None) -> tuple[int, dict[str, Any] | None]:
        """The level and the ``response_format`` to send for the one asked, given what the endpoint refused."""
        if response_format is None:
            return FORMAT_LEVELS.index("none"), None
        kind = str(response_format.get("type"))
        asked = FORMAT_LEVELS.index(kind) if kind in FORMAT_LEVELS else FORMAT_LEVELS.index("json_object")
        level = max(asked, self._format_level)
        if level == asked:
            return level, response_format
        if FORMAT_LEVELS[level] == "json_object":
            return level, {"type": "json_object"}
        return level, None

    def complete(
        self,
        messages: list[dict[str, str]],
        temperature: float = 0,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        timeout_s: float | None = None,
    ) -> LLMResult:
        """Send ``messages`` and return the first choice's text and usage (``timeout_s``: this call's, if shorter)."""
        level, sent_format = self._format_for(response_format)
        while True:
            try:
                completion = self._create(
                    _with_schema(messages, response_format, sent_format),
                    temperature,
                    sent_format,
                    max_tokens,
                    timeout_s,
                )
                break
            except ProviderError as error:
                if sent_format is None or not _refuses_format(error):
                    raise
                self._degrade(level)
                level, sent_format = self._format_for(response_format)
        return self._result(completion)

    def _create(
        self,
        messages: list[dict[str, str]],
        temperature: float,
        response_format: dict[str, Any] | None,
        max_tokens: int | None,
        timeout_s: float | None = None,
    ) -> ChatCompletion:
        options: dict[str, Any] = {}
        if timeout_s is not None:
            # A call's own bound only shortens the provider's timeout (ARANDU_LLM_TIMEOUT_S).
            options["timeout"] = min(timeout_s, self.timeout_s)
        if response_format is not None:
            options["response_format"] = cast("ResponseFormat", response_format)
        if max_tokens is not None:
            options["max_tokens" if self.base_url else "max_completion_tokens"] = max_tokens
        try:
            completion: ChatCompletion = self._client.chat.completions.create(
                model=self.model,
                messages=cast("list[ChatCompletionMessageParam]", messages),
                temperature=temperature,
                **options,
            )
        except self._sdk_error as error:
            raise translate_openai_error(error) from error
        return completion

    def _result(self, completion: ChatCompletion) -> LLMResult:
        if not completion.choices:
            raise ProviderResponseError(f"openai returned no choices for model {self.model}", provider="openai")
        model = completion.model or self.model
        usage = TokenUsage(calls=1, model=model)
        if completion.usage is not None:
            details = completion.usage.prompt_tokens_details
            usage = TokenUsage(
                input_tokens=completion.usage.prompt_tokens or 0,
                output_tokens=completion.usage.completion_tokens or 0,
                total_tokens=completion.usage.total_tokens or 0,
                # Part of prompt_tokens, reported by OpenAI (and some compatible servers) on a prefix-cache hit.
                cached_input_tokens=(details.cached_tokens or 0) if details is not None else 0,
                calls=1,
                model=model,
            )
        return LLMResult(text=completion.choices[0].message.content or "", usage=usage, model=model)

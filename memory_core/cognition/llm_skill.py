"""Generic plumbing of an LLM-backed skill: prompt + JSON schema in, validated pydantic model out."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Generic

from pydantic import ValidationError

from memory_core.cognition.skill import InputT, OutputT, SkillOutcome, SkillOutputError
from memory_core.cognition.structured import JSON_MODE, compact_schema, response_format_for, schema_instruction
from memory_core.providers.protocols import LLMProvider, LLMResult, strip_code_fences

__all__ = ["JSON_MODE", "LLMSkill"]

_SHOWN_ANSWER_CHARS = 200
_SHOWN_SCHEMA_ERRORS = 3


class LLMSkill(Generic[InputT, OutputT]):
    """A :class:`~memory_core.cognition.skill.Skill` answered by an LLM as JSON, with structured outputs.

    The system message is ``system_prompt`` (followed by the output model's JSON schema when
    the skill asks for JSON mode), the same bytes for every call (what providers' prefix caches
    key on); the user message, ``render_user(skill_input)``, comes last and alone varies. The
    request asks for a strict JSON schema generated from ``output_model`` where the model can be
    strict, else JSON mode (:func:`~memory_core.cognition.structured.response_format_for`);
    the provider falls back when the endpoint refuses it, and then writes the schema into the
    system message itself. Whatever came back is unwrapped
    from any code fence (or the prose around an object) and validated with
    ``output_model.model_validate_json``.

    An answer that is not JSON or does not match the schema raises
    :class:`~memory_core.cognition.skill.SkillOutputError` carrying the tokens it
    cost; the caller decides the fallback. Provider errors propagate untouched, so a
    :class:`~memory_core.providers.errors.RetryableProviderError` reaches the task
    queue that retries it.
    """

    def __init__(
        self,
        *,
        name: str,
        system_prompt: str,
        render_user: Callable[[InputT], str],
        output_model: type[OutputT],
        provider: LLMProvider,
        temperature: float = 0.0,
        max_tokens: int | None = None,
    ) -> None:
        self._name = name
        self.system_prompt = system_prompt
        self.render_user = render_user
        self.output_model = output_model
        self.provider = provider
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.response_format = response_format_for(name, output_model)
        if self.response_format.get("type") == "json_schema":
            # The schema travels in response_format (or Claude's tool): written here too, it would be paid twice.
            # A provider that falls back to JSON mode adds it to the system message (see the providers).
            self._system_message = system_prompt.rstrip()
        else:
            self._system_message = f"{system_prompt.rstrip()}\n\n{schema_instruction(compact_schema(output_model))}"

    @property
    def name(self) -> str:
        """The skill's stable identifier."""
        return self._name

    @property
    def system_message(self) -> str:
        """The full system message: the prompt plus the output JSON schema."""
        return self._system_message

    def build_messages(self, skill_input: InputT) -> list[dict[str, str]]:
        """The chat messages sent for ``skill_input``."""
        return [
            {"role": "system", "content": self._system_message},
            {"role": "user", "content": self.render_user(skill_input)},
        ]

    def run(self, skill_input: InputT, /, *, timeout_s: float | None = None) -> SkillOutcome[OutputT]:
        """Ask the model and return its validated answer with the tokens spent.

        ``timeout_s`` bounds the call instead of the provider's timeout (extraction's
        ``extraction_timeout_sec``).
        """
        started = time.perf_counter()
        # Passed only when set: providers written before the parameter keep working.
        timeout: dict[str, float] = {"timeout_s": timeout_s} if timeout_s is not None else {}
        result = self.provider.complete(
            self.build_messages(skill_input),
            temperature=self.temperature,
            response_format=self.response_format,
            max_tokens=self.max_tokens,
            **timeout,
        )
        output = self._parse(result)
        return SkillOutcome(output=output, usage=result.usage, duration_ms=(time.perf_counter() - started) * 1000.0)

    def _parse(self, result: LLMResult) -> OutputT:
        text = strip_code_fences(result.text)
        candidates = [text]
        # A sentence around an unfenced object is the other common way models break JSON mode.
        first, last = text.find("{"), text.rfind("}")
        if 0 <= first < last and (first, last) != (0, len(text) - 1):
            candidates.append(text[first : last + 1])
        schema_error: ValidationError | None = None
        json_error: ValueError | None = None
        for candidate in candidates:
            try:
                return self.output_model.model_validate_json(candidate)
            except ValidationError as error:
                try:
                    json.loads(candidate)
                except ValueError as not_json:
                    json_error = json_error or not_json
                else:
                    schema_error = schema_error or error
        shown = result.text[:_SHOWN_ANSWER_CHARS]
        if schema_error is not None:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in item['loc']) or '<root>'}: {item['msg']}"
                for item in schema_error.errors()[:_SHOWN_SCHEMA_ERRORS]
            )
            message = f"answer does not match the {self.output_model.__name__} schema ({problems}): {shown!r}"
        else:
            message = f"answer is not valid JSON ({json_error}): {shown!r}"
        raise SkillOutputError(message, skill=self._name, raw_text=result.text, usage=result.usage)

"""The contract between the pipeline and its cognition: typed skills.

Pipeline code never builds a prompt. It calls a skill (extract, disambiguate,
reconcile, rerank, summarise, consolidate, tag_emotion...) with a typed input and
gets back a pydantic model inside a :class:`SkillOutcome` that also says what it
cost and whether a fallback produced it. Each skill has an LLM implementation
(:class:`~memory_core.cognition.llm_skill.LLMSkill`) and an offline one made of
deterministic rules (:mod:`memory_core.cognition.offline`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from memory_core.providers.protocols import TokenUsage

__all__ = ["FallbackSkill", "Skill", "SkillOutcome", "SkillOutputError"]

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT", bound=BaseModel)
_InputT_contra = TypeVar("_InputT_contra", contravariant=True)
_OutputT_co = TypeVar("_OutputT_co", bound=BaseModel, covariant=True)


@dataclass(frozen=True, slots=True)
class SkillOutcome(Generic[_OutputT_co]):
    """What a skill produced and what producing it cost.

    ``used_fallback`` is true when the output does not come from the skill that was
    asked (the LLM answered garbage and rules stood in); ``error`` then says why.
    ``usage`` counts every token spent, including those of a failed attempt.
    """

    output: _OutputT_co
    usage: TokenUsage = field(default_factory=TokenUsage)
    used_fallback: bool = False
    error: str | None = None
    duration_ms: float = 0.0


@runtime_checkable
class Skill(Protocol[_InputT_contra, _OutputT_co]):
    """One cognitive step with a typed input and a pydantic output."""

    @property
    def name(self) -> str:
        """Stable identifier, used in logs, metrics and token accounting."""
        ...

    def run(self, skill_input: _InputT_contra, /) -> SkillOutcome[_OutputT_co]:
        """Produce the output for ``skill_input``."""
        ...


class SkillOutputError(Exception):
    """The model's answer is not valid JSON or does not match the skill's output schema.

    ``raw_text`` is the answer as received and ``usage`` the tokens it cost, so the
    caller can fall back without losing the accounting.
    """

    def __init__(self, message: str, *, skill: str, raw_text: str, usage: TokenUsage) -> None:
        super().__init__(message)
        self.message = message
        self.skill = skill
        self.raw_text = raw_text
        self.usage = usage

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments would be lost by the default Exception pickling.
        return (_restore_skill_output_error, (self.__class__, self.message, self.skill, self.raw_text, self.usage))


def _restore_skill_output_error(
    cls: type[SkillOutputError], message: str, skill: str, raw_text: str, usage: TokenUsage
) -> SkillOutputError:
    return cls(message, skill=skill, raw_text=raw_text, usage=usage)


class FallbackSkill(Generic[InputT, OutputT]):
    """Runs ``primary`` and, when it answers something unusable, ``fallback`` instead.

    Only :class:`SkillOutputError` triggers the fallback. Provider errors propagate:
    a retryable one must reach the task queue, and a request error is a
    configuration problem that rules must not hide.
    """

    def __init__(self, primary: Skill[InputT, OutputT], fallback: Skill[InputT, OutputT]) -> None:
        self.primary = primary
        self.fallback = fallback

    @property
    def name(self) -> str:
        """The primary skill's name: this is the same step, with a safety net."""
        return self.primary.name

    def run(self, skill_input: InputT, /) -> SkillOutcome[OutputT]:
        """The primary outcome, or the fallback's marked ``used_fallback`` with the primary's error and tokens."""
        started = time.perf_counter()
        try:
            return self.primary.run(skill_input)
        except SkillOutputError as error:
            rescued = self.fallback.run(skill_input)
            return SkillOutcome(
                output=rescued.output,
                usage=error.usage + rescued.usage,
                used_fallback=True,
                error=f"{error.skill}: {error.message}",
                duration_ms=(time.perf_counter() - started) * 1000.0,
            )

"""Skills that report every call to a sink: how the service counts LLM calls and tokens by skill.

The pipelines never count anything themselves. A process that wants metrics wraps its skill
bundle with :func:`instrument_skills`; each call then reports the skill's name, which
implementation answered (``llm`` or ``offline``), how it ended and the tokens it cost. Calls
answered from a run's LLM cache never reach the skill, so they are (rightly) not counted.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from memory_core.cognition.skill import Skill, SkillOutcome, SkillOutputError
from memory_core.providers.protocols import TokenUsage

__all__ = ["InstrumentedSkill", "SkillCallSink", "instrument_skills"]

logger = logging.getLogger("arandu.metrics")

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT", bound=BaseModel)
BundleT = TypeVar("BundleT")

#: How a call ended: the skill answered; its answer was unusable and rules stood in; its
#: answer was unusable and the error went to the caller; the provider failed.
OUTCOMES = ("ok", "fallback", "invalid_output", "error")


class SkillCallSink(Protocol):
    """Where instrumented skills report their calls (a metrics ledger)."""

    def record_skill_call(self, skill: str, implementation: str, outcome: str, usage: TokenUsage) -> None:
        """Count one call of ``skill`` and the tokens it cost."""
        ...


class InstrumentedSkill(Generic[InputT, OutputT]):
    """``inner`` with every call reported to ``sink``; the sink failing never fails the call."""

    def __init__(self, inner: Skill[InputT, OutputT], implementation: str, sink: SkillCallSink) -> None:
        self.inner = inner
        self.implementation = implementation
        self.sink = sink

    @property
    def name(self) -> str:
        """The wrapped skill's name."""
        return self.inner.name

    def run(self, skill_input: InputT, /) -> SkillOutcome[OutputT]:
        """Run the wrapped skill and report the call, whatever its outcome."""
        try:
            outcome = self.inner.run(skill_input)
        except SkillOutputError as error:
            self._report("invalid_output", error.usage)
            raise
        except Exception:
            self._report("error", TokenUsage())
            raise
        self._report("fallback" if outcome.used_fallback else "ok", outcome.usage)
        return outcome

    def _report(self, outcome: str, usage: TokenUsage) -> None:
        try:
            self.sink.record_skill_call(self.name, self.implementation, outcome, usage)
        except Exception:  # metrics are best effort; the memory is the product
            logger.debug("could not record a call of %s", self.name, exc_info=True)


def instrument_skills(bundle: BundleT, sink: SkillCallSink) -> BundleT:
    """A copy of a skill bundle (``WriteSkills``, ``MaintenanceSkills``...) whose skills report to ``sink``.

    The bundle must be a dataclass with a ``kind`` field; every field holding a skill is wrapped,
    already-instrumented skills are left alone.
    """
    if not dataclasses.is_dataclass(bundle) or isinstance(bundle, type):
        raise TypeError(f"expected a dataclass instance of skills, got {type(bundle).__name__}")
    implementation = str(getattr(bundle, "kind", "unknown"))
    wrapped: dict[str, Any] = {}
    for spec in dataclasses.fields(bundle):
        value = getattr(bundle, spec.name)
        if isinstance(value, Skill) and not isinstance(value, InstrumentedSkill):
            wrapped[spec.name] = InstrumentedSkill(value, implementation, sink)
    return dataclasses.replace(bundle, **wrapped)

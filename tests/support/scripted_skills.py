"""Skills that answer what the test says: the LLM is the one part tests replace."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel

from memory_core.cognition.models import ExtractionInput, ExtractionOutput
from memory_core.cognition.skill import Skill, SkillOutcome


class ScriptedExtraction:
    """An extraction skill that always returns ``output``."""

    def __init__(self, output: ExtractionOutput, name: str = "extract_informed") -> None:
        self.output = output
        self._name = name
        self.calls: list[ExtractionInput] = []

    @property
    def name(self) -> str:
        """Skill name."""
        return self._name

    def run(self, skill_input: ExtractionInput, /) -> SkillOutcome[ExtractionOutput]:
        """Record the input and answer the script."""
        self.calls.append(skill_input)
        return SkillOutcome(output=self.output.model_copy(deep=True))


InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT", bound=BaseModel)


class RecordingSkill(Generic[InputT, OutputT]):
    """Wraps a real skill (offline rules, usually) and records every input it is asked, to count calls."""

    def __init__(self, inner: Skill[InputT, OutputT]) -> None:
        self.inner = inner
        self.calls: list[InputT] = []

    @property
    def name(self) -> str:
        """The wrapped skill's name."""
        return self.inner.name

    def run(self, skill_input: InputT, /) -> SkillOutcome[OutputT]:
        """Record the input, then answer what the wrapped skill answers."""
        self.calls.append(skill_input)
        return self.inner.run(skill_input)


class ScriptedSkill(Generic[InputT, OutputT]):
    """A skill that answers ``outputs`` in turn (the last one repeats) and records its inputs."""

    def __init__(self, name: str, *outputs: OutputT) -> None:
        assert outputs, "a scripted skill needs at least one answer"
        self._name = name
        self.outputs = list(outputs)
        self.calls: list[InputT] = []

    @property
    def name(self) -> str:
        """Skill name."""
        return self._name

    def run(self, skill_input: InputT, /) -> SkillOutcome[OutputT]:
        """Record the input and answer the next scripted output."""
        self.calls.append(skill_input)
        output = self.outputs[min(len(self.calls), len(self.outputs)) - 1]
        return SkillOutcome(output=output.model_copy(deep=True))

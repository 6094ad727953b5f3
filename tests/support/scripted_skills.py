"""Skills that answer what the test says: the LLM is the one part tests replace."""

from __future__ import annotations

from memory_core.cognition.models import ExtractionInput, ExtractionOutput
from memory_core.cognition.skill import SkillOutcome


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

"""Emotion tagging answered by an LLM: primary emotion, its intensity and the speaker's energy."""

from __future__ import annotations

from memory_core.cognition.llm.prompts import EMOTION_PROMPT
from memory_core.cognition.llm_skill import LLMSkill
from memory_core.cognition.models import EmotionInput, EmotionOutput
from memory_core.cognition.skill import SkillOutcome
from memory_core.providers.protocols import LLMProvider

__all__ = ["EMOTION_SKILL", "EmotionSkill"]

EMOTION_SKILL = "tag_emotion"


def _render(skill_input: EmotionInput) -> str:
    return f"<message>\n{skill_input.text.strip()}\n</message>"


class EmotionSkill:
    """Asks the model for the message's emotion label (lower-cased), intensity in [0, 1] and energy.

    An intensity outside [0, 1] or an unknown energy level fails the schema and
    raises :class:`~memory_core.cognition.skill.SkillOutputError`.
    """

    def __init__(self, provider: LLMProvider, *, temperature: float = 0.0, max_tokens: int | None = None) -> None:
        self.llm: LLMSkill[EmotionInput, EmotionOutput] = LLMSkill(
            name=EMOTION_SKILL,
            system_prompt=EMOTION_PROMPT,
            render_user=_render,
            output_model=EmotionOutput,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )

    @property
    def name(self) -> str:
        """``tag_emotion``."""
        return EMOTION_SKILL

    def run(self, skill_input: EmotionInput, /) -> SkillOutcome[EmotionOutput]:
        """The model's tag, with the label trimmed and lower-cased (``neutral`` when empty)."""
        outcome = self.llm.run(skill_input)
        label = outcome.output.emotion.strip().lower() or "neutral"
        output = outcome.output.model_copy(update={"emotion": label})
        return SkillOutcome(output=output, usage=outcome.usage, duration_ms=outcome.duration_ms)

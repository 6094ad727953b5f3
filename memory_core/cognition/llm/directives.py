"""Procedural-memory skills answered by an LLM: directive detection, the contradiction judge, the block.

Directive *detection* normally rides on the extraction call (its answer has a ``directives``
field, so a message costs no second call); :class:`DirectiveDetectionSkill` is the same
question on its own. The judge is asked only for pairs the embedding pre-filter found close
(``contradiction_similarity_threshold``); the block skill merges a persona and the active
directives into one instruction block. Each has a rule twin in
:mod:`memory_core.cognition.offline.directives`.
"""

from __future__ import annotations

import json

from memory_core.cognition.directive_models import (
    ContradictionInput,
    ContradictionOutput,
    DirectiveBlockInput,
    DirectiveBlockOutput,
    DirectiveDetectionInput,
    DirectiveDetectionOutput,
)
from memory_core.cognition.llm.prompts import (
    DIRECTIVE_BLOCK_PROMPT,
    DIRECTIVE_CONTRADICTION_PROMPT,
    DIRECTIVE_DETECTION_PROMPT,
)
from memory_core.cognition.llm_skill import LLMSkill
from memory_core.cognition.offline.directives import (
    COMPOSE_DIRECTIVE_BLOCK,
    DETECT_DIRECTIVES,
    JUDGE_DIRECTIVE_CONTRADICTION,
)
from memory_core.providers.protocols import LLMProvider

__all__ = ["ContradictionSkill", "DirectiveBlockSkill", "DirectiveDetectionSkill"]


def _render_detection(skill_input: DirectiveDetectionInput) -> str:
    return f"Speaker: {skill_input.speaker_name}\n<message>\n{skill_input.message.strip()}\n</message>"


def _render_contradiction(skill_input: ContradictionInput) -> str:
    return f"EXISTING: {skill_input.existing_directive.strip()}\nNEW: {skill_input.new_directive.strip()}"


def _render_block(skill_input: DirectiveBlockInput) -> str:
    directives = json.dumps(skill_input.directives, ensure_ascii=False)
    return (
        f"Token budget: {skill_input.max_tokens}\n<persona>\n{skill_input.persona.strip()}\n</persona>\n"
        f"Directives (strongest first): {directives}"
    )


class DirectiveDetectionSkill(LLMSkill[DirectiveDetectionInput, DirectiveDetectionOutput]):
    """Asks the model which behavioural instructions one message gives, each in English."""

    def __init__(self, provider: LLMProvider, *, temperature: float = 0.0, max_tokens: int | None = None) -> None:
        super().__init__(
            name=DETECT_DIRECTIVES,
            system_prompt=DIRECTIVE_DETECTION_PROMPT,
            render_user=_render_detection,
            output_model=DirectiveDetectionOutput,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )


class ContradictionSkill(LLMSkill[ContradictionInput, ContradictionOutput]):
    """Asks the model whether a new directive contradicts an existing one (the judge after the pre-filter)."""

    def __init__(self, provider: LLMProvider, *, temperature: float = 0.0, max_tokens: int | None = None) -> None:
        super().__init__(
            name=JUDGE_DIRECTIVE_CONTRADICTION,
            system_prompt=DIRECTIVE_CONTRADICTION_PROMPT,
            render_user=_render_contradiction,
            output_model=ContradictionOutput,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )


class DirectiveBlockSkill(LLMSkill[DirectiveBlockInput, DirectiveBlockOutput]):
    """Asks the model to merge the persona and the directives into one English instruction block."""

    def __init__(self, provider: LLMProvider, *, temperature: float = 0.0, max_tokens: int | None = None) -> None:
        super().__init__(
            name=COMPOSE_DIRECTIVE_BLOCK,
            system_prompt=DIRECTIVE_BLOCK_PROMPT,
            render_user=_render_block,
            output_model=DirectiveBlockOutput,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )

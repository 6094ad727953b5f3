"""Entity disambiguation answered by an LLM: which of the top candidates, if any, a mention refers to."""

from __future__ import annotations

from memory_core.cognition.llm.prompts import DISAMBIGUATION_PROMPT
from memory_core.cognition.llm_skill import LLMSkill
from memory_core.cognition.models import DisambiguationInput, DisambiguationOutput, EntityCandidate
from memory_core.cognition.skill import SkillOutcome, SkillOutputError
from memory_core.providers.protocols import LLMProvider

__all__ = ["DISAMBIGUATION_SKILL", "DisambiguationSkill"]

DISAMBIGUATION_SKILL = "disambiguate"

# What models write for "none of them" when they do not use JSON null.
_NO_MATCH = frozenset({"", "null", "none", "new", "no match"})


def _candidate(candidate: EntityCandidate) -> str:
    line = (
        f'- key {candidate.canonical_key}: "{candidate.display_name}" ({candidate.entity_type}), '
        f"name similarity {candidate.similarity:.2f}"
    )
    if candidate.summary and candidate.summary.strip():
        line += f". {' '.join(candidate.summary.split())}"
    return line


def _render(skill_input: DisambiguationInput) -> str:
    lines = [
        f'Mention: "{skill_input.mention}" ({skill_input.mention_type})',
        "Message:",
        "<message>",
        skill_input.message.strip(),
        "</message>",
        "Candidates:",
        *(_candidate(candidate) for candidate in skill_input.candidates),
    ]
    return "\n".join(lines)


class DisambiguationSkill:
    """Asks the model which candidate (top 3 by similarity, at most) an ambiguous mention is.

    The answer must name one of the given candidates by key; a candidate's display
    name is accepted and mapped to its key. Any other answer raises
    :class:`SkillOutputError` (the caller then creates a new entity or falls back),
    with ``raw_text`` holding the parsed answer. No candidates: no call, no match.
    """

    def __init__(self, provider: LLMProvider, *, temperature: float = 0.0, max_tokens: int | None = None) -> None:
        self.llm: LLMSkill[DisambiguationInput, DisambiguationOutput] = LLMSkill(
            name=DISAMBIGUATION_SKILL,
            system_prompt=DISAMBIGUATION_PROMPT,
            render_user=_render,
            output_model=DisambiguationOutput,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )

    @property
    def name(self) -> str:
        """``disambiguate``."""
        return DISAMBIGUATION_SKILL

    def run(self, skill_input: DisambiguationInput, /) -> SkillOutcome[DisambiguationOutput]:
        """The chosen candidate's canonical key, or ``None`` for a new entity."""
        if not skill_input.candidates:
            return SkillOutcome(output=DisambiguationOutput(match=None, reason="no candidates"))
        outcome = self.llm.run(skill_input)
        answer = outcome.output
        try:
            match = _candidate_key(answer.match, skill_input.candidates)
        except ValueError as unknown:
            raise SkillOutputError(
                str(unknown), skill=DISAMBIGUATION_SKILL, raw_text=answer.model_dump_json(), usage=outcome.usage
            ) from unknown
        output = DisambiguationOutput(match=match, reason=answer.reason)
        return SkillOutcome(output=output, usage=outcome.usage, duration_ms=outcome.duration_ms)


def _candidate_key(match: str | None, candidates: list[EntityCandidate]) -> str | None:
    """The key of the candidate ``match`` names (by key, or by display name), None for "no match".

    Raises ``ValueError`` when ``match`` names none of the candidates, or several by one display name.
    """
    if match is None or match.strip().casefold() in _NO_MATCH:
        return None
    wanted = match.strip()
    for candidate in candidates:
        if candidate.canonical_key == wanted:
            return candidate.canonical_key
    folded = wanted.casefold()
    named = {
        candidate.canonical_key
        for candidate in candidates
        if folded in (candidate.canonical_key.casefold(), candidate.display_name.casefold())
    }
    if len(named) == 1:
        return named.pop()
    known = ", ".join(candidate.canonical_key for candidate in candidates)
    raise ValueError(f"match {match!r} is none of the candidates ({known})")

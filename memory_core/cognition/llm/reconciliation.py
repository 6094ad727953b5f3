"""Fact reconciliation answered by an LLM: ADD, UPDATE, NOOP or DELETE against the entity's existing facts."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_core.cognition.llm.prompts import RECONCILE_PROMPT
from memory_core.cognition.llm_skill import LLMSkill
from memory_core.cognition.models import ExistingFact, ReconcileInput, ReconcileOutput
from memory_core.cognition.skill import SkillOutcome, SkillOutputError
from memory_core.providers.protocols import LLMProvider

__all__ = ["RECONCILE_SKILL", "ReconcileSkill", "render_existing", "render_new_fact"]

RECONCILE_SKILL = "reconcile"


def _day(moment: datetime) -> str:
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _key(attribute_key: str | None) -> str:
    return f" [{attribute_key}]" if attribute_key else ""


def render_existing(fact: ExistingFact) -> str:
    """An existing fact's line: its id, since when it holds, its similarity to the new fact, its text."""
    return (
        f"- id {fact.fact_id} | since {_day(fact.valid_from)} | similarity {fact.similarity:.2f} | "
        f"{fact.text}{_key(fact.attribute_key)}"
    )


def render_new_fact(skill_input: ReconcileInput) -> str:
    """The new fact's line: since when it holds, its text and attribute key."""
    since = _day(skill_input.new_valid_from)
    return f"NEW fact (since {since}): {skill_input.new_text}{_key(skill_input.new_attribute_key)}"


def _render(skill_input: ReconcileInput) -> str:
    return "\n".join(
        [
            f"Entity: {skill_input.entity_name}",
            render_new_fact(skill_input),
            "EXISTING facts:",
            *(render_existing(fact) for fact in skill_input.existing),
        ]
    )


class ReconcileSkill:
    """Asks the model what a new fact does to the entity's existing ones.

    The model sees the new fact with its date and every existing fact with its id,
    date and similarity. UPDATE, NOOP and DELETE must name one of the given ids
    (anything else raises :class:`SkillOutputError`, and the pipeline's fallback is
    ADD); an ADD never carries a target. With no existing fact there is nothing to
    compare: the answer is ADD without a call.
    """

    def __init__(self, provider: LLMProvider, *, temperature: float = 0.0, max_tokens: int | None = None) -> None:
        self.llm: LLMSkill[ReconcileInput, ReconcileOutput] = LLMSkill(
            name=RECONCILE_SKILL,
            system_prompt=RECONCILE_PROMPT,
            render_user=_render,
            output_model=ReconcileOutput,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )

    @property
    def name(self) -> str:
        """``reconcile``."""
        return RECONCILE_SKILL

    def run(self, skill_input: ReconcileInput, /) -> SkillOutcome[ReconcileOutput]:
        """The validated decision, with ``target_fact_id`` one of the input's ids (or None for ADD)."""
        if not skill_input.existing:
            return SkillOutcome(output=ReconcileOutput(action="ADD", reason="no existing fact to compare"))
        outcome = self.llm.run(skill_input)
        answer = outcome.output
        if answer.action == "ADD":
            output = answer.model_copy(update={"target_fact_id": None})
            return SkillOutcome(output=output, usage=outcome.usage, duration_ms=outcome.duration_ms)
        target = (answer.target_fact_id or "").strip()
        known = [fact.fact_id for fact in skill_input.existing]
        if target not in known:
            problem = "names no target" if not target else f"targets unknown fact {target!r}"
            raise SkillOutputError(
                f"{answer.action} {problem} (given ids: {', '.join(known)})",
                skill=RECONCILE_SKILL,
                raw_text=answer.model_dump_json(),
                usage=outcome.usage,
            )
        output = answer.model_copy(update={"target_fact_id": target})
        return SkillOutcome(output=output, usage=outcome.usage, duration_ms=outcome.duration_ms)

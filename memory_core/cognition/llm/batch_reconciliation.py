"""Batched reconciliation: the new facts of one agent that need a decision, decided by one LLM call.

The model sees the new facts numbered, each under its own entity with its own existing facts
(exactly what the single-fact call would show), and answers one decision per number. Every
decision is checked on its own, so one unusable part costs only its fact (the caller decides
that one alone):

- its index must name a fact of the batch, and be answered exactly once;
- it must validate as a decision;
- an UPDATE, NOOP or DELETE must target one of the existing facts listed under its own number.

An answer that is not JSON at all, or has no list of decisions, raises
:class:`~memory_core.cognition.skill.SkillOutputError` like any other skill; provider errors
propagate untouched.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from memory_core.cognition.llm.numbered_answers import sort_numbered
from memory_core.cognition.llm.prompts import BATCH_RECONCILE_PROMPT
from memory_core.cognition.llm.reconciliation import render_existing, render_new_fact
from memory_core.cognition.llm_skill import LLMSkill
from memory_core.cognition.models import BatchReconcileInput, BatchReconcileOutput, ReconcileInput, ReconcileOutput
from memory_core.cognition.skill import SkillOutcome, SkillOutputError
from memory_core.providers.protocols import LLMProvider, salvage_list

__all__ = ["BATCH_RECONCILE_SKILL", "BatchReconcileSkill", "render_reconcile_batch"]

BATCH_RECONCILE_SKILL = "reconcile_batch"


class _BatchDecision(ReconcileOutput):
    """The decision on one numbered new fact."""

    index: int = Field(description="the new fact's number, copied from its header")


class _BatchAnswer(BaseModel):
    """One decision per numbered new fact, in any order."""

    decisions: list[_BatchDecision] = Field(default_factory=list)


def _fact_block(number: int, item: ReconcileInput) -> list[str]:
    return [
        "",
        f"### Fact {number}",
        f"Entity: {item.entity_name}",
        render_new_fact(item),
        "EXISTING facts:",
        *(render_existing(fact) for fact in item.existing),
    ]


def render_reconcile_batch(batch: BatchReconcileInput) -> str:
    """The user message of a batch: how many facts, then every new fact under its number with its own list."""
    lines = [f"New facts: {len(batch.items)}, numbered 1 to {len(batch.items)}."]
    for number, item in enumerate(batch.items, start=1):
        lines.extend(_fact_block(number, item))
    return "\n".join(lines)


class BatchReconcileSkill:
    """Reconciliation of several new facts in one call; per fact a decision or the reason it has none."""

    def __init__(self, provider: LLMProvider, *, temperature: float = 0.0, max_tokens: int | None = None) -> None:
        self.llm: LLMSkill[BatchReconcileInput, _BatchAnswer] = LLMSkill(
            name=BATCH_RECONCILE_SKILL,
            system_prompt=BATCH_RECONCILE_PROMPT,
            render_user=render_reconcile_batch,
            output_model=_BatchAnswer,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )

    @property
    def name(self) -> str:
        """``reconcile_batch``."""
        return BATCH_RECONCILE_SKILL

    def run(self, batch: BatchReconcileInput, /) -> SkillOutcome[BatchReconcileOutput]:
        """Ask once for every new fact; check each decision on its own."""
        try:
            outcome = self.llm.run(batch)
        except SkillOutputError as error:
            salvaged = salvage_list(error.raw_text, "decisions")
            if salvaged is None:
                raise
            return SkillOutcome(output=self._sort(batch, salvaged), usage=error.usage, error=error.message)
        items: list[Any] = list(outcome.output.decisions)
        return SkillOutcome(output=self._sort(batch, items), usage=outcome.usage, duration_ms=outcome.duration_ms)

    @staticmethod
    def _sort(batch: BatchReconcileInput, items: list[Any]) -> BatchReconcileOutput:
        count = len(batch.items)
        results: list[ReconcileOutput | None] = [None] * count
        shares = [0] * count
        sorted_parts = sort_numbered(
            items,
            _BatchDecision,
            count,
            missing="no decision for this fact",
            unusable="unusable decision",
            repeated="decided more than once",
        )
        errors = sorted_parts.errors
        for index, item in sorted_parts.usable.items():
            position = index - 1
            decision = ReconcileOutput(action=item.action, target_fact_id=item.target_fact_id, reason=item.reason)
            if decision.action == "ADD":
                decision = decision.model_copy(update={"target_fact_id": None})
            else:
                target = (decision.target_fact_id or "").strip()
                known = {fact.fact_id for fact in batch.items[position].existing}
                if target not in known:
                    errors[position] = (
                        f"{decision.action} names no target" if not target else f"targets unknown fact {target!r}"
                    )
                    continue
                decision = decision.model_copy(update={"target_fact_id": target})
            results[position] = decision
            errors[position] = None
            shares[position] = len(item.model_dump_json())
        return BatchReconcileOutput(results=results, errors=errors, shares=shares)

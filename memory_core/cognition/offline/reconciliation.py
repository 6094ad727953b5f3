"""Offline reconciliation: deterministic slot and similarity rules, not an LLM.

Decides what a new fact does to the entity's existing facts, in this order:

1. an existing fact with the same text (accents, case and punctuation ignored) -> ``NOOP``;
2. an existing fact in the same *single-valued* attribute slot (residence, employer,
   partner...) -> ``UPDATE`` it: a new value replaces the old one (the pipeline orders the
   two by ``valid_from``; this rule only pairs them);
3. a new fact that retracts ("não ... mais", "no longer", "not anymore", "já não") and an
   existing fact of the same slot, at least ``RETRACTION_SIMILARITY`` similar, that does not
   -> ``UPDATE`` it: the retraction takes its place; and the converse, a new statement and an
   existing retraction of it -> ``UPDATE`` the retraction (said before it, the statement is
   history; said after, it is liked again). Either way the pair is ordered by time, so the
   outcome does not depend on which of the two was processed first;
4. an existing fact at least ``duplicate_similarity`` similar, and retracting if and only if
   the new one is -> ``NOOP``;
5. otherwise ``ADD``.

Exact repeats come first so that saying "I live in São Paulo" twice confirms the fact instead
of superseding it, and retractions come before the similarity rule because "não gosta mais
de jazz" is very similar to "gosta de jazz" (the hashing embedder drops both "não" and
"mais") yet says the opposite. Among several matching facts the most similar wins, then the
smallest ``fact_id``: the decision never depends on the order of ``existing``. ``DELETE`` is
never produced by these rules.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Protocol, TypeVar

from memory_core.cognition.models import ReconcileInput, ReconcileOutput
from memory_core.cognition.offline.patterns import RETRACTION
from memory_core.cognition.skill import SkillOutcome
from memory_core.write.attribute_keys import is_single_valued
from memory_core.write.naming import fold

__all__ = [
    "DUPLICATE_SIMILARITY",
    "RECONCILE",
    "RETRACTION_SIMILARITY",
    "OfflineReconcileSkill",
    "reconcile",
    "retraction_partner",
    "retracts",
]

RECONCILE = "reconcile"
DUPLICATE_SIMILARITY = 0.92
# A retraction and the statement it ends share most words ("likes jazz" / "no longer likes jazz":
# 0.82 with the hashing embedder); "likes rock" / "no longer likes jazz" is 0.52.
RETRACTION_SIMILARITY = 0.7

_PUNCTUATION = re.compile(r"[^\w\s]")


def _normalized(text: str) -> str:
    return " ".join(_PUNCTUATION.sub(" ", fold(text)).split())


def retracts(text: str) -> bool:
    """Whether ``text`` ends something said before ("no longer likes jazz", "não mora mais em...")."""
    return RETRACTION.search(fold(text)) is not None


class _Compared(Protocol):
    """An existing fact as compared with a new one (a skill input's, or the upsert's re-read)."""

    @property
    def fact_id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def similarity(self) -> float: ...


_F = TypeVar("_F", bound=_Compared)


def _best(facts: Iterable[_F]) -> _F | None:
    """The most similar fact, ties broken by the smallest ``fact_id``."""
    return min(facts, key=lambda fact: (-fact.similarity, fact.fact_id), default=None)


def retraction_partner(same_slot: Iterable[_F], *, retracting: bool) -> _F | None:
    """The other side of a retraction among facts of the new fact's slot (rule 3), or None.

    For a retraction, the statement it ends; for a statement, a retraction of it. At least
    ``RETRACTION_SIMILARITY`` similar; the most similar wins.
    """
    return _best(
        fact for fact in same_slot if fact.similarity >= RETRACTION_SIMILARITY and retracts(fact.text) is not retracting
    )


def reconcile(skill_input: ReconcileInput, *, duplicate_similarity: float = DUPLICATE_SIMILARITY) -> ReconcileOutput:
    """ADD / UPDATE / NOOP for one new fact by the rules in the module docstring."""
    existing = sorted(skill_input.existing, key=lambda fact: fact.fact_id)
    new_text = _normalized(skill_input.new_text)
    key = skill_input.new_attribute_key

    repeat = next((fact for fact in existing if _normalized(fact.text) == new_text), None)
    if repeat is not None:
        return ReconcileOutput(action="NOOP", target_fact_id=repeat.fact_id, reason="the same fact is already known")

    same_slot = [fact for fact in existing if key is not None and fact.attribute_key == key]
    if is_single_valued(key):
        slot = _best(same_slot)
        if slot is not None:
            return ReconcileOutput(
                action="UPDATE",
                target_fact_id=slot.fact_id,
                reason=f"{key} holds one value: the new statement replaces the old one",
            )

    retracting = retracts(skill_input.new_text)
    opposite = retraction_partner(same_slot, retracting=retracting)
    if opposite is not None:
        return ReconcileOutput(
            action="UPDATE",
            target_fact_id=opposite.fact_id,
            reason=(
                f"the new statement retracts the {key} fact"
                if retracting
                else f"the {key} fact retracts the new statement: the later of the two holds"
            ),
        )

    duplicate = _best(
        fact for fact in existing if fact.similarity >= duplicate_similarity and retracts(fact.text) is retracting
    )
    if duplicate is not None:
        return ReconcileOutput(
            action="NOOP",
            target_fact_id=duplicate.fact_id,
            reason=f"near-duplicate (similarity {duplicate.similarity:.2f})",
        )
    return ReconcileOutput(action="ADD", reason="new information")


class OfflineReconcileSkill:
    """Rule-based reconciliation (no LLM): ``Skill[ReconcileInput, ReconcileOutput]``."""

    def __init__(self, *, duplicate_similarity: float = DUPLICATE_SIMILARITY) -> None:
        self.duplicate_similarity = duplicate_similarity

    @property
    def name(self) -> str:
        """The skill's stable identifier."""
        return RECONCILE

    def run(self, skill_input: ReconcileInput, /) -> SkillOutcome[ReconcileOutput]:
        """Decide ADD / UPDATE / NOOP by slot, retraction and similarity rules; zero token usage."""
        started = time.perf_counter()
        output = reconcile(skill_input, duplicate_similarity=self.duplicate_similarity)
        return SkillOutcome(output=output, duration_ms=(time.perf_counter() - started) * 1000.0)

"""The write path's skills answered by an LLM, over any :class:`~memory_core.providers.protocols.LLMProvider`.

Each skill is a prompt (:mod:`memory_core.cognition.llm.prompts`) plus the output
model's JSON schema, sent through :class:`~memory_core.cognition.llm_skill.LLMSkill`.
Unusable answers raise :class:`~memory_core.cognition.skill.SkillOutputError` and
provider errors propagate: fallbacks are the pipeline's decision.
"""

from __future__ import annotations

from memory_core.cognition.llm.batch_extraction import BatchExtractionSkill
from memory_core.cognition.llm.batch_reconciliation import BatchReconcileSkill
from memory_core.cognition.llm.directives import ContradictionSkill, DirectiveDetectionSkill
from memory_core.cognition.llm.emotion import EmotionSkill
from memory_core.cognition.llm.extraction import BlindExtractionSkill, InformedExtractionSkill
from memory_core.cognition.llm.reconciliation import ReconcileSkill
from memory_core.cognition.llm.resolution import DisambiguationSkill
from memory_core.cognition.offline.directives import OfflineContradictionSkill
from memory_core.cognition.skill import FallbackSkill
from memory_core.cognition.write_skills import WriteSkills
from memory_core.providers.protocols import LLMProvider

__all__ = [
    "BatchExtractionSkill",
    "BatchReconcileSkill",
    "BlindExtractionSkill",
    "ContradictionSkill",
    "DirectiveDetectionSkill",
    "DisambiguationSkill",
    "EmotionSkill",
    "InformedExtractionSkill",
    "ReconcileSkill",
    "build_llm_write_skills",
]


def build_llm_write_skills(provider: LLMProvider) -> WriteSkills:
    """Every write-path skill answered by ``provider`` (``kind="llm"``), without fallbacks.

    Wrap them in :class:`~memory_core.cognition.skill.FallbackSkill` with their
    offline twins where the seeds want a fail-safe. The directive judge is the exception: an
    unusable verdict falls back to its rule twin here (seeds: the check is fail-safe).
    """
    return WriteSkills(
        kind="llm",
        extract_informed=InformedExtractionSkill(provider),
        extract_blind=BlindExtractionSkill(provider),
        disambiguate=DisambiguationSkill(provider),
        reconcile=ReconcileSkill(provider),
        tag_emotion=EmotionSkill(provider),
        extract_batch=BatchExtractionSkill(provider),
        reconcile_batch=BatchReconcileSkill(provider),
        detect_directives=DirectiveDetectionSkill(provider),
        judge_directive=FallbackSkill(ContradictionSkill(provider), OfflineContradictionSkill()),
    )

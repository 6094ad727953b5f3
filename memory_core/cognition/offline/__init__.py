"""Offline implementations of the cognition skills: deterministic rules, not an LLM.

They run when no LLM is configured (``ARANDU_LLM_PROVIDER=offline``) and as the
fallback when an LLM answers something unusable. They are honest about what they
are: keyword, pattern and overlap heuristics that cost no tokens, give the same
output for the same input every time, and understand far less than a model does.
A memory written by them is plainer (fewer facts, coarser links and tags), never
invented.
"""

from __future__ import annotations

from memory_core.cognition.offline.directives import OfflineContradictionSkill, OfflineDirectiveDetectionSkill
from memory_core.cognition.offline.disambiguation import OfflineDisambiguationSkill
from memory_core.cognition.offline.emotion import OfflineEmotionSkill
from memory_core.cognition.offline.extraction import EXTRACT_BLIND, EXTRACT_INFORMED, OfflineExtractionSkill
from memory_core.cognition.offline.reconciliation import OfflineReconcileSkill
from memory_core.cognition.write_skills import WriteSkills

__all__ = [
    "OfflineContradictionSkill",
    "OfflineDirectiveDetectionSkill",
    "OfflineDisambiguationSkill",
    "OfflineEmotionSkill",
    "OfflineExtractionSkill",
    "OfflineReconcileSkill",
    "build_offline_write_skills",
]


def build_offline_write_skills(*, person_prefix_min_chars: int = 3) -> WriteSkills:
    """Every write-path skill as deterministic rules (``kind="offline"``): no LLM, no tokens."""
    return WriteSkills(
        kind="offline",
        extract_informed=OfflineExtractionSkill(EXTRACT_INFORMED),
        extract_blind=OfflineExtractionSkill(EXTRACT_BLIND),
        disambiguate=OfflineDisambiguationSkill(min_prefix=person_prefix_min_chars),
        reconcile=OfflineReconcileSkill(),
        tag_emotion=OfflineEmotionSkill(),
        detect_directives=OfflineDirectiveDetectionSkill(),
        judge_directive=OfflineContradictionSkill(),
    )

"""The bundle of skills the maintenance jobs call, built for the configured LLM or offline."""

from __future__ import annotations

from dataclasses import dataclass

from memory_core.cognition.maintenance_models import (
    CommunityInput,
    CommunityOutput,
    ConsolidationInput,
    ConsolidationOutput,
    DistillInput,
    DistillOutput,
    ProfileInput,
    ProfileOutput,
    SummaryInput,
    SummaryOutput,
)
from memory_core.cognition.models import EmotionInput, EmotionOutput
from memory_core.cognition.skill import FallbackSkill, Skill
from memory_core.providers.factory import build_llm_provider
from memory_core.providers.protocols import LLMProvider
from memory_core.settings import Settings


@dataclass(frozen=True)
class MaintenanceSkills:
    """Every skill of the background jobs; ``kind`` says which implementation ("llm" or "offline").

    ``summarize_cluster`` and ``summarize_entity`` share their input and output but are
    separate skills so that token accounting and prompts can tell them apart.
    """

    kind: str
    summarize_cluster: Skill[SummaryInput, SummaryOutput]
    summarize_entity: Skill[SummaryInput, SummaryOutput]
    describe_community: Skill[CommunityInput, CommunityOutput]
    consolidate: Skill[ConsolidationInput, ConsolidationOutput]
    build_profile: Skill[ProfileInput, ProfileOutput]
    distill: Skill[DistillInput, DistillOutput]
    tag_emotion: Skill[EmotionInput, EmotionOutput]


def build_offline_maintenance_skills() -> MaintenanceSkills:
    """Every maintenance skill as deterministic rules (``kind="offline"``): no LLM, no tokens."""
    from memory_core.cognition.offline.community import OfflineCommunitySkill
    from memory_core.cognition.offline.consolidation import OfflineConsolidationSkill
    from memory_core.cognition.offline.distill import OfflineDistillSkill
    from memory_core.cognition.offline.emotion import OfflineEmotionSkill
    from memory_core.cognition.offline.profile import OfflineProfileSkill
    from memory_core.cognition.offline.summary import OfflineSummarySkill

    return MaintenanceSkills(
        kind="offline",
        summarize_cluster=OfflineSummarySkill("summarize_cluster"),
        summarize_entity=OfflineSummarySkill("summarize_entity"),
        describe_community=OfflineCommunitySkill(),
        consolidate=OfflineConsolidationSkill(),
        build_profile=OfflineProfileSkill(),
        distill=OfflineDistillSkill(),
        tag_emotion=OfflineEmotionSkill(),
    )


def build_llm_maintenance_skills(provider: LLMProvider) -> MaintenanceSkills:
    """Every maintenance skill answered by ``provider`` (``kind="llm"``), each with its offline twin as fallback.

    An unusable answer (invalid JSON, wrong shape) falls back to the rules; provider
    errors propagate so the task can retry them.
    """
    from memory_core.cognition.llm.community import CommunitySkill
    from memory_core.cognition.llm.consolidation import ConsolidationSkill
    from memory_core.cognition.llm.distill import DistillSkill
    from memory_core.cognition.llm.emotion import EmotionSkill
    from memory_core.cognition.llm.profile import ProfileSkill
    from memory_core.cognition.llm.summary import SummarySkill

    offline = build_offline_maintenance_skills()
    return MaintenanceSkills(
        kind="llm",
        summarize_cluster=FallbackSkill(SummarySkill(provider, "summarize_cluster"), offline.summarize_cluster),
        summarize_entity=FallbackSkill(SummarySkill(provider, "summarize_entity"), offline.summarize_entity),
        describe_community=FallbackSkill(CommunitySkill(provider), offline.describe_community),
        consolidate=FallbackSkill(ConsolidationSkill(provider), offline.consolidate),
        build_profile=FallbackSkill(ProfileSkill(provider), offline.build_profile),
        distill=FallbackSkill(DistillSkill(provider), offline.distill),
        tag_emotion=FallbackSkill(EmotionSkill(provider), offline.tag_emotion),
    )


def build_maintenance_skills(settings: Settings) -> MaintenanceSkills:
    """LLM skills (with offline fallbacks) when an LLM is configured, offline rules otherwise."""
    provider = build_llm_provider(settings)
    if provider is None:
        return build_offline_maintenance_skills()
    return build_llm_maintenance_skills(provider)

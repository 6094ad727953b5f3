"""Cognition: the typed skills the pipeline calls instead of building prompts.

Every skill takes a typed input and returns a pydantic model in a
:class:`SkillOutcome`. LLM skills are built on :class:`LLMSkill`; their deterministic
offline counterparts live in :mod:`memory_core.cognition.offline`.
"""

from memory_core.cognition.llm_skill import JSON_MODE, LLMSkill
from memory_core.cognition.skill import FallbackSkill, Skill, SkillOutcome, SkillOutputError

__all__ = ["JSON_MODE", "FallbackSkill", "LLMSkill", "Skill", "SkillOutcome", "SkillOutputError"]

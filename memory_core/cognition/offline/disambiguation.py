"""Offline entity disambiguation: name rules, not an LLM.

Called for a mention whose best fuzzy candidates are ambiguous. A candidate qualifies when,
after folding accents and case, its display name equals the mention, the mention is its
first or last name ("Souza" ~ "Carolina Souza"), or, for people, the two first names share
a prefix of at least ``min_prefix`` letters that is a whole diminutive ("Carol" ~ "Carolina")
or most of the mention ("Guili" ~ "Guilherme"). Among qualifying candidates the highest
similarity wins (then the stronger rule, then the canonical key, for determinism); when none
qualifies the mention is a new entity (``match=None``).
"""

from __future__ import annotations

import time

from memory_core.cognition.models import DisambiguationInput, DisambiguationOutput, EntityCandidate
from memory_core.cognition.skill import SkillOutcome
from memory_core.write.naming import normalize_alias, normalize_entity_type

__all__ = ["DISAMBIGUATE", "OfflineDisambiguationSkill", "disambiguate"]

DISAMBIGUATE = "disambiguate"

# A shared prefix that is not a whole first name must cover more than this share of the mention:
# "Guili" ~ "Guilherme" (4 of 5 letters) yes, "Marta" ~ "Marcos" (3 of 5) no.
_PREFIX_SHARE = 0.6
_UNTYPED = frozenset({"", "other"})


def _common_prefix(left: str, right: str) -> int:
    length = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        length += 1
    return length


def _compatible(mention_type: str, candidate_type: str) -> bool:
    mention, candidate = normalize_entity_type(mention_type), normalize_entity_type(candidate_type)
    return mention in _UNTYPED or candidate in _UNTYPED or mention == candidate


def _rule(mention: str, mention_type: str, candidate: EntityCandidate, min_prefix: int) -> tuple[int, str] | None:
    """``(strength, reason)`` when the candidate qualifies; lower strength is a stronger rule."""
    name = normalize_alias(candidate.display_name)
    if not name or not mention:
        return None
    if name == mention:
        return 0, f"'{candidate.display_name}' is the same name once accents and case are ignored"
    words, mention_words = name.split(), mention.split()
    if len(mention_words) == 1 and mention in (words[0], words[-1]):
        return 1, f"'{candidate.display_name}' has '{mention}' as its first or last name"
    is_person = "person" in (normalize_entity_type(mention_type), normalize_entity_type(candidate.entity_type))
    if is_person:
        first, other = mention_words[0], words[0]
        shared = _common_prefix(first, other)
        whole = shared == min(len(first), len(other))
        if shared >= min_prefix and (whole or shared / len(first) > _PREFIX_SHARE):
            return 2, f"'{candidate.display_name}' starts like '{first}' (shared prefix '{first[:shared]}')"
    return None


def disambiguate(skill_input: DisambiguationInput, *, min_prefix: int = 3) -> DisambiguationOutput:
    """Pick the candidate a mention refers to by name rules, or ``match=None`` (see the module docstring)."""
    mention = normalize_alias(skill_input.mention)
    qualified: list[tuple[float, int, str, str]] = []
    for candidate in skill_input.candidates:
        if not _compatible(skill_input.mention_type, candidate.entity_type):
            continue
        rule = _rule(mention, skill_input.mention_type, candidate, min_prefix)
        if rule is not None:
            qualified.append((-candidate.similarity, rule[0], candidate.canonical_key, rule[1]))
    if not qualified:
        return DisambiguationOutput(
            match=None,
            reason="no candidate has the same name, first/last name or a diminutive prefix: a new entity",
        )
    _, _, key, reason = min(qualified)
    return DisambiguationOutput(match=key, reason=f"offline rule: {reason}")


class OfflineDisambiguationSkill:
    """Rule-based disambiguation (no LLM): ``Skill[DisambiguationInput, DisambiguationOutput]``."""

    def __init__(self, *, min_prefix: int = 3) -> None:
        self.min_prefix = min_prefix

    @property
    def name(self) -> str:
        """The skill's stable identifier."""
        return DISAMBIGUATE

    def run(self, skill_input: DisambiguationInput, /) -> SkillOutcome[DisambiguationOutput]:
        """Choose a candidate by name rules; zero token usage."""
        started = time.perf_counter()
        output = disambiguate(skill_input, min_prefix=self.min_prefix)
        return SkillOutcome(output=output, duration_ms=(time.perf_counter() - started) * 1000.0)

"""Offline entity profiles: every distinct fact, grouped by topic, in the facts' own words.

A rule cannot write prose, so the profile is an ordered digest: a first line naming the
entity and its type, then one line per topic (the attribute-key namespace: ``work``,
``location``, ``preference``...; facts without a key come last, under no heading), each
listing that topic's distinct facts, newest first. Topics with more facts come first. The
text is bounded by :data:`PROFILE_MAX_CHARS`; facts that do not fit are counted at the end
rather than silently dropped. Same input, same output, no tokens.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

from memory_core.cognition.maintenance_models import FactLine, ProfileInput, ProfileOutput
from memory_core.cognition.skill import SkillOutcome
from memory_core.write.naming import fold

__all__ = ["BUILD_PROFILE", "PROFILE_MAX_CHARS", "OfflineProfileSkill", "build_profile"]

BUILD_PROFILE = "build_profile"
PROFILE_MAX_CHARS = 4000
_OLDEST = datetime.min.replace(tzinfo=UTC)


def _sentence(text: str) -> str:
    cleaned = " ".join(text.split())
    if cleaned and cleaned[-1] not in ".!?…":
        cleaned += "."
    return cleaned


def _topic(fact: FactLine) -> str:
    if not fact.attribute_key:
        return ""
    return fact.attribute_key.split(".", 1)[0].strip().replace("_", " ")


def _distinct(facts: list[FactLine]) -> list[FactLine]:
    seen: set[str] = set()
    kept: list[FactLine] = []
    for fact in sorted(facts, key=lambda item: item.valid_from or _OLDEST, reverse=True):
        key = fold(" ".join(fact.text.split())).rstrip(".!?… ")
        if key and key not in seen:
            seen.add(key)
            kept.append(fact)
    return kept


def build_profile(skill_input: ProfileInput) -> ProfileOutput:
    """The digest profile of ``skill_input`` (see the module docstring); empty when it has no fact."""
    facts = _distinct(skill_input.facts)
    if not facts:
        return ProfileOutput(profile_text="")
    name = " ".join(skill_input.entity_name.split())
    kind = " ".join(skill_input.entity_type.split())
    by_topic: dict[str, list[FactLine]] = {}
    for fact in facts:
        by_topic.setdefault(_topic(fact), []).append(fact)
    sizes = Counter({topic: len(members) for topic, members in by_topic.items()})
    # Named topics by size (ties alphabetical), the unnamed group last.
    order = sorted((topic for topic in by_topic if topic), key=lambda topic: (-sizes[topic], topic))
    if "" in by_topic:
        order.append("")
    lines = [f"{name} ({kind})" if kind else name]
    used = len(lines[0])
    left_out = 0
    for topic in order:
        sentences: list[str] = []
        for fact in by_topic[topic]:
            sentence = _sentence(fact.text)
            if used + len(sentence) + 1 > PROFILE_MAX_CHARS:
                left_out += 1
                continue
            sentences.append(sentence)
            used += len(sentence) + 1
        if sentences:
            body = " ".join(sentences)
            lines.append(f"- {topic}: {body}" if topic else f"- {body}")
    if left_out:
        lines.append(f"(+{left_out})")
    return ProfileOutput(profile_text="\n".join(lines))


class OfflineProfileSkill:
    """Rule-based ``Skill[ProfileInput, ProfileOutput]``: the entity's facts grouped by topic."""

    @property
    def name(self) -> str:
        """``build_profile``."""
        return BUILD_PROFILE

    def run(self, skill_input: ProfileInput, /) -> SkillOutcome[ProfileOutput]:
        """Build the digest profile; zero token usage."""
        started = time.perf_counter()
        output = build_profile(skill_input)
        return SkillOutcome(output=output, duration_ms=(time.perf_counter() - started) * 1000.0)

"""Offline description of a community of clusters: the words their summaries share, and the summaries.

Rules cannot name a theme they do not see, so the title is made of the content words (see
:mod:`.keywords`) found in the most summaries, at least two of them, ranked by how many
summaries use them, then names (capitalised) before other words, then by first appearance.
The observation says how many groups are related and by which words, then quotes the first
sentence of each summary (at most :data:`MAX_QUOTED`); what it writes itself is English
whatever the summaries' language (seeds W20), the quotes keep their words. With no shared
word the title falls back to the first summary's opening words.
"""

from __future__ import annotations

import time
from collections import Counter

from memory_core.cognition.maintenance_models import CommunityInput, CommunityOutput
from memory_core.cognition.offline.keywords import Keyword, content_words
from memory_core.cognition.offline.text import split_sentences
from memory_core.cognition.skill import SkillOutcome

__all__ = ["DESCRIBE_COMMUNITY", "MAX_QUOTED", "OfflineCommunitySkill", "describe_community"]

DESCRIBE_COMMUNITY = "describe_community"
MAX_QUOTED = 4
_TITLE_WORDS = 3
_FALLBACK_TITLE_WORDS = 6
_TITLE_MAX_CHARS = 256


def _shared_words(summaries: list[str]) -> list[Keyword]:
    per_summary = [content_words(summary) for summary in summaries]
    spread = Counter(word.folded for words in per_summary for word in words)
    first: dict[str, tuple[int, Keyword]] = {}
    for words in per_summary:
        for word in words:
            first.setdefault(word.folded, (len(first), word))
    shared = [entry for folded, entry in first.items() if spread[folded] >= 2]  # shared: in two summaries or more
    # Names (capitalised words) say more about a theme than verbs: they go first among equals.
    shared.sort(key=lambda entry: (-spread[entry[1].folded], not entry[1].shown[:1].isupper(), entry[0]))
    return [word for _, word in shared]


def _join(words: list[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def describe_community(skill_input: CommunityInput) -> CommunityOutput:
    """Title and observation of a community from its clusters' summaries (see the module docstring)."""
    summaries = [" ".join(summary.split()) for summary in skill_input.cluster_summaries if summary.strip()]
    if not summaries:
        return CommunityOutput(title="", observation="")
    shown = [word.shown for word in _shared_words(summaries)[:_TITLE_WORDS]]
    opening = " ".join(summaries[0].split()[:_FALLBACK_TITLE_WORDS]).rstrip(".,;:!?")
    title = ", ".join(shown) if shown else opening
    quotes = []
    for summary in summaries[:MAX_QUOTED]:
        sentences = split_sentences(summary)
        quotes.append(sentences[0] if sentences else summary)
    count = len(summaries)
    head = f"{count} related groups of memories" + (f", linked by {_join(shown)}" if shown else "")
    observation = f"{head}: " + " ".join(quotes)
    return CommunityOutput(title=title[:_TITLE_MAX_CHARS], observation=observation)


class OfflineCommunitySkill:
    """Rule-based ``Skill[CommunityInput, CommunityOutput]``: shared words and quoted summaries, no tokens."""

    @property
    def name(self) -> str:
        """``describe_community``."""
        return DESCRIBE_COMMUNITY

    def run(self, skill_input: CommunityInput, /) -> SkillOutcome[CommunityOutput]:
        """Describe the community by rules."""
        started = time.perf_counter()
        output = describe_community(skill_input)
        return SkillOutcome(output=output, duration_ms=(time.perf_counter() - started) * 1000.0)

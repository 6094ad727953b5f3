"""Offline summaries of a group of facts (a cluster, or one entity's facts): selection, not writing.

A rule cannot paraphrase, so the summary is made of the facts themselves: duplicates
(same text after folding) are dropped, the most recent facts come first (they are the
current truth), and at most three sentences are produced. With more than three facts the
first two are kept and a third sentence says how many more there are and which topics
(attribute-key namespaces: ``work``, ``location``...) they cover, in English whatever the
facts' language (seeds W20: generated text is English; the quoted facts keep their own words,
which a rule cannot translate). The label is the subject followed by its two most
frequent topics. Same input, same output, no tokens.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

from memory_core.cognition.maintenance_models import FactLine, SummaryInput, SummaryOutput
from memory_core.cognition.skill import SkillOutcome
from memory_core.write.naming import fold

__all__ = ["LABEL_MAX_CHARS", "OfflineSummarySkill", "summarize_facts"]

LABEL_MAX_CHARS = 128
_MAX_SENTENCES = 3
_LABEL_TOPICS = 2
_SHOWN_TOPICS = 3
_OLDEST = datetime.min.replace(tzinfo=UTC)


def _sentence(text: str) -> str:
    cleaned = " ".join(text.split())
    if cleaned and cleaned[-1] not in ".!?…":
        cleaned += "."
    return cleaned


def _topic(attribute_key: str | None) -> str | None:
    if not attribute_key:
        return None
    head = attribute_key.split(".", 1)[0].strip().replace("_", " ")
    return head or None


def _distinct_newest_first(facts: list[FactLine]) -> list[FactLine]:
    seen: set[str] = set()
    unique: list[FactLine] = []
    for fact in facts:
        key = fold(" ".join(fact.text.split())).rstrip(".!?… ")
        if key and key not in seen:
            seen.add(key)
            unique.append(fact)
    # sorted() is stable: facts of the same instant keep the caller's order.
    return sorted(unique, key=lambda fact: fact.valid_from or _OLDEST, reverse=True)


def _join_words(words: list[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _more_sentence(count: int, topics: list[str]) -> str:
    noun = "fact" if count == 1 else "facts"
    about = f", about {_join_words(topics)}" if topics else ""
    return f"There {'is' if count == 1 else 'are'} {count} more {noun}{about}."


def _ranked_topics(facts: list[FactLine]) -> list[str]:
    counts = Counter(topic for fact in facts if (topic := _topic(fact.attribute_key)))
    # Most frequent first; ties alphabetical so the output never depends on hash order.
    return [topic for topic, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]


def summarize_facts(skill_input: SummaryInput) -> SummaryOutput:
    """A summary of at most three sentences and a label for ``skill_input`` (see the module docstring)."""
    subject = " ".join(skill_input.subject.split())
    facts = _distinct_newest_first(skill_input.facts)
    if not facts:
        return SummaryOutput(summary="", label=subject[:LABEL_MAX_CHARS])
    if len(facts) <= _MAX_SENTENCES:
        sentences = [_sentence(fact.text) for fact in facts]
    else:
        kept = facts[: _MAX_SENTENCES - 1]
        rest = facts[_MAX_SENTENCES - 1 :]
        sentences = [_sentence(fact.text) for fact in kept]
        sentences.append(_more_sentence(len(rest), _ranked_topics(rest)[:_SHOWN_TOPICS]))
    topics = _ranked_topics(facts)[:_LABEL_TOPICS]
    label = f"{subject}: {', '.join(topics)}" if topics and subject else subject or ", ".join(topics)
    return SummaryOutput(summary=" ".join(sentences), label=label[:LABEL_MAX_CHARS])


class OfflineSummarySkill:
    """Rule-based ``Skill[SummaryInput, SummaryOutput]``; ``name`` tells cluster and entity summaries apart."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def name(self) -> str:
        """``summarize_cluster`` or ``summarize_entity`` (whatever the bundle named it)."""
        return self._name

    def run(self, skill_input: SummaryInput, /) -> SkillOutcome[SummaryOutput]:
        """Summarise the facts by selection; zero token usage."""
        started = time.perf_counter()
        output = summarize_facts(skill_input)
        return SkillOutcome(output=output, duration_ms=(time.perf_counter() - started) * 1000.0)

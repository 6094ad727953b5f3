"""Offline consolidation (L2): only what rules can see honestly, never an invented insight.

Three rules, each with its evidence ids:

* **pattern**: a speaker says the same thing again (same text once folded), or mentions the
  same content word (see :mod:`.keywords`) in at least :data:`PATTERN_MIN_EVENTS` messages on
  at least two different days;
* **contradiction**: two active facts about the same entity on the same *single-valued*
  attribute key (``location.residence``, ``work.employer``... from the catalogue) that became
  true at different times and say different things;
* **trend**: a speaker's emotional tone (the events' emotion tags) moves clearly between the
  first and the second half of the window (mean valence shift of at least
  :data:`TREND_MIN_SHIFT`, with at least two tagged messages in each half).

No rule produces an ``insight``: that takes understanding. Titles are stable (a pattern's
title names the speaker and the word), so the job reinforces the same observation run after
run instead of adding another. Titles and texts are English whatever the conversation's
language (seeds W20); the messages and facts they quote keep their own words.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from datetime import UTC, datetime

from memory_core.cognition.maintenance_models import (
    ConsolidationInput,
    ConsolidationOutput,
    EventLine,
    FactLine,
    ObservationDraft,
)
from memory_core.cognition.offline.keywords import content_words
from memory_core.cognition.skill import SkillOutcome
from memory_core.write.attribute_keys import ATTRIBUTE_CATALOGUE
from memory_core.write.naming import fold

__all__ = [
    "CONSOLIDATE",
    "MAX_PATTERNS",
    "PATTERN_MIN_EVENTS",
    "TREND_MIN_SHIFT",
    "OfflineConsolidationSkill",
    "consolidate",
]

CONSOLIDATE = "consolidate"
PATTERN_MIN_EVENTS = 3
MAX_PATTERNS = 3
TREND_MIN_SHIFT = 0.5
_TREND_MIN_PER_HALF = 2
_QUOTE_CHARS = 120


def _labels(blob: str) -> frozenset[str]:
    return frozenset(blob.split())


_POSITIVE = _labels(
    "joy happy happiness excitement excited gratitude grateful love pride proud relief relieved "
    "contentment content hope hopeful enthusiasm amusement satisfaction optimism"
)
_NEGATIVE = _labels(
    "sadness sad anger angry fear afraid tiredness tired frustration frustrated anxiety anxious "
    "stress stressed disappointment disappointed loneliness lonely worry worried grief guilt shame "
    "boredom irritation annoyance exhaustion"
)
_SINGLE_VALUED = frozenset(key for key, spec in ATTRIBUTE_CATALOGUE.items() if spec.single_valued)


def _day(moment: datetime) -> str:
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%d")


def _quote(text: str) -> str:
    cleaned = " ".join(text.split())
    return cleaned if len(cleaned) <= _QUOTE_CHARS else cleaned[: _QUOTE_CHARS - 3].rstrip() + "..."


# --- patterns ------------------------------------------------------------------------------


def _repeated_statements(speaker: str, events: list[EventLine]) -> list[ObservationDraft]:
    by_text: dict[str, list[EventLine]] = defaultdict(list)
    for event in events:
        key = " ".join(fold(event.text).split()).strip(" .!?…")
        if key:
            by_text[key].append(event)
    drafts = []
    for repeats in by_text.values():
        if len(repeats) < 2:  # repeated: said a second time
            continue
        quote = _quote(repeats[0].text)
        title, body = f"{speaker} repeats: {quote}", f"{speaker} said this {len(repeats)} times: {quote}"
        drafts.append(
            ObservationDraft(
                kind="pattern",
                title=title,
                text=body,
                confidence=min(0.9, 0.5 + 0.1 * len(repeats)),
                supporting_event_ids=[event.event_id for event in repeats],
            )
        )
    return drafts


def _recurring_words(speaker: str, events: list[EventLine]) -> list[ObservationDraft]:
    mentions: dict[str, list[EventLine]] = defaultdict(list)
    shown: dict[str, str] = {}
    for event in events:
        for word in content_words(event.text):
            mentions[word.folded].append(event)
            # A name stays capitalised; a word capitalised only at the start of a sentence does not.
            if word.folded not in shown or not word.shown[:1].isupper():
                shown[word.folded] = word.shown if word.shown[:1].isupper() else word.shown.lower()
    recurring = [
        (folded, hits)
        for folded, hits in mentions.items()
        if len(hits) >= PATTERN_MIN_EVENTS and len({_day(event.occurred_at) for event in hits}) >= 2
    ]
    # The most mentioned first; ties by the word, so the choice is stable.
    recurring.sort(key=lambda item: (-len(item[1]), item[0]))
    drafts = []
    for folded, hits in recurring[:MAX_PATTERNS]:
        label, days = shown[folded], len({_day(event.occurred_at) for event in hits})
        first, last = _day(hits[0].occurred_at), _day(hits[-1].occurred_at)
        title = f"{speaker} often mentions {label}"
        body = f"{speaker} mentioned {label} in {len(hits)} messages on {days} different days, from {first} to {last}."
        drafts.append(
            ObservationDraft(
                kind="pattern",
                title=title,
                text=body,
                confidence=min(0.9, 0.4 + 0.1 * len(hits)),
                supporting_event_ids=[event.event_id for event in hits],
            )
        )
    return drafts


# --- contradictions -----------------------------------------------------------------------


def _contradictions(facts: list[FactLine]) -> list[ObservationDraft]:
    groups: dict[tuple[str, str], list[FactLine]] = defaultdict(list)
    for fact in facts:
        if fact.entity_key and fact.attribute_key in _SINGLE_VALUED and fact.valid_from is not None:
            groups[(fact.entity_key, fact.attribute_key)].append(fact)
    drafts = []
    for (entity_key, attribute_key), group in sorted(groups.items()):
        distinct = {fold(" ".join(fact.text.split())).rstrip(". ") for fact in group}
        moments = {fact.valid_from for fact in group}
        if len(distinct) < 2 or len(moments) < 2:  # a contradiction takes two
            continue
        ordered = sorted(group, key=lambda fact: (fact.valid_from or datetime.min.replace(tzinfo=UTC), fact.fact_id))
        older, newer = ordered[0], ordered[-1]
        # Both dates exist: facts without one were filtered out above.
        older_day = _day(older.valid_from or datetime.min.replace(tzinfo=UTC))
        newer_day = _day(newer.valid_from or datetime.min.replace(tzinfo=UTC))
        quoted = f'"{_quote(older.text)}" ({older_day}) / "{_quote(newer.text)}" ({newer_day})'
        title = f"Conflicting facts: {attribute_key} of {entity_key}"
        body = f"{len(group)} active facts disagree on {attribute_key}: {quoted}. The newer one is likely current."
        drafts.append(
            ObservationDraft(
                kind="contradiction",
                title=title,
                text=body,
                confidence=0.9,
                supporting_fact_ids=[fact.fact_id for fact in ordered],
            )
        )
    return drafts


# --- trends --------------------------------------------------------------------------------


def _valence(emotion: str) -> float:
    label = emotion.strip().lower()
    if label in _POSITIVE:
        return 1.0
    if label in _NEGATIVE:
        return -1.0
    return 0.0


def _dominant(events: list[EventLine]) -> str:
    labels = Counter((event.emotion or "neutral").strip().lower() for event in events)
    return min(labels, key=lambda label: (-labels[label], label))


def _trend(speaker: str, events: list[EventLine]) -> list[ObservationDraft]:
    tagged = [event for event in events if event.emotion]
    half = len(tagged) // 2
    earlier, later = tagged[:half], tagged[half:]
    if len(earlier) < _TREND_MIN_PER_HALF or len(later) < _TREND_MIN_PER_HALF:
        return []
    shift = sum(_valence(e.emotion or "") for e in later) / len(later) - sum(
        _valence(e.emotion or "") for e in earlier
    ) / len(earlier)
    if abs(shift) < TREND_MIN_SHIFT:
        return []
    improving = shift > 0
    before, after = _dominant(earlier), _dominant(later)
    first, last = _day(tagged[0].occurred_at), _day(tagged[-1].occurred_at)
    title = f"{speaker}'s mood is {'improving' if improving else 'declining'}"
    body = (
        f"Across {len(tagged)} messages from {first} to {last}, {speaker}'s tone moved from mostly {before} "
        f"to mostly {after}."
    )
    return [
        ObservationDraft(
            kind="trend",
            title=title,
            text=body,
            confidence=round(min(0.9, 0.4 + 0.25 * abs(shift)), 3),
            supporting_event_ids=[event.event_id for event in tagged],
        )
    ]


def consolidate(skill_input: ConsolidationInput) -> ConsolidationOutput:
    """Patterns, contradictions and trends found by rules (see the module docstring)."""
    by_speaker: dict[str, list[EventLine]] = defaultdict(list)
    for event in sorted(skill_input.events, key=lambda event: (event.occurred_at, event.event_id)):
        by_speaker[event.speaker].append(event)
    observations: list[ObservationDraft] = []
    for speaker, events in sorted(by_speaker.items()):
        observations.extend(_repeated_statements(speaker, events))
        observations.extend(_recurring_words(speaker, events))
        observations.extend(_trend(speaker, events))
    observations.extend(_contradictions(skill_input.facts))
    return ConsolidationOutput(observations=observations)


class OfflineConsolidationSkill:
    """Rule-based ``Skill[ConsolidationInput, ConsolidationOutput]``: patterns, contradictions, trends."""

    @property
    def name(self) -> str:
        """``consolidate``."""
        return CONSOLIDATE

    def run(self, skill_input: ConsolidationInput, /) -> SkillOutcome[ConsolidationOutput]:
        """Consolidate by rules; zero token usage."""
        started = time.perf_counter()
        output = consolidate(skill_input)
        return SkillOutcome(output=output, duration_ms=(time.perf_counter() - started) * 1000.0)

"""Offline consolidation rules: what they find, and what they refuse to invent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memory_core.cognition.maintenance_models import ConsolidationInput, EventLine, FactLine
from memory_core.cognition.offline.consolidation import OfflineConsolidationSkill

START = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)


def _event(number: int, text: str, day: int, emotion: str | None = None, speaker: str = "Ana") -> EventLine:
    return EventLine(
        event_id=f"e{number}", speaker=speaker, text=text, occurred_at=START + timedelta(days=day), emotion=emotion
    )


def _fact(number: int, text: str, entity: str, key: str, day: int) -> FactLine:
    return FactLine(
        fact_id=f"f{number}", text=text, entity_key=entity, attribute_key=key, valid_from=START + timedelta(days=day)
    )


def _run(events: list[EventLine], facts: list[FactLine] | None = None) -> dict[str, list[str]]:
    output = OfflineConsolidationSkill().run(ConsolidationInput(events=events, facts=facts or [])).output
    found: dict[str, list[str]] = {}
    for draft in output.observations:
        found.setdefault(draft.kind, []).append(draft.title)
    return found


def test_english_patterns_repeats_and_a_declining_mood() -> None:
    events = [
        _event(1, "Yoga class was lovely, I am happy", 0, "joy"),
        _event(2, "Feeling great after yoga", 1, "joy"),
        _event(3, "Skipped yoga, so tired", 3, "tiredness"),
        _event(4, "Call mom", 4, "neutral"),
        _event(5, "Call mom", 4, "sadness"),
        _event(6, "Another sad day", 5, "sadness"),
    ]
    found = _run(events)
    assert found["pattern"] == ["Ana repeats: Call mom", "Ana often mentions yoga"]
    assert found["trend"] == ["Ana's mood is declining"]
    assert "insight" not in found


def test_contradictions_need_one_entity_one_single_valued_key_and_two_moments() -> None:
    facts = [
        _fact(1, "Ana works at Acme", "person:ana", "work.employer", 0),
        _fact(2, "Ana works at Globex", "person:ana", "work.employer", 2),
        _fact(3, "Bruno works at Initech", "person:bruno", "work.employer", 1),  # another entity
        _fact(4, "Ana likes tea", "person:ana", "preference.like", 0),  # multi-valued key
        _fact(5, "Ana likes coffee", "person:ana", "preference.like", 1),
        _fact(6, "Caio is 30", "person:caio", "personal.age", 1),  # same moment: one statement, not a conflict
        _fact(7, "Caio is thirty", "person:caio", "personal.age", 1),
    ]
    output = OfflineConsolidationSkill().run(ConsolidationInput(events=[], facts=facts)).output
    [contradiction] = output.observations
    assert contradiction.kind == "contradiction"
    assert contradiction.title == "Conflicting facts: work.employer of person:ana"
    assert contradiction.supporting_fact_ids == ["f1", "f2"]
    assert '"Ana works at Acme" (2025-03-03) / "Ana works at Globex" (2025-03-05)' in contradiction.text


def test_a_steady_or_sparse_window_yields_nothing() -> None:
    texts = ("Lunch with Bia", "Read a book", "Fixed the sink", "Watched a film")
    events = [_event(index, text, index % 2, "joy") for index, text in enumerate(texts)]
    assert _run(events) == {}

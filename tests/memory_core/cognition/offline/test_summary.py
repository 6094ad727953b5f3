"""Offline fact-group summaries: selection of the newest distinct facts, topics of the rest."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_core.cognition import Skill
from memory_core.cognition.maintenance_models import FactLine, SummaryInput
from memory_core.cognition.offline.summary import OfflineSummarySkill


def _fact(number: int, text: str, key: str | None, day: int) -> FactLine:
    return FactLine(fact_id=f"f{number}", text=text, attribute_key=key, valid_from=datetime(2024, 5, day, tzinfo=UTC))


def test_few_facts_become_the_summary_newest_first_without_duplicates() -> None:
    skill = OfflineSummarySkill("summarize_cluster")
    facts = [
        _fact(1, "Ana works at Acme", "work.employer", 1),
        _fact(2, "Ana lives in Lisbon.", "location.city", 3),
        _fact(3, "ana works at acme.", "work.employer", 2),
    ]

    outcome = skill.run(SummaryInput(subject="Ana", facts=facts))

    assert isinstance(skill, Skill)
    assert skill.name == "summarize_cluster"
    assert outcome.output.summary == "Ana lives in Lisbon. Ana works at Acme."
    assert outcome.output.label == "Ana: location, work"
    assert outcome.usage.total_tokens == 0


def test_many_facts_keep_two_and_count_the_rest_in_english_whatever_the_facts_language() -> None:
    facts = [
        _fact(1, "Bruno mora em Curitiba", "location.city", 1),
        _fact(2, "Bruno trabalha na Petrobras", "work.employer", 2),
        _fact(3, "Bruno gosta de café", "preference.drink", 3),
        _fact(4, "Bruno tem um cachorro chamado Rex", "family.pet", 4),
        _fact(5, "Bruno é engenheiro", "work.role", 5),
    ]

    output = OfflineSummarySkill("summarize_entity").run(SummaryInput(subject="Bruno", facts=facts)).output

    assert output.summary == (
        # The facts keep their words (a rule cannot translate); what the rule writes is English (W20).
        "Bruno é engenheiro. Bruno tem um cachorro chamado Rex. There are 3 more facts, about location, preference "
        "and work."
    )
    assert output.label.startswith("Bruno: work")


def test_no_facts_gives_an_empty_summary_and_the_subject_as_label() -> None:
    output = OfflineSummarySkill("summarize_cluster").run(SummaryInput(subject="Carla", facts=[])).output

    assert output.summary == ""
    assert output.label == "Carla"

"""W7 offline: relative dates in a fact are resolved against the message's occurred_at, in the configured timezone."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from memory_core.cognition.models import ExtractionInput
from memory_core.cognition.offline.extraction import OfflineExtractionSkill
from memory_core.cognition.offline.relative_dates import local_date, resolve_relative_dates

# Monday 8 May 2023.
MONDAY = date(2023, 5, 8)


@pytest.mark.parametrize(
    ("text", "language", "expected"),
    [
        ("I went there yesterday.", "en", "I went there yesterday (7 May 2023)."),
        ("Fui lá ontem.", "pt", "Fui lá ontem (7 de maio de 2023)."),
        ("We met last week.", "en", "We met last week (the week of 1 May 2023)."),
        ("Nos vimos na semana passada.", "pt", "Nos vimos na semana passada (semana de 1 de maio de 2023)."),
        ("We fly in two days.", "en", "We fly in two days (10 May 2023)."),
        ("Viajamos daqui a dois dias.", "pt", "Viajamos daqui a dois dias (10 de maio de 2023)."),
        ("I quit three weeks ago.", "en", "I quit three weeks ago (the week of 17 April 2023)."),
        ("Saí há 2 meses.", "pt", "Saí há 2 meses (março de 2023)."),
        ("I ran a race last Saturday and start tomorrow.", "en",
         "I ran a race last Saturday (6 May 2023) and start tomorrow (9 May 2023)."),
        ("Começo na próxima sexta.", "pt", "Começo na próxima sexta (12 de maio de 2023)."),
        ("She moved last year.", "en", "She moved last year (2022)."),
        ("I painted it on Friday.", "en", "I painted it on Friday."),  # which Friday? left alone
        ("Nothing relative here.", "en", "Nothing relative here."),
    ],
)  # fmt: skip
def test_relative_expressions_get_their_absolute_date(text: str, language: str, expected: str) -> None:
    assert resolve_relative_dates(text, MONDAY, language) == expected  # type: ignore[arg-type]


def test_the_local_day_of_the_configured_timezone_decides() -> None:
    # 02:30 UTC on 8 May is still 7 May in São Paulo (UTC-3).
    moment = datetime(2023, 5, 8, 2, 30, tzinfo=UTC)
    assert local_date(moment, "UTC") == date(2023, 5, 8)
    assert local_date(moment, "America/Sao_Paulo") == date(2023, 5, 7)


def _fact_text(message: str, occurred_at: datetime, timezone: str) -> str:
    skill_input = ExtractionInput(message=message, speaker_name="Caroline", occurred_at=occurred_at, timezone=timezone)
    facts = OfflineExtractionSkill().run(skill_input).output.facts
    assert len(facts) == 1
    return facts[0].text


def test_extracted_facts_carry_the_date_in_the_message_timezone() -> None:
    late = datetime(2023, 5, 8, 2, 30, tzinfo=UTC)
    assert _fact_text("I went to a support group yesterday.", late, "UTC") == (
        "Caroline went to a support group yesterday (7 May 2023)."
    )
    assert _fact_text("I went to a support group yesterday.", late, "America/Sao_Paulo") == (
        "Caroline went to a support group yesterday (6 May 2023)."
    )
    assert _fact_text("Eu fui ao grupo de apoio ontem.", late, "America/Sao_Paulo") == (
        "Caroline foi ao grupo de apoio ontem (6 de maio de 2023)."
    )

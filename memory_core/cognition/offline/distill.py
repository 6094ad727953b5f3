"""Offline distillation: the words every episodic fact shares, as one general statement.

A rule cannot generalise meaning, only form. Facts of one entity under one attribute key
often share a frame ("Rafael went to a Python meetup on March 5", "Rafael went to a data
meetup on April 2") with the episode-specific words changing. The statement is that frame:
the words (compared accent- and case-folded) present in *every* fact, in the order of the
newest fact, followed by how many times and over which dates, e.g.
``"Rafael went to a meetup (3x, 2024-03-05 - 2024-05-10)"``. When the shared frame has
fewer than :data:`MIN_FRAME_WORDS` words there is nothing general to say and the answer is
empty; the job keeps it as "nothing to distil" until the facts change. Same input, same
output, no tokens.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from memory_core.cognition.maintenance_models import DistilledStatement, DistillInput, DistillOutput, FactLine
from memory_core.cognition.skill import SkillOutcome
from memory_core.write.naming import fold

__all__ = ["DISTILL", "MIN_FACTS", "MIN_FRAME_WORDS", "OfflineDistillSkill", "distill_facts"]

DISTILL = "distill"
MIN_FACTS = 2
MIN_FRAME_WORDS = 3
_WORD = re.compile(r"[\w'’-]+", re.UNICODE)
_OLDEST = datetime.min.replace(tzinfo=UTC)


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def _dates(facts: list[FactLine]) -> str:
    days = sorted(fact.valid_from.date().isoformat() for fact in facts if fact.valid_from is not None)
    if not days:
        return ""
    return f", {days[0]}" if days[0] == days[-1] else f", {days[0]} - {days[-1]}"


def distill_facts(skill_input: DistillInput) -> DistillOutput:
    """The shared frame of ``skill_input``'s facts as one statement, or none (see the module docstring)."""
    facts = sorted(skill_input.facts, key=lambda fact: fact.valid_from or _OLDEST, reverse=True)
    distinct = {fold(" ".join(fact.text.split())) for fact in facts}
    if len(distinct) < MIN_FACTS:
        return DistillOutput()
    shared = set.intersection(*({fold(word) for word in _words(fact.text)} for fact in facts))
    frame: list[str] = []
    seen: set[str] = set()
    for word in _words(facts[0].text):
        folded = fold(word)
        if folded in shared and folded not in seen:
            seen.add(folded)
            frame.append(word)
    if len(frame) < MIN_FRAME_WORDS:
        return DistillOutput()
    statement = f"{' '.join(frame)} ({len(facts)}x{_dates(facts)})"
    return DistillOutput(
        statements=[DistilledStatement(text=statement, source_fact_ids=[fact.fact_id for fact in facts])]
    )


class OfflineDistillSkill:
    """Rule-based ``Skill[DistillInput, DistillOutput]``: the facts' shared frame."""

    @property
    def name(self) -> str:
        """``distill``."""
        return DISTILL

    def run(self, skill_input: DistillInput, /) -> SkillOutcome[DistillOutput]:
        """Distil by shared words; zero token usage."""
        started = time.perf_counter()
        output = distill_facts(skill_input)
        return SkillOutcome(output=output, duration_ms=(time.perf_counter() - started) * 1000.0)

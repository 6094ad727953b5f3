"""Helpers for the offline skill tests: run extraction on a message as a given speaker."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import pytest

from memory_core.cognition.models import ExtractionInput, ExtractionOutput, KnownEntity
from memory_core.cognition.offline.extraction import OfflineExtractionSkill

Extract = Callable[..., ExtractionOutput]


@pytest.fixture
def extract() -> Extract:
    """``extract(message, speaker="Rafael", known=(), name="extract_informed")`` -> the skill's output."""

    def run(
        message: str,
        speaker: str = "Rafael",
        known: Sequence[KnownEntity] = (),
        name: str = "extract_informed",
        max_facts: int = 100,
    ) -> ExtractionOutput:
        skill_input = ExtractionInput(
            message=message,
            speaker_name=speaker,
            occurred_at=datetime(2025, 6, 15, 12, 0, tzinfo=UTC),
            known_entities=list(known),
            max_facts=max_facts,
        )
        outcome = OfflineExtractionSkill(name).run(skill_input)
        assert outcome.usage.is_zero
        return outcome.output

    return run

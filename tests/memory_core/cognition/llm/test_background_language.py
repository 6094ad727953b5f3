"""Seeds W20: every maintenance prompt asks for English, whatever the conversation's language.

Each LLM maintenance skill is run once on Portuguese material against the local OpenAI stub,
and the system message it actually sent is checked. The extraction prompts keep facts in the
message's language and ask for English profiles.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_core.cognition.llm.community import CommunitySkill
from memory_core.cognition.llm.consolidation import ConsolidationSkill
from memory_core.cognition.llm.distill import DistillSkill
from memory_core.cognition.llm.profile import ProfileSkill
from memory_core.cognition.llm.prompts import (
    BACKGROUND_TEXT_IN_ENGLISH,
    BATCH_EXTRACTION_PROMPT,
    INFORMED_EXTRACTION_PROMPT,
)
from memory_core.cognition.llm.summary import SummarySkill
from memory_core.cognition.maintenance_models import (
    CommunityInput,
    ConsolidationInput,
    DistillInput,
    EventLine,
    FactLine,
    ProfileInput,
    SummaryInput,
)
from memory_core.providers import OpenAIChatProvider
from tests.support.openai_stub import OpenAIStub

MAY = datetime(2025, 5, 10, 9, 30, tzinfo=UTC)
FACTS = [
    FactLine(fact_id="f1", text="Fernanda trabalha na Orion Tech", attribute_key="work.employer", valid_from=MAY),
    FactLine(fact_id="f2", text="Fernanda vai à academia toda semana", attribute_key="event.activity", valid_from=MAY),
]
EVENTS = [EventLine(event_id="e1", speaker="Fernanda", text="Fui à academia de novo hoje", occurred_at=MAY)]

Run = Callable[[OpenAIChatProvider], Any]
CASES: dict[str, tuple[dict[str, Any], Run]] = {
    "profile": (
        {"profile_text": "Fernanda works at Orion Tech and goes to the gym every week."},
        lambda p: ProfileSkill(p).run(ProfileInput(entity_name="Fernanda", entity_type="person", facts=FACTS)),
    ),
    "summary": (
        {"summary": "Fernanda works at Orion Tech.", "label": "Fernanda: work"},
        lambda p: SummarySkill(p, "summarize_entity").run(SummaryInput(subject="Fernanda", facts=FACTS)),
    ),
    "community": (
        {"title": "Orion Tech", "observation": "Both groups are about Orion Tech."},
        lambda p: CommunitySkill(p).run(
            CommunityInput(cluster_summaries=["Fernanda trabalha na Orion Tech.", "Bruno trabalha na Orion Tech."])
        ),
    ),
    "consolidation": (
        {"observations": []},
        lambda p: ConsolidationSkill(p).run(ConsolidationInput(events=EVENTS, facts=FACTS)),
    ),
    "distill": (
        {"statements": []},
        lambda p: DistillSkill(p).run(DistillInput(entity_name="Fernanda", facts=FACTS)),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_maintenance_prompts_ask_for_english(case: str, stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    answer, run = CASES[case]
    stub.enqueue_chat(json.dumps(answer))
    outcome = run(provider)
    assert not outcome.used_fallback
    [request] = stub.chat_requests
    system = request.body["messages"][0]["content"]
    assert BACKGROUND_TEXT_IN_ENGLISH in system
    assert "language the facts are written in" not in system
    assert "language of the" not in system


def test_extraction_keeps_facts_in_the_message_language_and_asks_for_english_profiles() -> None:
    for prompt in (INFORMED_EXTRACTION_PROMPT, BATCH_EXTRACTION_PROMPT):
        assert "written in the language of the message" in prompt
        assert "1-3 sentences in English" in prompt

"""LLM summary, community and consolidation skills against a local OpenAI-compatible server."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from memory_core.cognition import Skill
from memory_core.cognition.llm.community import CommunitySkill
from memory_core.cognition.llm.consolidation import ConsolidationSkill
from memory_core.cognition.llm.prompts import BACKGROUND_TEXT_IN_ENGLISH
from memory_core.cognition.llm.summary import SummarySkill
from memory_core.cognition.maintenance_models import (
    CommunityInput,
    ConsolidationInput,
    EventLine,
    FactLine,
    SummaryInput,
    SummaryOutput,
)
from memory_core.cognition.offline.community import OfflineCommunitySkill
from memory_core.cognition.offline.consolidation import OfflineConsolidationSkill
from memory_core.cognition.offline.summary import OfflineSummarySkill
from memory_core.cognition.skill import FallbackSkill
from memory_core.providers import OpenAIChatProvider
from tests.support.openai_stub import OpenAIStub

MAY = datetime(2025, 5, 10, 9, 30, tzinfo=UTC)

FACTS = [
    FactLine(fact_id="f1", text="Fernanda trabalha na Orion Tech", attribute_key="work.employer", valid_from=MAY),
    FactLine(fact_id="f2", text="Fernanda mora em Campinas", attribute_key="location.residence", valid_from=MAY),
]


def test_summary_skill_parses_the_answer_and_falls_back_to_rules_on_invalid_json(
    stub: OpenAIStub, provider: OpenAIChatProvider
) -> None:
    stub.enqueue_chat(
        '{"summary": "Fernanda trabalha na Orion Tech  e mora em Campinas.", "label": "Fernanda: trabalho e casa"}',
        "Sure! Here is the summary: Fernanda works at Orion Tech.",
    )
    skill = SummarySkill(provider, "summarize_cluster")
    summary_input = SummaryInput(subject="Fernanda", facts=FACTS)

    outcome = skill.run(summary_input)

    assert isinstance(skill, Skill)
    assert skill.name == "summarize_cluster"
    assert outcome.output == SummaryOutput(
        summary="Fernanda trabalha na Orion Tech e mora em Campinas.", label="Fernanda: trabalho e casa"
    )
    assert outcome.usage.total_tokens > 0
    request = stub.chat_requests[0]
    assert request.body["response_format"]["type"] == "json_schema"
    assert request.body["response_format"]["json_schema"]["strict"] is True
    assert request.body["messages"][1]["content"] == (
        "Subject: Fernanda\nFacts:\n"
        "- (2025-05-10) Fernanda trabalha na Orion Tech [work.employer]\n"
        "- (2025-05-10) Fernanda mora em Campinas [location.residence]"
    )
    assert BACKGROUND_TEXT_IN_ENGLISH in request.body["messages"][0]["content"]

    rescued = FallbackSkill(skill, OfflineSummarySkill("summarize_cluster")).run(summary_input)

    assert rescued.used_fallback
    assert rescued.error is not None
    assert "not valid JSON" in rescued.error
    assert rescued.usage.total_tokens > 0  # the failed attempt's tokens are still counted
    assert rescued.output.summary == "Fernanda trabalha na Orion Tech. Fernanda mora em Campinas."


def test_community_skill_parses_the_answer_and_falls_back_on_an_empty_observation(
    stub: OpenAIStub, provider: OpenAIChatProvider
) -> None:
    stub.enqueue_chat(
        '{"title": "Time de dados da Orion Tech", "observation": "Fernanda e Bruno formam o time de dados."}',
        '{"title": "Orion", "observation": "  "}',
    )
    skill = CommunitySkill(provider)
    community_input = CommunityInput(
        cluster_summaries=["Fernanda trabalha na Orion Tech.", "Bruno trabalha na Orion Tech."]
    )

    outcome = skill.run(community_input)

    assert skill.name == "describe_community"
    assert outcome.output.title == "Time de dados da Orion Tech"
    assert outcome.output.observation == "Fernanda e Bruno formam o time de dados."
    assert stub.chat_requests[0].body["messages"][1]["content"] == (
        "Summaries:\n1. Fernanda trabalha na Orion Tech.\n2. Bruno trabalha na Orion Tech."
    )

    rescued = FallbackSkill(skill, OfflineCommunitySkill()).run(community_input)

    assert rescued.used_fallback
    assert rescued.output.title == "Orion, Tech, trabalha"


def test_consolidation_skill_keeps_only_evidence_it_showed_and_falls_back_on_a_bad_kind(
    stub: OpenAIStub, provider: OpenAIChatProvider
) -> None:
    events = [
        EventLine(event_id="e1", speaker="Rafael", text="Corri 5 km hoje", occurred_at=MAY, emotion="joy"),
        EventLine(event_id="e2", speaker="Rafael", text="Corri de novo!", occurred_at=MAY, emotion=None),
    ]
    answer = {
        "observations": [
            {
                "kind": "pattern",
                "title": "Rafael  corre com frequência",
                "text": "Rafael corre quase todo dia.",
                "confidence": 0.8,
                "supporting_event_ids": ["e1", "e2", "e99"],
                "supporting_fact_ids": ["f1", "invented"],
            },
            {"kind": "insight", "title": "", "text": "No title, dropped."},
        ]
    }
    stub.enqueue_chat(json.dumps(answer), '{"observations": [{"kind": "gossip", "title": "x", "text": "y"}]}')
    skill = ConsolidationSkill(provider)
    consolidation_input = ConsolidationInput(events=events, facts=FACTS)

    outcome = skill.run(consolidation_input)

    assert skill.name == "consolidate"
    [pattern] = outcome.output.observations
    assert pattern.kind == "pattern"
    assert pattern.title == "Rafael corre com frequência"
    assert pattern.supporting_event_ids == ["e1", "e2"]
    assert pattern.supporting_fact_ids == ["f1"]
    shown = stub.chat_requests[0].body["messages"][1]["content"]
    assert "- id e1 | 2025-05-10 09:30 | Rafael: Corri 5 km hoje [emotion: joy]" in shown
    assert "- id f2 | since 2025-05-10 09:30 | Fernanda mora em Campinas [location.residence]" in shown

    rescued = FallbackSkill(skill, OfflineConsolidationSkill()).run(consolidation_input)

    assert rescued.used_fallback
    assert rescued.error is not None
    assert "ConsolidationOutput schema" in rescued.error
    assert rescued.output.observations == []  # two messages: the rules find nothing, and invent nothing

"""Procedural memory with an LLM (a local OpenAI-compatible server, real HTTP): detection, the judge, the block."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from sqlalchemy import text

from memory_core.cognition.directive_models import (
    ContradictionInput,
    DirectiveBlockInput,
    ExtractedDirective,
)
from memory_core.cognition.llm import build_llm_write_skills
from memory_core.cognition.llm.directives import ContradictionSkill, DirectiveBlockSkill
from memory_core.cognition.llm.extraction import InformedExtractionSkill
from memory_core.cognition.models import ExtractionInput
from memory_core.config import MemoryConfig
from memory_core.db.vectors import vector_param
from memory_core.providers import OpenAIChatProvider
from memory_core.settings import Settings
from memory_core.write.context import build_write_context
from memory_core.write.directives import plan_directives
from memory_core.write.skill_calls import SkillCache
from tests.support.llm_script import GOOD_EXTRACTION
from tests.support.openai_stub import OpenAIStub


def test_the_extraction_call_carries_the_directives_in_english(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    answer = {**GOOD_EXTRACTION, "directives": [{"text": "Always answer in Portuguese.", "confidence": 0.9}]}
    stub.enqueue_chat(json.dumps(answer))
    outcome = InformedExtractionSkill(provider).run(
        ExtractionInput(
            message="Moro em Lisboa. Responda sempre em português.",
            speaker_name="Rafael",
            occurred_at=datetime(2025, 3, 1, 9, 0, tzinfo=UTC),
        )
    )
    assert outcome.output.directives == [ExtractedDirective(text="Always answer in Portuguese.", confidence=0.9)]
    system = stub.chat_requests[0].body["messages"][0]["content"]
    assert "in English whatever the message's language" in system


def test_the_judge_and_the_block_skills(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat('{"contradicts": true, "reason": "two answer languages"}')
    verdict = ContradictionSkill(provider).run(
        ContradictionInput(new_directive="Always answer in English.", existing_directive="Always answer in Portuguese.")
    )
    assert verdict.output.contradicts is True
    assert stub.chat_requests[0].body["messages"][1]["content"] == (
        "EXISTING: Always answer in Portuguese.\nNEW: Always answer in English."
    )
    stub.enqueue_chat('{"text": "You are Lia. Answer in Portuguese."}')
    block = DirectiveBlockSkill(provider).run(
        DirectiveBlockInput(persona="You are Lia.", directives=["Always answer in Portuguese."], max_tokens=50)
    )
    assert block.output.text == "You are Lia. Answer in Portuguese."
    assert "English" in stub.chat_requests[1].body["messages"][0]["content"]


def test_the_pipeline_asks_the_judge_once_per_pair_above_the_threshold(
    stub: OpenAIStub, provider: OpenAIChatProvider, settings: Settings
) -> None:
    context = build_write_context(settings, skills=build_llm_write_skills(provider), pool_size=1)
    agent = f"judge-{uuid.uuid4().hex[:8]}"
    try:
        existing = "Always answer in Portuguese."
        with context.sessions.begin() as session:
            session.execute(
                text(
                    "INSERT INTO memory_directives (agent_id, text, text_key, embedding_vec) "
                    "VALUES (:agent, :text, 'always answer in portuguese', CAST(:vec AS vector))"
                ),
                {"agent": agent, "text": existing, "vec": vector_param(context.embedder.embed_one(existing))},
            )
        detected = [ExtractedDirective(text="Always answer in English.")]
        cache = SkillCache(None, None, {})

        # Below the threshold the judge is not asked: a new directive.
        with context.sessions() as session:
            strict = plan_directives(
                context, session, agent_id=agent, detected=detected, config=MemoryConfig(), cache=cache
            )
        assert [plan.action for plan in strict.plans] == ["add"]
        assert stub.chat_requests == []

        stub.enqueue_chat('{"contradicts": true, "reason": "two answer languages"}')
        loose = MemoryConfig(contradiction_similarity_threshold=0.5)
        with context.sessions() as session:
            planned = plan_directives(context, session, agent_id=agent, detected=detected, config=loose, cache=cache)
        [plan] = planned.plans
        assert (plan.action, plan.reason) == ("supersede", "two answer languages")
        assert planned.tokens.total_tokens > 0
        # A redelivered stage finds the verdict in the run's cache: no second call.
        with context.sessions() as session:
            again = plan_directives(context, session, agent_id=agent, detected=detected, config=loose, cache=cache)
        assert again.plans == planned.plans
        assert len(stub.chat_requests) == 1

        # An unusable verdict falls back to the rule twin (fail-safe), which also sees a contradiction here.
        stub.enqueue_chat("not json at all")
        with context.sessions() as session:
            rescued = plan_directives(
                context, session, agent_id=agent, detected=detected, config=loose, cache=SkillCache(None, None, {})
            )
        assert [plan.action for plan in rescued.plans] == ["supersede"]
    finally:
        context.close()

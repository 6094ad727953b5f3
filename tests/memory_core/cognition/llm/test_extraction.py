"""Informed and blind LLM extraction against a local OpenAI-compatible server."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_core.cognition import Skill, SkillOutputError
from memory_core.cognition.llm import BlindExtractionSkill, InformedExtractionSkill
from memory_core.cognition.llm.extraction import render_message_date
from memory_core.cognition.llm.prompts import (
    BLIND_ENTITIES_PROMPT,
    BLIND_FACTS_PROMPT,
    BLIND_RELATIONS_PROMPT,
    RELATION_RETRY_NOTE,
)
from memory_core.cognition.models import (
    ExtractedEntity,
    ExtractedFact,
    ExtractedRelation,
    ExtractionInput,
    KnownEntity,
    KnownFact,
)
from memory_core.providers import OpenAIChatProvider, RetryableProviderError, TokenUsage
from memory_core.write.attribute_keys import ATTRIBUTE_CATALOGUE
from tests.support.openai_stub import OpenAIStub, RecordedRequest, StubReply

MESSAGE = (
    "Clara Rezende saiu da Vertix e foi pra Orion Tech como head de engenharia. "
    "O Thiago Nogueira a contratou pessoalmente."
)
PROFILE = "Software engineer at Vertix since 2023."

CLARA_ANSWER: dict[str, Any] = {
    "entities": [
        {"name": "Clara Rezende", "type": "person", "aliases": ["Clara"]},
        {"name": "Vertix", "type": "organization"},
        {"name": "Orion Tech", "type": "organization"},
        {"name": "Thiago Nogueira", "type": "person"},
    ],
    "facts": [
        {
            "subject": "Clara Rezende",
            "text": "Clara Rezende saiu da Vertix",
            "attribute_key": "work.employer",
            "replaces": 1,
            "importance_category": "relationship_change",
            "confidence_level": "explicit_statement",
        },
        {
            "subject": "Clara Rezende",
            "text": "Clara Rezende entrou na Orion Tech como head de engenharia",
            "attribute_key": "work.employer",
            "action": "NEW",
            "importance_category": "relationship_change",
            "confidence_level": "explicit_statement",
        },
        {
            "subject": "Thiago Nogueira",
            "text": "Thiago Nogueira contratou Clara Rezende pessoalmente",
            "replaces": 7,
            "importance_category": "specific_event",
            "confidence_level": "explicit_statement",
        },
    ],
    "relations": [
        {"source": "Clara Rezende", "target": "Vertix", "type": "former_employee_of"},
        {"source": "Clara Rezende", "target": "Orion Tech", "type": "works_at"},
        {"source": "Thiago Nogueira", "target": "Clara Rezende", "type": "hired"},
    ],
    "updated_profiles": {
        "Clara Rezende": "Former software engineer at Vertix, now head of engineering at Orion Tech, hired by Thiago."
    },
}

ENTITIES_ANSWER = {"entities": CLARA_ANSWER["entities"]}
FACTS_ANSWER = {"facts": CLARA_ANSWER["facts"]}
RELATIONS_ANSWER = {"relations": CLARA_ANSWER["relations"]}


def usage_block(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


SCAN_USAGE = usage_block(300, 40)
FACTS_USAGE = usage_block(700, 150)
RELATIONS_USAGE = usage_block(250, 60)


def clara_input(**changes: Any) -> ExtractionInput:
    values: dict[str, Any] = {
        "message": MESSAGE,
        "speaker_name": "Rafael",
        "occurred_at": datetime(2025, 6, 15, 17, 30, tzinfo=UTC),
        "timezone": "America/Sao_Paulo",
        "recent_messages": ["Lembra da Clara?"],
        "known_entities": [
            KnownEntity(
                name="Clara",
                canonical_key="person:clara_rezende",
                display_name="Clara Rezende",
                entity_type="person",
                profile_text=PROFILE,
                facts=[
                    KnownFact(fact_id="f-0", text="Clara Rezende trabalha na Vertix", attribute_key="work.employer")
                ],
            ),
            KnownEntity(
                name="Vertix",
                canonical_key="organization:vertix",
                display_name="Vertix",
                entity_type="organization",
                facts=[
                    KnownFact(fact_id="f-1", text="Vertix é uma fintech de Curitiba", attribute_key="personal.info")
                ],
            ),
        ],
    }
    values.update(changes)
    return ExtractionInput(**values)


def system_of(request: RecordedRequest) -> str:
    return str(request.body["messages"][0]["content"])


def user_of(request: RecordedRequest) -> str:
    return str(request.body["messages"][1]["content"])


# -- informed ------------------------------------------------------------------------------


def test_informed_extraction_parses_the_answer_and_sends_the_context(
    stub: OpenAIStub, provider: OpenAIChatProvider
) -> None:
    stub.enqueue_chat(StubReply.text(json.dumps(CLARA_ANSWER), usage=usage_block(1500, 400)))
    skill = InformedExtractionSkill(provider)

    outcome = skill.run(clara_input())

    assert isinstance(skill, Skill)
    assert skill.name == "extract_informed"
    output = outcome.output
    assert [entity.name for entity in output.entities] == ["Clara Rezende", "Vertix", "Orion Tech", "Thiago Nogueira"]
    assert output.entities[0] == ExtractedEntity(name="Clara Rezende", type="person", aliases=["Clara"])
    assert output.facts[0] == ExtractedFact(
        subject="Clara Rezende",
        text="Clara Rezende saiu da Vertix",
        attribute_key="work.employer",
        action="UPDATE",
        importance_category="relationship_change",
        confidence_level="explicit_statement",
        # "replaces": 1 names the first numbered known fact, Clara's.
        replaces_fact_id="f-0",
        judged=True,
    )
    # A number no known fact has replaces nothing; only a fact that named a shown number or null was judged
    # against the known facts (the second says nothing about it, the third names no shown fact).
    assert [fact.replaces_fact_id for fact in output.facts] == ["f-0", None, None]
    assert [fact.judged for fact in output.facts] == [True, False, False]
    assert [fact.importance_category for fact in output.facts][2] == "specific_event"
    assert ExtractedRelation(source="Clara Rezende", target="Orion Tech", type="works_at") in output.relations
    assert output.updated_profiles["Clara Rezende"].startswith("Former software engineer")
    assert output.relation_retry_triggered is False
    assert outcome.usage == TokenUsage(
        input_tokens=1500, output_tokens=400, total_tokens=1900, calls=1, model="gpt-stub"
    )
    assert not outcome.used_fallback

    [request] = stub.chat_requests
    assert request.body["response_format"]["type"] == "json_schema"
    assert request.body["temperature"] == 0
    system, user = system_of(request), user_of(request)
    # The attribute catalogue is offered as the preferred keys; the retry flag is not the model's to set.
    assert all(key in system for key in ATTRIBUTE_CATALOGUE)
    assert "works_at" in system
    assert "relation_retry_triggered" not in system
    # 17:30 UTC is 14:30 in São Paulo: relative dates are resolved against the local date.
    assert "This message was sent on Sunday, June 15, 2025, 14:30 (America/Sao_Paulo, UTC-03:00)." in user
    assert "Speaker: Rafael" in user
    assert PROFILE in user
    assert 'Clara Rezende (person), called "Clara" in the message' in user
    # Known facts are numbered across the block, after each entity's profile: what "replaces" names.
    assert "  #1 Clara Rezende trabalha na Vertix (work.employer)" in user
    assert "  #2 Vertix é uma fintech de Curitiba (personal.info)" in user
    assert "Lembra da Clara?" in user
    assert f"<message>\n{MESSAGE}\n</message>" in user
    # What varies least comes first (prefix caches), the message last.
    assert user.index("Known entities:") < user.index("Speaker: Rafael") < user.index("<message>")
    assert user.endswith("</message>")


def test_informed_extraction_caps_the_facts_and_shows_the_chunk_hint(
    stub: OpenAIStub, provider: OpenAIChatProvider
) -> None:
    stub.enqueue_chat(json.dumps(CLARA_ANSWER))

    output = InformedExtractionSkill(provider).run(clara_input(max_facts=2, chunk_hint="part 2 of 3")).output

    assert len(output.facts) == 2
    user = user_of(stub.chat_requests[0])
    assert "Extract at most 2 facts." in user
    assert "part 2 of 3" in user


def test_informed_extraction_small_talk_comes_back_empty(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat('{"entities": [], "facts": [], "relations": [], "updated_profiles": {}}')

    output = InformedExtractionSkill(provider).run(clara_input(message="oi, tudo bem?", known_entities=[])).output

    assert (output.entities, output.facts, output.relations, output.updated_profiles) == ([], [], [], {})
    assert "Known entities: none." in user_of(stub.chat_requests[0])


def test_informed_extraction_invalid_json_raises_with_usage(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(StubReply.text("Clara moved to Orion Tech.", usage=usage_block(1200, 9)))

    with pytest.raises(SkillOutputError) as caught:
        InformedExtractionSkill(provider).run(clara_input())

    assert caught.value.skill == "extract_informed"
    assert "not valid JSON" in caught.value.message
    assert caught.value.usage == TokenUsage(
        input_tokens=1200, output_tokens=9, total_tokens=1209, calls=1, model="gpt-stub"
    )


def test_informed_extraction_rate_limit_propagates(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(StubReply.error(429, headers={"Retry-After": "3"}))

    with pytest.raises(RetryableProviderError) as caught:
        InformedExtractionSkill(provider).run(clara_input())

    assert caught.value.retry_after_s == 3
    assert stub.call_count == 1


# -- blind ---------------------------------------------------------------------------------


class BlindScript:
    """Answers each blind step by its system prompt: the facts and relations calls arrive in either order."""

    def __init__(self, *, relations: list[dict[str, Any]], facts: str | None = None, delay_s: float = 0.0) -> None:
        self.relations = list(relations)
        self.facts = facts if facts is not None else json.dumps(FACTS_ANSWER)
        self.delay_s = delay_s

    def __call__(self, body: dict[str, Any]) -> StubReply:
        system = str(body["messages"][0]["content"])
        if system.startswith(BLIND_ENTITIES_PROMPT):
            return StubReply.text(json.dumps(ENTITIES_ANSWER), usage=SCAN_USAGE)
        if system.startswith(BLIND_FACTS_PROMPT):
            return StubReply.text(self.facts, usage=FACTS_USAGE, delay_s=self.delay_s)
        if system.startswith(BLIND_RELATIONS_PROMPT):
            answer = self.relations.pop(0)
            return StubReply.text(json.dumps(answer), usage=RELATIONS_USAGE, delay_s=self.delay_s)
        raise AssertionError(f"unexpected system prompt: {system[:80]!r}")


def requests_for(stub: OpenAIStub, prompt: str) -> list[RecordedRequest]:
    return [request for request in stub.chat_requests if system_of(request).startswith(prompt)]


def total(*blocks: dict[str, int]) -> TokenUsage:
    return TokenUsage(
        input_tokens=sum(block["prompt_tokens"] for block in blocks),
        output_tokens=sum(block["completion_tokens"] for block in blocks),
        total_tokens=sum(block["total_tokens"] for block in blocks),
        calls=len(blocks),
        model="gpt-stub",
    )


def test_blind_extraction_makes_three_calls_with_facts_and_relations_concurrent(
    stub: OpenAIStub, provider: OpenAIChatProvider
) -> None:
    stub.handlers["chat"] = BlindScript(relations=[RELATIONS_ANSWER], delay_s=0.5)
    skill = BlindExtractionSkill(provider)

    outcome = skill.run(clara_input())

    assert isinstance(skill, Skill)
    assert skill.name == "extract_blind"
    assert stub.call_count == 3
    output = outcome.output
    assert [entity.name for entity in output.entities][:2] == ["Clara Rezende", "Vertix"]
    assert len(output.facts) == 3
    # Blind facts are all NEW: reconciliation decides later.
    assert {fact.action for fact in output.facts} == {"NEW"}
    assert len(output.relations) == 3
    assert output.updated_profiles == {}
    assert output.relation_retry_triggered is False
    assert outcome.usage == total(SCAN_USAGE, FACTS_USAGE, RELATIONS_USAGE)

    [scan] = requests_for(stub, BLIND_ENTITIES_PROMPT)
    [facts] = requests_for(stub, BLIND_FACTS_PROMPT)
    [relations] = requests_for(stub, BLIND_RELATIONS_PROMPT)
    assert "June 15, 2025" in user_of(scan)
    for request in (facts, relations):
        assert "- Clara Rezende (person; also called Clara)" in user_of(request)
        assert request.body["response_format"]["type"] == "json_schema"
    # Both answers take 0.5 s: the second request arrived while the first was still waiting.
    assert abs(facts.received_at - relations.received_at) < 0.4


def test_blind_extraction_asks_again_for_relations_once(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.handlers["chat"] = BlindScript(relations=[{"relations": []}, RELATIONS_ANSWER])

    outcome = BlindExtractionSkill(provider).run(clara_input())

    assert stub.call_count == 4
    assert outcome.output.relation_retry_triggered is True
    assert len(outcome.output.relations) == 3
    assert outcome.usage == total(SCAN_USAGE, FACTS_USAGE, RELATIONS_USAGE, RELATIONS_USAGE)
    first, second = requests_for(stub, BLIND_RELATIONS_PROMPT)
    assert RELATION_RETRY_NOTE not in user_of(first)
    assert RELATION_RETRY_NOTE in user_of(second)


def test_blind_extraction_keeps_an_empty_retry(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.handlers["chat"] = BlindScript(relations=[{"relations": []}, {"relations": []}])

    outcome = BlindExtractionSkill(provider).run(clara_input())

    assert stub.call_count == 4
    assert outcome.output.relations == []
    assert outcome.output.relation_retry_triggered is True


def test_blind_extraction_without_entities_stops_after_the_scan(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(StubReply.text('{"entities": []}', usage=SCAN_USAGE))

    outcome = BlindExtractionSkill(provider).run(clara_input(message="valeu!"))

    assert stub.call_count == 1
    assert outcome.output.entities == []
    assert outcome.usage == total(SCAN_USAGE)


def test_blind_extraction_with_one_entity_skips_relations(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(
        StubReply.text('{"entities": [{"name": "Rafael", "type": "person"}]}', usage=SCAN_USAGE),
        StubReply.text(
            '{"facts": [{"subject": "Rafael", "text": "Rafael adora jazz", "action": "UPDATE"}]}', usage=FACTS_USAGE
        ),
    )

    outcome = BlindExtractionSkill(provider).run(clara_input(message="Eu adoro jazz."))

    assert stub.call_count == 2
    assert outcome.output.facts == [ExtractedFact(subject="Rafael", text="Rafael adora jazz", action="NEW")]
    assert outcome.output.relation_retry_triggered is False
    assert outcome.usage == total(SCAN_USAGE, FACTS_USAGE)


def test_blind_extraction_bad_answer_raises_with_every_token_spent(
    stub: OpenAIStub, provider: OpenAIChatProvider
) -> None:
    stub.handlers["chat"] = BlindScript(relations=[RELATIONS_ANSWER], facts="not json at all")

    with pytest.raises(SkillOutputError) as caught:
        BlindExtractionSkill(provider).run(clara_input())

    assert caught.value.skill == "extract_blind.facts"
    assert caught.value.raw_text == "not json at all"
    assert caught.value.usage == total(SCAN_USAGE, FACTS_USAGE, RELATIONS_USAGE)


def test_blind_extraction_scan_failure_raises(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat(StubReply.text('{"entities": "Clara"}', usage=SCAN_USAGE))

    with pytest.raises(SkillOutputError) as caught:
        BlindExtractionSkill(provider).run(clara_input())

    assert caught.value.skill == "extract_blind.entities"
    assert caught.value.usage == total(SCAN_USAGE)
    assert stub.call_count == 1


def test_blind_extraction_provider_error_wins_over_a_bad_answer(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    def answer(body: dict[str, Any]) -> StubReply:
        system = str(body["messages"][0]["content"])
        if system.startswith(BLIND_ENTITIES_PROMPT):
            return StubReply.text(json.dumps(ENTITIES_ANSWER))
        if system.startswith(BLIND_RELATIONS_PROMPT):
            return StubReply.error(429, headers={"Retry-After": "2"})
        return StubReply.text("garbage")

    stub.handlers["chat"] = answer

    with pytest.raises(RetryableProviderError) as caught:
        BlindExtractionSkill(provider).run(clara_input())

    assert caught.value.retry_after_s == 2
    assert stub.call_count == 3


# -- message date --------------------------------------------------------------------------


def test_message_date_naive_is_utc_and_unknown_zone_falls_back_to_utc() -> None:
    naive = datetime(2024, 2, 29, 23, 5)

    assert render_message_date(naive) == "This message was sent on Thursday, February 29, 2024, 23:05 (UTC, UTC+00:00)."
    assert render_message_date(naive, "Not/AZone") == render_message_date(naive)
    assert "Friday, March 1, 2024, 08:05 (Asia/Tokyo, UTC+09:00)" in render_message_date(naive, "Asia/Tokyo")


def test_the_relation_retry_needs_relation_retry_min_entities(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    # Four entities, no relation found: a config asking for five before retrying does not retry.
    stub.handlers["chat"] = BlindScript(relations=[{"relations": []}, RELATIONS_ANSWER])

    outcome = BlindExtractionSkill(provider).run(clara_input(relation_retry_min_entities=5))

    assert stub.call_count == 3
    assert outcome.output.relation_retry_triggered is False
    assert outcome.output.relations == []


def test_each_extraction_call_is_bounded_by_the_inputs_timeout(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    # The provider would wait 10 s; extraction_timeout_sec (carried by the input) says 0.3 s.
    stub.enqueue_chat(StubReply.slow(5.0, json.dumps(CLARA_ANSWER)))
    started = time.perf_counter()

    with pytest.raises(RetryableProviderError, match="timed out"):
        InformedExtractionSkill(provider).run(clara_input(timeout_s=0.3))

    assert time.perf_counter() - started < 3.0

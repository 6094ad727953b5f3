"""The LLM write-skill bundle and the prompts it is built from."""

from __future__ import annotations

import json
from typing import Any

from memory_core.cognition import FallbackSkill, LLMSkill, Skill
from memory_core.cognition.llm import build_llm_write_skills, prompts
from memory_core.cognition.llm.extraction import BlindExtractionSkill, InformedExtractionSkill
from memory_core.cognition.models import EmotionInput, EmotionOutput
from memory_core.cognition.skill import SkillOutcome
from memory_core.providers import OpenAIChatProvider
from tests.support.openai_stub import OpenAIStub


def test_bundle_is_llm_and_every_skill_honours_the_protocol(provider: OpenAIChatProvider) -> None:
    skills = build_llm_write_skills(provider)

    assert skills.kind == "llm"
    named = {
        "extract_informed": skills.extract_informed,
        "extract_blind": skills.extract_blind,
        "disambiguate": skills.disambiguate,
        "reconcile": skills.reconcile,
        "tag_emotion": skills.tag_emotion,
    }
    for name, skill in named.items():
        assert isinstance(skill, Skill)
        assert skill.name == name


class Calm:
    """An offline stand-in: always neutral."""

    name = "tag_emotion"

    def run(self, text: EmotionInput, /) -> SkillOutcome[EmotionOutput]:
        return SkillOutcome(output=EmotionOutput())


def test_bundle_skills_compose_with_fallbacks(stub: OpenAIStub, provider: OpenAIChatProvider) -> None:
    stub.enqueue_chat("I think the user is happy.")
    skill = FallbackSkill(build_llm_write_skills(provider).tag_emotion, Calm())

    outcome = skill.run(EmotionInput(text="Consegui!"))

    assert outcome.used_fallback
    assert outcome.output == EmotionOutput()
    assert outcome.usage.total_tokens > 0


def _read_by_the_model(skill: LLMSkill[Any, Any]) -> str:
    """The system message plus the strict schema sent with it: everything the model is told."""
    return skill.system_message + json.dumps(skill.response_format, ensure_ascii=False)


def test_fact_prompts_carry_the_rules() -> None:
    informed = InformedExtractionSkill(_Silent()).llm
    blind = BlindExtractionSkill(_Silent()).facts
    for told in (_read_by_the_model(informed), _read_by_the_model(blind)):
        for must in ("location.residence", "biographical_milestone", "explicit_statement", "speculation"):
            assert must in told
    assert "language of the message" in prompts.BLIND_FACTS_PROMPT
    assert "written in the language of the message" in prompts.INFORMED_EXTRACTION_PROMPT
    assert "absolute dates" in prompts.BLIND_FACTS_PROMPT
    assert "relative dates made absolute" in prompts.INFORMED_EXTRACTION_PROMPT
    # Informed extraction says which numbered known fact a new one replaces (reconciliation reuses it).
    assert "replaces" in informed.system_message
    assert '"replaces"' in json.dumps(informed.response_format)


def test_relation_prompts_list_common_snake_case_types() -> None:
    for relation in ("works_at", "lives_in", "partner_of", "parent_of", "reports_to", "studies_at", "likes"):
        assert relation in prompts.BLIND_RELATIONS_PROMPT
    assert "itself" in prompts.BLIND_RELATIONS_PROMPT
    for relation in ("works_at", "lives_in", "partner_of", "parent_of", "likes"):
        assert relation in prompts.INFORMED_EXTRACTION_PROMPT
    assert "itself" in prompts.INFORMED_EXTRACTION_PROMPT


class _Silent:
    """A provider never called: the skills are only built here."""

    def complete(self, *_: Any, **__: Any) -> Any:
        raise AssertionError("no call expected")


def test_the_extraction_prompt_stays_compact() -> None:
    # Every message pays for the prompt and its strict schema: about 4 characters a token. Before
    # issue 36 they were 1,559 tokens (the prompt, then the schema written into it); ~950 when measured
    # (ops/bench/RESULTS.md), ~1,080 since extraction also finds directives, ~1,000 with the schema's
    # single-use definitions written in place and nullable fields as type lists (908 by o200k_base).
    informed = InformedExtractionSkill(_Silent()).llm
    schema = json.dumps(informed.response_format["json_schema"]["schema"], separators=(",", ":"))
    assert "$defs" not in schema
    assert (len(informed.system_message) + len(schema)) / 4 < 1_010

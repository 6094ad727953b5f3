"""The LLM write-skill bundle and the prompts it is built from."""

from __future__ import annotations

import pytest

from memory_core.cognition import FallbackSkill, Skill
from memory_core.cognition.llm import build_llm_write_skills, prompts
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


@pytest.mark.parametrize(
    "prompt",
    [
        prompts.INFORMED_EXTRACTION_PROMPT,
        prompts.BLIND_FACTS_PROMPT,
    ],
)
def test_fact_prompts_carry_the_rules(prompt: str) -> None:
    for must in (
        "location.residence",
        "biographical_milestone",
        "explicit_statement",
        "speculation",
        "language of the message",
        "absolute dates",
    ):
        assert must in prompt


def test_relation_prompts_list_common_snake_case_types() -> None:
    for prompt in (prompts.INFORMED_EXTRACTION_PROMPT, prompts.BLIND_RELATIONS_PROMPT):
        for relation in ("works_at", "lives_in", "partner_of", "parent_of", "reports_to", "studies_at", "likes"):
            assert relation in prompt
        assert "itself" in prompt


def test_the_extraction_prompt_stays_compact() -> None:
    # Every message pays for it: about 4 characters a token.
    assert len(prompts.INFORMED_EXTRACTION_PROMPT) / 4 < 900

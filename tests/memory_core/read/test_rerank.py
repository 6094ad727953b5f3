"""The reranker (R9): multiplicative blend, veto, and the fail-safes (timeout, errors, bad answers)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from memory_core.config import MemoryConfig
from memory_core.providers.protocols import LLMResult, TokenUsage
from memory_core.read.rank import Candidate, RankedFact, rank_candidates
from memory_core.read.rerank import LLMRerankSkill, blend, rerank
from tests.memory_core.read.scripted import ScriptedReranker

NOW = datetime(2026, 3, 1, tzinfo=UTC)
CONFIG = MemoryConfig()


def _ranked(formulas: dict[str, float]) -> list[RankedFact]:
    candidates = [
        Candidate(fact_id=f"id-{i}", entity_key="person:bruno_almeida", fact_text=text, valid_from=NOW)
        for i, text in enumerate(formulas)
    ]
    ranked = rank_candidates(candidates, CONFIG, NOW)
    for fact in ranked:
        fact.scores["formula"] = fact.score = formulas[fact.candidate.fact_text]
    return sorted(ranked, key=lambda fact: -fact.score)


def test_blend_is_multiplicative_with_a_floor() -> None:
    assert blend(0.9, 0.0, 0.7) == pytest.approx(0.27)
    assert blend(0.9, 1.0, 0.7) == pytest.approx(0.90)
    assert blend(0.92, 1.0, 0.7) == pytest.approx(0.92)
    assert blend(0.45, 0.0, 0.7) == pytest.approx(0.135)


def test_seed_example_football_team_is_vetoed_to_zero_facts() -> None:
    ranked = _ranked(
        {
            "Bruno Almeida runs marathons": 0.45,
            "Bruno Almeida developed an ML model": 0.38,
            "Bruno Almeida works at Orion Tech": 0.35,
        }
    )
    skill = ScriptedReranker({fact.candidate.fact_text: 0.0 for fact in ranked})
    outcome = rerank("Qual o time de futebol do Bruno Almeida?", ranked, skill, CONFIG)
    assert outcome.applied
    assert outcome.vetoed == 3
    assert all(fact.score == 0.0 for fact in outcome.facts)
    assert all(fact.scores["reranker"] == 0.0 for fact in outcome.facts)
    assert all(fact.scores["formula"] > 0.3 for fact in outcome.facts)


def test_seed_example_marcos_blend_reorders_and_filters() -> None:
    ranked = _ranked(
        {
            "Marcos Tavares lives in Porto Alegre": 0.91,
            "Marcos Tavares is a product manager at Vertix": 0.65,
            "Carolina is an architect": 0.30,
        }
    )
    skill = ScriptedReranker(
        {
            "Marcos Tavares lives in Porto Alegre": 1.0,
            "Marcos Tavares is a product manager at Vertix": 0.2,
            "Carolina is an architect": 0.0,
        }
    )
    outcome = rerank("Onde o Marcos Tavares mora?", ranked, skill, CONFIG)
    scores = {fact.candidate.fact_text: fact.score for fact in outcome.facts}
    assert scores["Marcos Tavares lives in Porto Alegre"] == pytest.approx(0.91)
    assert scores["Marcos Tavares is a product manager at Vertix"] == pytest.approx(0.65 * (0.3 + 0.7 * 0.2))
    assert scores["Carolina is an architect"] == 0.0  # below min_reranker_score: vetoed


def test_reranker_sees_twice_topk_candidates() -> None:
    ranked = _ranked({f"fact {i}": 1.0 - i / 100 for i in range(30)})
    skill = ScriptedReranker({fact.candidate.fact_text: 0.5 for fact in ranked})
    config = CONFIG.model_copy(update={"topk_facts": 5})
    outcome = rerank("q", ranked, skill, config)
    assert len(skill.calls[0].candidates) == 10
    assert outcome.candidates == 10
    assert len(outcome.facts) == 10


def test_slow_reranker_times_out_and_keeps_the_original_order() -> None:
    ranked = _ranked({"a": 0.9, "b": 0.8, "c": 0.7})
    skill = ScriptedReranker({"a": 0.0, "b": 0.0, "c": 1.0}, delay_s=0.8)
    config = CONFIG.model_copy(update={"reranker_timeout_sec": 0.1})
    started = time.perf_counter()
    outcome = rerank("q", ranked, skill, config)
    assert time.perf_counter() - started < 0.6
    assert not outcome.applied
    assert outcome.reason.startswith("timeout")
    assert [fact.candidate.fact_text for fact in outcome.facts] == ["a", "b", "c"]
    assert [fact.score for fact in outcome.facts] == [0.9, 0.8, 0.7]
    assert all("reranker" not in fact.scores for fact in outcome.facts)
    assert skill.finished.wait(5)
    # The late answer changes nothing afterwards.
    assert [fact.score for fact in outcome.facts] == [0.9, 0.8, 0.7]


def test_failing_reranker_keeps_the_original_order() -> None:
    ranked = _ranked({"a": 0.9, "b": 0.8})
    outcome = rerank("q", ranked, ScriptedReranker({}, error=RuntimeError("model down")), CONFIG)
    assert not outcome.applied
    assert "RuntimeError" in outcome.reason
    assert [fact.score for fact in outcome.facts] == [0.9, 0.8]


def test_answer_covering_too_few_candidates_is_ignored() -> None:
    ranked = _ranked({"a": 0.9, "b": 0.8, "c": 0.7})
    outcome = rerank("q", ranked, ScriptedReranker({"c": 1.0}), CONFIG)
    assert not outcome.applied
    assert [fact.candidate.fact_text for fact in outcome.facts] == ["a", "b", "c"]


def test_disabled_or_offline_reranker_is_skipped() -> None:
    ranked = _ranked({"a": 0.9})
    disabled = rerank("q", ranked, ScriptedReranker({"a": 0.0}), CONFIG.model_copy(update={"enable_reranker": False}))
    assert (disabled.applied, disabled.reason) == (False, "disabled")
    offline = rerank("q", ranked, None, CONFIG)
    assert (offline.applied, offline.reason) == (False, "no LLM configured")
    assert offline.facts[0].score == 0.9


class _Provider:
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.messages: list[list[dict[str, str]]] = []

    def complete(
        self,
        messages: list[dict[str, str]],
        temperature: float = 0,
        response_format: dict[str, object] | None = None,
        max_tokens: int | None = None,
    ) -> LLMResult:
        self.messages.append(messages)
        return LLMResult(text=self.answer, usage=TokenUsage(10, 5), model="stub")


def test_llm_rerank_skill_parses_and_clamps_scores() -> None:
    provider = _Provider(json.dumps({"scores": [{"id": 1, "score": 1.4}, {"id": 2, "score": -0.2}]}))
    ranked = _ranked({"Marcos lives in Porto Alegre": 0.8, "Marcos likes jazz": 0.7})
    outcome = rerank("Onde o Marcos mora?", ranked, LLMRerankSkill(provider), CONFIG)
    assert outcome.applied
    assert outcome.usage.total_tokens == 15
    by_text = {fact.candidate.fact_text: fact for fact in outcome.facts}
    assert by_text["Marcos lives in Porto Alegre"].scores["reranker"] == 1.0
    assert by_text["Marcos likes jazz"].score == 0.0
    user = provider.messages[0][1]["content"]
    assert "Query: Onde o Marcos mora?" in user
    assert "[1] Marcos lives in Porto Alegre" in user


def test_llm_rerank_skill_invalid_json_keeps_the_order() -> None:
    ranked = _ranked({"a": 0.9, "b": 0.8})
    outcome = rerank("q", ranked, LLMRerankSkill(_Provider("Sure! a is relevant.")), CONFIG)
    assert not outcome.applied
    assert "SkillOutputError" in outcome.reason
    assert outcome.usage.total_tokens == 15
    assert [fact.score for fact in outcome.facts] == [0.9, 0.8]

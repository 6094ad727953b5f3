"""Merge and rank formulas (R6, R8, R13), pure: no database."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from memory_core.config import MemoryConfig
from memory_core.read.rank import (
    Candidate,
    candidate_importance,
    compute_dynamic_importance,
    compute_pattern_signal,
    effective_confidence,
    formula_score,
    graph_score,
    merge_candidates,
    rank_candidates,
    recency_score,
    relevance,
    select_final,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CONFIG = MemoryConfig()
SCORE_KEYS = {"semantic", "keyword", "recency", "importance", "confidence", "formula", "pattern", "graph", "message"}


def _candidate(fact_id: str, **signals: float) -> Candidate:
    return Candidate(fact_id=fact_id, entity_key="person:ana", fact_text=f"fact {fact_id}", valid_from=NOW, **signals)


def test_recency_halves_every_half_life() -> None:
    assert recency_score(NOW, NOW, 14) == pytest.approx(1.0)
    assert recency_score(NOW - timedelta(days=14), NOW, 14) == pytest.approx(0.5)
    assert recency_score(NOW - timedelta(days=28), NOW, 14) == pytest.approx(0.25)
    assert recency_score(NOW + timedelta(days=3), NOW, 14) == pytest.approx(1.0)  # the future is "now"


def test_effective_confidence_decays_five_percent_a_week_to_a_floor() -> None:
    assert effective_confidence(0.95, NOW, NOW) == pytest.approx(0.95)
    assert effective_confidence(0.95, NOW - timedelta(weeks=1), NOW) == pytest.approx(0.95 * 0.95)
    assert effective_confidence(0.95, NOW - timedelta(weeks=10), NOW) == pytest.approx(0.95 * 0.95**10)
    assert effective_confidence(0.95, NOW - timedelta(weeks=500), NOW) == pytest.approx(0.10)
    # The floor never raises a confidence that started below it.
    assert effective_confidence(0.05, NOW - timedelta(weeks=50), NOW) == pytest.approx(0.05)


def test_seed_weights_with_semantic_alone_are_the_seed_formula() -> None:
    score = formula_score(semantic=0.9, keyword=0.0, graph=0.0, recency=0.5, importance=0.4, pattern=0.0, config=CONFIG)
    assert score == pytest.approx(0.70 * 0.9 + 0.20 * 0.5 + 0.10 * 0.4)


def test_keyword_and_graph_complement_semantic_without_exceeding_one() -> None:
    assert relevance(0.5, 0.0, 0.0) == pytest.approx(0.5)
    assert relevance(0.5, 1.0, 0.0) == pytest.approx(1 - 0.5 * 0.5)
    assert relevance(0.0, 0.0, 1.0) == pytest.approx(0.6)
    assert relevance(1.0, 1.0, 1.0) == pytest.approx(1.0)
    assert relevance(0.5, 0.5, 0.5) > relevance(0.5, 0.0, 0.0)


def test_score_weights_override_changes_the_formula() -> None:
    config = MemoryConfig(score_weights={"semantic": 1.0})
    score = formula_score(semantic=0.8, keyword=0, graph=0, recency=1.0, importance=1.0, pattern=0.0, config=config)
    assert score == pytest.approx(0.8)


def test_pattern_signal_rewards_reinforced_or_recently_confirmed_facts_up_to_a_tenth() -> None:
    assert compute_pattern_signal(0, None, NOW) == 0.0
    assert 0.0 < compute_pattern_signal(1, None, NOW) < compute_pattern_signal(5, None, NOW) < 0.10
    assert compute_pattern_signal(49, None, NOW) == pytest.approx(0.10)
    assert compute_pattern_signal(1, NOW, NOW) == pytest.approx(0.10)
    assert compute_pattern_signal(1, NOW - timedelta(days=7), NOW) == pytest.approx(0.05, abs=0.01)


def test_dynamic_importance_components_and_clamp() -> None:
    base = compute_dynamic_importance(0.5, 0, None, 0, False, NOW)
    assert base == pytest.approx(0.5)
    retrieved = compute_dynamic_importance(0.5, 10, None, 0, False, NOW)
    recently_used = compute_dynamic_importance(0.5, 10, NOW, 0, False, NOW)
    assert base < retrieved < recently_used
    corrected = compute_dynamic_importance(0.5, 0, None, 2, False, NOW)
    assert corrected == pytest.approx(0.5 * 0.8**2)
    assert compute_dynamic_importance(0.5, 0, None, 0, True, NOW) == pytest.approx(0.5 * 1.3)
    assert compute_dynamic_importance(1.0, 10**9, NOW, 0, True, NOW) == pytest.approx(3.0)
    assert compute_dynamic_importance(0.01, 0, None, 30, False, NOW) == pytest.approx(0.05)


def test_graph_score_hop_decay_and_query_bonus() -> None:
    common = {"fact_time": NOW, "edge_time": NOW, "now": NOW, "config": CONFIG}
    hop1 = graph_score(depth=1, edge_strength=0.6, mentioned_in_query=False, **common)
    hop2 = graph_score(depth=2, edge_strength=0.6, mentioned_in_query=False, **common)
    assert hop1 == pytest.approx(0.6)
    assert hop2 == pytest.approx(0.3)
    bonus = graph_score(depth=1, edge_strength=0.6, mentioned_in_query=True, **common)
    assert bonus == pytest.approx(0.9)
    # Capped at 1: the query entity's own facts with the bonus.
    assert graph_score(depth=0, edge_strength=1.0, mentioned_in_query=True, **common) == 1.0
    old = graph_score(
        depth=1,
        edge_strength=0.6,
        mentioned_in_query=False,
        fact_time=NOW - timedelta(days=3650),
        edge_time=NOW - timedelta(days=3650),
        now=NOW,
        config=CONFIG,
    )
    assert old == pytest.approx(0.6 * 0.5 * 0.5, rel=1e-3)  # softened recency never reaches 0


def test_merge_deduplicates_by_fact_id_keeping_the_best_of_each_signal() -> None:
    semantic = _candidate("a", semantic=0.8)
    semantic.sources.add("semantic")
    keyword = _candidate("a", keyword=0.5)
    keyword.sources.add("keyword")
    graph = _candidate("b", graph=0.4)
    merged = merge_candidates([semantic], [keyword, graph])
    assert set(merged) == {"a", "b"}
    assert merged["a"].semantic == 0.8
    assert merged["a"].keyword == 0.5
    assert merged["a"].sources == {"semantic", "keyword"}


def test_scores_dict_keeps_every_signal_and_ranking_is_by_formula() -> None:
    ranked = rank_candidates([_candidate("low", semantic=0.3), _candidate("high", semantic=0.9)], CONFIG, NOW)
    assert [fact.candidate.fact_id for fact in ranked] == ["high", "low"]
    for fact in ranked:
        assert set(fact.scores) == SCORE_KEYS
        assert fact.score == fact.scores["formula"]
        assert "reranker" not in fact.scores


def test_final_selection_applies_min_score_and_topk() -> None:
    facts = rank_candidates([_candidate(str(i), semantic=i / 10) for i in range(10)], CONFIG, NOW)
    for fact in facts:
        fact.score = float(fact.candidate.fact_id) / 10
    kept = select_final(facts, CONFIG.model_copy(update={"topk_facts": 3}))
    assert [fact.candidate.fact_id for fact in kept] == ["9", "8", "7"]
    all_kept = select_final(facts, CONFIG)
    assert min(fact.score for fact in all_kept) >= 0.15
    assert len(all_kept) == 8


def _reference_scores(candidate: Candidate, config: MemoryConfig, now: datetime) -> dict[str, float]:
    """The score breakdown composed from the documented formulas one by one."""
    recency = recency_score(candidate.valid_from, now, float(config.recency_half_life_days))
    since = candidate.valid_from
    if candidate.last_confirmed_at is not None and candidate.last_confirmed_at > since:
        since = candidate.last_confirmed_at
    confidence = effective_confidence(
        candidate.confidence,
        since,
        now,
        decay_per_week=config.confidence_decay_per_week,
        floor=config.confidence_floor,
    )
    pattern = compute_pattern_signal(
        candidate.reinforcement_count, candidate.last_confirmed_at, now, max_boost=config.pattern_signal_max_boost
    )
    importance = candidate_importance(candidate)
    formula = formula_score(
        semantic=candidate.semantic,
        keyword=candidate.keyword,
        graph=candidate.graph,
        recency=recency,
        importance=importance,
        pattern=pattern,
        config=config,
        message=candidate.message,
    )
    values = {
        "semantic": max(0.0, candidate.semantic),
        "keyword": candidate.keyword,
        "graph": candidate.graph,
        "message": candidate.message,
        "recency": recency,
        "importance": importance,
        "confidence": confidence,
        "pattern": pattern,
        "formula": formula,
    }
    return {name: round(value, 6) for name, value in values.items()}


def test_ranking_scores_equal_the_documented_formulas_to_the_sixth_decimal() -> None:
    rng = random.Random(7)
    # min_confidence 0: every candidate is ranked, whatever its (random) confidence.
    config = CONFIG.model_copy(
        update={"score_weights": {"semantic": 0.6, "recency": 0.25, "importance": 0.15}, "min_confidence": 0.0}
    )
    candidates = []
    for index in range(2_000):
        valid_from = NOW + timedelta(days=rng.uniform(-900, 5))  # some start in the future
        confirmed = rng.choice([None, valid_from + timedelta(days=rng.uniform(-30, 60))])
        candidates.append(
            Candidate(
                fact_id=str(index),
                entity_key="person:ana",
                fact_text="x",
                valid_from=valid_from,
                confidence=rng.uniform(0.0, 1.0),
                importance=rng.uniform(-0.2, 1.3),
                entity_importance=rng.choice([None, rng.uniform(-0.2, 1.3)]),
                reinforcement_count=rng.choice([0, 0, 1, 3, 20]),
                last_confirmed_at=confirmed,
                semantic=rng.uniform(-0.3, 1.0),
                keyword=rng.choice([0.0, rng.uniform(0.0, 1.2)]),
                graph=rng.choice([0.0, rng.uniform(0.0, 1.0)]),
                message=rng.choice([0.0, rng.uniform(0.0, 1.2)]),
            )
        )
    ranked = rank_candidates(candidates, config, NOW)
    assert len(ranked) == len(candidates)
    for fact in ranked:
        # Rounded as the answer shows them (pipeline._scored); the formula already is.
        shown = {name: round(value, 6) for name, value in fact.scores.items()}
        assert shown == _reference_scores(fact.candidate, config, NOW), fact.candidate
        assert fact.score == fact.scores["formula"]
    assert [fact.score for fact in ranked] == sorted((fact.score for fact in ranked), reverse=True)


def test_min_confidence_filters_on_the_confidence_decayed_since_the_fact_was_stored_or_confirmed() -> None:
    said = NOW - timedelta(days=800)  # imported history: stored today, so not decayed
    fresh = Candidate("fresh", "person:ana", "x", said, confidence=0.60, confidence_since=NOW, semantic=0.5)
    # 0.60 x 0.95 ** 3 = 0.514 < 0.55: stored three weeks ago and never confirmed since.
    weeks_ago = NOW - timedelta(weeks=3)
    stale = Candidate("stale", "person:ana", "x", said, confidence=0.60, confidence_since=weeks_ago, semantic=0.9)
    sure = Candidate("sure", "person:ana", "x", said, confidence=0.95, confidence_since=weeks_ago, semantic=0.5)
    ranked = rank_candidates([fresh, stale, sure], CONFIG, NOW)
    assert sorted(fact.candidate.fact_id for fact in ranked) == ["fresh", "sure"]
    confidence = {fact.candidate.fact_id: fact.scores["confidence"] for fact in ranked}
    assert confidence["fresh"] == pytest.approx(0.60)
    assert confidence["sure"] == pytest.approx(0.95 * 0.95**3)
    # A floor at or above the threshold keeps every fact whose stored confidence passes.
    floored = CONFIG.model_copy(update={"confidence_floor": 0.55})
    assert len(rank_candidates([fresh, stale, sure], floored, NOW)) == 3

"""MemoryConfig: the seeds' defaults, bounds, and per-request overrides."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from memory_core.config import ConfigOverrideError, MemoryConfig, apply_overrides
from memory_core.errors import AranduError

# (field, default) as documented in seeds/003 "Configuração" / "Configuration Reference" and the
# read/write pipeline pages; one row per value so a drift names the field that moved.
SEED_DEFAULTS: list[tuple[str, Any]] = [
    # Extraction
    ("extraction_timeout_sec", 30.0),
    ("enable_informed_extraction", True),
    ("informed_extraction_topk", 10),
    ("informed_extraction_context_budget_tokens", 800),
    ("default_fact_importance", 0.5),
    ("semantic_dedup_threshold", 0.85),
    ("relation_retry_min_entities", 2),
    ("input_short_max_chars", 500),
    ("input_long_min_chars", 2000),
    ("chars_per_token", 4),
    # Entity resolution
    ("fuzzy_threshold", 0.85),
    ("fuzzy_lower_threshold", 0.50),
    ("enable_llm_resolution", True),
    ("llm_resolution_max_candidates", 3),
    ("person_prefix_min_chars", 3),
    # Reconciliation and upsert
    ("reconciliation_similarity_threshold", 0.50),
    ("relationship_initial_strength", 0.8),
    ("relationship_max_strength", 1.0),
    ("mirror_fact_confidence", 0.60),
    ("entity_link_min_name_chars", 3),
    # Retrieval
    ("topk_facts", 20),
    ("topk_events", 8),
    ("event_max_scan", 200),
    ("min_similarity", 0.20),
    ("min_confidence", 0.55),
    ("min_score", 0.15),
    ("recency_half_life_days", 14),
    ("signal_max_facts", 50),
    ("keyword_min_word_chars", 3),
    ("keyword_max_terms", 5),
    ("graph_max_hops", 2),
    ("graph_hop_decay", 0.5),
    ("graph_query_bonus", 1.5),
    ("graph_min_edge_strength", 0.5),
    ("graph_max_facts", 30),
    # Ours (not in the seeds): rarity-weighted keywords, entity specificity and reply context, on by default.
    ("keyword_idf", True),
    ("entity_specificity", True),
    ("event_reply_context", True),
    ("event_reply_max_gap_s", 21_600),
    ("event_query_unnamed_share", 1.0),
    ("event_neighbour_share", 0.0),
    ("event_question_share", 0.5),
    # Reranker
    ("enable_reranker", True),
    ("reranker_timeout_sec", 5.0),
    ("reranker_weight", 0.70),
    ("min_reranker_score", 0.10),
    ("reranker_candidate_multiplier", 2),
    ("pattern_signal_max_boost", 0.10),
    # Confidence
    ("confidence_default", 0.60),
    ("confidence_decay_per_week", 0.95),
    ("confidence_floor", 0.10),
    # Spreading activation
    ("spreading_activation_hops", 2),
    ("spreading_decay_factor", 0.50),
    ("spreading_max_related_entities", 5),
    ("spreading_facts_per_entity", 3),
    # Context compression
    ("context_max_tokens", 2000),
    ("hot_tier_ratio", 0.50),
    ("warm_tier_ratio", 0.30),
    ("context_event_max_chars", 300),
    ("context_stale_threshold_days", 90),
    # Emotional trends and dynamic importance
    ("emotional_trend_window_days", 30),
    ("emotional_trend_min_events", 5),
    ("emotional_summary_max_age_days", 7),
    ("dynamic_importance_recency_halflife_days", 7),
    ("dynamic_importance_correction_penalty", 0.8),
    ("dynamic_importance_pattern_boost", 1.3),
    ("dynamic_importance_min", 0.05),
    ("dynamic_importance_max", 3.0),
    # Clustering and consolidation
    ("cluster_max_age_days", 90),
    ("cluster_min_facts", 2),
    ("community_similarity_threshold", 0.75),
    ("community_min_clusters", 2),
    ("consolidation_min_events", 3),
    ("consolidation_lookback_days", 7),
    # Sleep-time compute
    ("importance_recency_halflife_days", 30),
    ("summary_refresh_interval_days", 7),
    ("summary_refresh_max_entities", 10),
    ("profile_consolidation_max_entities", 20),
    ("profile_consolidation_max_facts", 50),
    ("profile_consolidation_timeout_sec", 15.0),
    ("entity_community_min_edge_strength", 0.3),
    ("entity_community_min_size", 2),
    # Memify
    ("vitality_stale_threshold", 0.2),
    ("memify_merge_similarity_threshold", 0.90),
    ("vitality_recency_halflife_days", 30),
    ("vitality_reinforcement_cap", 5),
    ("vitality_correction_penalty", 0.8),
    # Procedural memory
    ("directive_max_tokens", 300),
    ("directive_cache_ttl_minutes", 30),
    ("contradiction_similarity_threshold", 0.80),
    # Locale, open catalogue, limits
    ("timezone", "UTC"),
    ("extra_attribute_keys", frozenset()),
    ("attribute_aliases", {}),
    ("extra_namespaces", frozenset()),
    ("extra_self_references", frozenset()),
    ("extra_relationship_hints", frozenset()),
    ("max_facts_per_event", 100),
    ("embedding_dimensions", 1536),
    ("pending_operation_ttl_minutes", 5),
]


@pytest.fixture
def base() -> MemoryConfig:
    return MemoryConfig()


@pytest.mark.parametrize(("field", "expected"), SEED_DEFAULTS, ids=[row[0] for row in SEED_DEFAULTS])
def test_default_matches_the_seeds(base: MemoryConfig, field: str, expected: Any) -> None:
    value = getattr(base, field)
    assert value == expected
    # An int where the seeds say float (or the reverse) would change strict override checking.
    assert type(value) is type(expected) or isinstance(value, frozenset | dict)


def test_every_field_is_covered_by_the_defaults_table() -> None:
    mapping_fields = {
        "score_weights",
        "confidence_level_map",
        "importance_category_map",
        "vitality_weights",
        "entity_importance_weights",
    }
    covered = {field for field, _ in SEED_DEFAULTS} | mapping_fields
    assert covered == set(MemoryConfig.model_fields)


def test_mapping_defaults_match_the_seeds(base: MemoryConfig) -> None:
    assert base.score_weights == {"semantic": 0.70, "recency": 0.20, "importance": 0.10}
    assert base.confidence_level_map == {
        "explicit_statement": 0.95,
        "strong_inference": 0.80,
        "weak_inference": 0.60,
        "speculation": 0.40,
    }
    assert base.importance_category_map == {
        "biographical_milestone": 0.95,
        "relationship_change": 0.90,
        "stable_preference": 0.75,
        "specific_event": 0.65,
        "routine_activity": 0.50,
        "conversational": 0.30,
    }
    assert base.vitality_weights == {"retrieval": 0.30, "recency": 0.25, "confidence": 0.20, "reinforcement": 0.15}
    assert base.entity_importance_weights == {
        "fact_density": 0.30,
        "recency": 0.25,
        "retrieval_frequency": 0.25,
        "relationship_degree": 0.20,
    }


def test_cold_tier_gets_the_remaining_budget(base: MemoryConfig) -> None:
    assert base.cold_tier_ratio == pytest.approx(0.20)


def test_config_is_frozen_and_rejects_unknown_fields(base: MemoryConfig) -> None:
    with pytest.raises(ValidationError):
        base.topk_facts = 5  # type: ignore[misc]
    with pytest.raises(ValidationError, match="topk_factz"):
        MemoryConfig(topk_factz=5)  # type: ignore[call-arg]


def test_effective_is_json_with_every_field_and_sorted_sets() -> None:
    config = MemoryConfig(extra_namespaces=frozenset({"pet", "bank", "car"}))
    effective = config.effective()
    assert set(effective) == set(MemoryConfig.model_fields)
    assert effective["extra_namespaces"] == ["bank", "car", "pet"]
    assert effective["score_weights"] == {"semantic": 0.70, "recency": 0.20, "importance": 0.10}
    assert json.loads(json.dumps(effective)) == effective


def test_override_applies_and_is_echoed_by_effective(base: MemoryConfig) -> None:
    resolution = apply_overrides(base, {"topk_facts": 5, "enable_reranker": False, "spreading_activation_hops": 0})
    assert resolution.warnings == []
    assert resolution.config.topk_facts == 5
    assert resolution.config.enable_reranker is False
    effective = resolution.config.effective()
    assert effective["topk_facts"] == 5
    assert effective["enable_reranker"] is False
    assert effective["spreading_activation_hops"] == 0
    assert effective["min_score"] == 0.15  # untouched keys are inherited


def test_no_overrides_returns_the_base(base: MemoryConfig) -> None:
    assert apply_overrides(base, None).config is base
    assert apply_overrides(base, {}).warnings == []


def test_unknown_key_is_warned_and_ignored(base: MemoryConfig) -> None:
    resolution = apply_overrides(base, {"topk_factz": 5, "min_score": 0.2})
    assert len(resolution.warnings) == 1
    assert "unknown config override 'topk_factz' ignored" in resolution.warnings[0]
    assert "topk_facts" in resolution.warnings[0]  # the suggestion
    assert resolution.config.topk_facts == 20
    assert resolution.config.min_score == 0.2


def test_wrong_type_names_the_key(base: MemoryConfig) -> None:
    with pytest.raises(ConfigOverrideError) as caught:
        apply_overrides(base, {"topk_facts": "many"})
    assert caught.value.field == "topk_facts"
    assert str(caught.value) == "config_overrides.topk_facts: Input should be a valid integer"
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, AranduError)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("topk_facts", "5"),  # numeric string for an int
        ("topk_facts", True),  # bool for an int
        ("topk_facts", 5.0),  # float for an int
        ("enable_reranker", 1),  # int for a bool
        ("min_score", "0.2"),  # string for a float
        ("extra_namespaces", "pet"),  # a bare string is not a set
        ("score_weights", [0.5, 0.5]),  # a list is not a mapping
    ],
)
def test_strict_json_typing_rejects(base: MemoryConfig, field: str, value: Any) -> None:
    with pytest.raises(ConfigOverrideError) as caught:
        apply_overrides(base, {field: value})
    assert caught.value.field == field
    assert f"config_overrides.{field}" in str(caught.value)


def test_int_for_float_is_accepted(base: MemoryConfig) -> None:
    config = apply_overrides(base, {"min_score": 0, "extraction_timeout_sec": 60}).config
    assert config.min_score == 0.0
    assert isinstance(config.extraction_timeout_sec, float)
    assert config.extraction_timeout_sec == 60.0


def test_list_and_python_set_for_set_fields_are_accepted(base: MemoryConfig) -> None:
    config = apply_overrides(base, {"extra_namespaces": ["pet", "car"], "extra_self_references": {"yo"}}).config
    assert config.extra_namespaces == frozenset({"pet", "car"})
    assert config.extra_self_references == frozenset({"yo"})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("min_score", 1.5),
        ("min_similarity", -0.1),
        ("topk_facts", 0),
        ("topk_facts", 1_000_000),
        ("reranker_timeout_sec", 0),
        ("extraction_timeout_sec", -1.0),
        ("spreading_activation_hops", -1),
        ("confidence_level_map", {"explicit_statement": 1.2}),
        ("score_weights", {"semantic": -0.1}),
        ("score_weights", {"semantic": 0.0}),  # all weights zero ranks nothing
        ("min_score", float("nan")),
    ],
)
def test_out_of_bounds_is_rejected(base: MemoryConfig, field: str, value: Any) -> None:
    with pytest.raises(ConfigOverrideError) as caught:
        apply_overrides(base, {field: value})
    assert caught.value.field == field


def test_score_weights_keys_are_limited(base: MemoryConfig) -> None:
    with pytest.raises(ConfigOverrideError, match="score_weights") as caught:
        apply_overrides(base, {"score_weights": {"semantic": 0.5, "keyword": 0.5}})
    assert caught.value.field == "score_weights"


def test_partial_mapping_override_replaces_the_whole_mapping(base: MemoryConfig) -> None:
    config = apply_overrides(base, {"score_weights": {"semantic": 0.6}}).config
    assert config.score_weights == {"semantic": 0.6, "recency": 0.0, "importance": 0.0}


def test_tier_ratios_summing_over_one_are_rejected(base: MemoryConfig) -> None:
    with pytest.raises(ConfigOverrideError, match="hot_tier_ratio \\+ warm_tier_ratio") as caught:
        apply_overrides(base, {"hot_tier_ratio": 0.8})
    # The check sits on warm_tier_ratio, but the caller only sent hot_tier_ratio.
    assert caught.value.field == "hot_tier_ratio"
    assert apply_overrides(base, {"hot_tier_ratio": 0.7}).config.cold_tier_ratio == pytest.approx(0.0)
    with pytest.raises(ValidationError):
        MemoryConfig(hot_tier_ratio=0.6, warm_tier_ratio=0.5)


def test_fuzzy_band_must_be_ordered(base: MemoryConfig) -> None:
    with pytest.raises(ConfigOverrideError) as caught:
        apply_overrides(base, {"fuzzy_threshold": 0.4})
    assert caught.value.field == "fuzzy_threshold"


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "utc", "localtime", "../etc/passwd"])
def test_bad_timezone_is_rejected(base: MemoryConfig, zone: str) -> None:
    with pytest.raises(ConfigOverrideError) as caught:
        apply_overrides(base, {"timezone": zone})
    assert caught.value.field == "timezone"


def test_good_timezone_is_accepted(base: MemoryConfig) -> None:
    config = apply_overrides(base, {"timezone": "America/Sao_Paulo"}).config
    assert config.timezone == "America/Sao_Paulo"
    assert str(config.tz) == "America/Sao_Paulo"


def test_base_is_unchanged_after_overrides(base: MemoryConfig) -> None:
    before = base.effective()
    resolution = apply_overrides(
        base,
        {"topk_facts": 3, "score_weights": {"semantic": 1.0}, "extra_namespaces": ["pet"], "nope": 1},
    )
    assert resolution.config is not base
    with pytest.raises(ConfigOverrideError):
        apply_overrides(base, {"topk_facts": "3", "min_score": 0.3})
    assert base.effective() == before
    assert base.score_weights == {"semantic": 0.70, "recency": 0.20, "importance": 0.10}


def test_several_bad_keys_are_reported_together(base: MemoryConfig) -> None:
    with pytest.raises(ConfigOverrideError) as caught:
        apply_overrides(
            base,
            {"min_score": 2.0, "unknown_knob": 1, "topk_facts": "5", "enable_reranker": False, "timezone": "Nowhere"},
        )
    error = caught.value
    assert error.field == "min_score"  # the first bad key in the caller's order
    assert error.fields == ("min_score", "topk_facts", "timezone")
    for key in ("min_score", "topk_facts", "timezone"):
        assert f"config_overrides.{key}:" in error.message
    assert "unknown_knob" not in error.message  # unknown keys only warn
    assert str(error) == error.message


def test_non_json_value_is_rejected_with_the_others(base: MemoryConfig) -> None:
    with pytest.raises(ConfigOverrideError) as caught:
        apply_overrides(base, {"timezone": object(), "topk_facts": -1})
    assert caught.value.fields == ("timezone", "topk_facts")

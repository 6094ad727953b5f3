"""Tuning parameters of the memory pipelines: one frozen :class:`MemoryConfig`.

Every knob of the write pipeline, the read pipeline and the background jobs lives here, with the
default documented in the seeds (``seeds/003`` sections "Configuração" and "Configuration
Reference", plus the values the seeds' concept pages and advanced API pages state for the read
pipeline, entity resolution, reconciliation, upsert, memify and sleep-time compute). Where the
seeds give a value but no parameter name, the field name is ours and its description says so.

A client holds one base config; each request may carry ``config_overrides``, applied with
:func:`apply_overrides`, which never touches the base and returns the effective config plus
warnings. :meth:`MemoryConfig.effective` is the JSON-friendly ``config_effective`` the API echoes.

Process-wide settings read from the environment (URLs, providers, pools) are not here: they live
in :mod:`memory_core.settings`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, tzinfo
from typing import Annotated, Any, Literal, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
)

from memory_core.errors import AranduError

# A share of something (similarity, confidence, budget fraction, probability-like score).
Ratio = Annotated[float, Field(ge=0.0, le=1.0)]

ScoreSignal = Literal["semantic", "recency", "importance"]
VitalitySignal = Literal["retrieval", "recency", "confidence", "reinforcement"]
EntityImportanceSignal = Literal["fact_density", "recency", "retrieval_frequency", "relationship_degree"]

# Keys of JSON objects that users fill in (level names, category names, attribute keys).
NonEmptyKey = Annotated[str, Field(min_length=1)]

# Upper bounds below are ours, not the seeds': overrides arrive per request from callers, and a
# request must not be able to ask for a million facts or a ten-hour LLM timeout.
_MAX_DAYS = 3650
_MAX_LLM_TIMEOUT_SEC = 600.0

# Tolerance for "a + b <= 1" on floats: 0.7 + 0.3 must pass even though it is 0.9999999999999999.
_SUM_EPSILON = 1e-9

# Zone files that exist in a tz database but are not IANA zone names: "localtime" is whatever the
# host is set to, which would make the same config mean different things on different machines.
_NON_IANA_ZONE_KEYS = frozenset({"localtime", "posixrules"})


def _weights_completer(keys: tuple[str, ...]) -> AfterValidator:
    """Build a validator that fills absent weight keys with 0.0 and rejects an all-zero mapping."""

    def complete(value: Mapping[str, float]) -> dict[str, float]:
        # Missing keys weigh nothing: a caller who sends {"semantic": 1.0} gets pure semantic
        # ranking, and consumers can index every key without a default.
        completed = {key: float(value.get(key, 0.0)) for key in keys}
        if sum(completed.values()) <= 0.0:
            raise ValueError("at least one weight must be greater than 0")
        return completed

    return AfterValidator(complete)


ScoreWeights = Annotated[
    Mapping[ScoreSignal, NonNegativeFloat],
    _weights_completer(("semantic", "recency", "importance")),
]
VitalityWeights = Annotated[
    Mapping[VitalitySignal, NonNegativeFloat],
    _weights_completer(("retrieval", "recency", "confidence", "reinforcement")),
]
EntityImportanceWeights = Annotated[
    Mapping[EntityImportanceSignal, NonNegativeFloat],
    _weights_completer(("fact_density", "recency", "retrieval_frequency", "relationship_degree")),
]


def _default_score_weights() -> dict[ScoreSignal, float]:
    return {"semantic": 0.70, "recency": 0.20, "importance": 0.10}


def _default_confidence_levels() -> dict[str, float]:
    return {
        "explicit_statement": 0.95,
        "strong_inference": 0.80,
        "weak_inference": 0.60,
        "speculation": 0.40,
    }


def _default_importance_categories() -> dict[str, float]:
    return {
        "biographical_milestone": 0.95,
        "relationship_change": 0.90,
        "stable_preference": 0.75,
        "specific_event": 0.65,
        "routine_activity": 0.50,
        "conversational": 0.30,
    }


def _default_vitality_weights() -> dict[VitalitySignal, float]:
    return {"retrieval": 0.30, "recency": 0.25, "confidence": 0.20, "reinforcement": 0.15}


def _default_entity_importance_weights() -> dict[EntityImportanceSignal, float]:
    return {"fact_density": 0.30, "recency": 0.25, "retrieval_frequency": 0.25, "relationship_degree": 0.20}


def _empty_aliases() -> dict[str, str]:
    return {}


def _load_zone(name: str) -> tzinfo:
    """The tzinfo for an IANA name; raises ValueError naming the problem."""
    if name in _NON_IANA_ZONE_KEYS:
        raise ValueError(f"{name!r} is a host-specific zone file, not an IANA time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # Slim container images may ship without a tz database; UTC must still work there.
        if name == "UTC":
            return UTC
        raise ValueError(f"unknown IANA time zone {name!r} (e.g. 'UTC', 'America/Sao_Paulo')") from None


class MemoryConfig(BaseModel):
    """Every tuning parameter of the pipelines, with the seeds' defaults.

    Frozen, so one instance can be shared by concurrent requests. Mapping fields are typed as
    read-only ``Mapping`` for the same reason; each instance holds its own dicts. Set-valued
    fields are frozensets (the seeds declare some as ``set``; JSON lists are accepted).
    Unknown fields are rejected on direct construction; per-request overrides go through
    :func:`apply_overrides`, which warns about unknown keys instead.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
        validate_default=True,
    )

    # ---- Extraction ------------------------------------------------------------------------
    extraction_timeout_sec: float = Field(
        30.0,
        gt=0.0,
        le=_MAX_LLM_TIMEOUT_SEC,
        description="Timeout of each LLM call during extraction; on timeout extraction is empty (fail-safe).",
    )
    enable_informed_extraction: bool = Field(
        True,
        description="One LLM call informed by existing knowledge; False uses blind multi-pass extraction.",
    )
    informed_extraction_topk: int = Field(
        10,
        ge=0,
        le=200,
        description="Existing facts loaded per known entity as extraction context (numbered, after its profile).",
    )
    informed_extraction_context_budget_tokens: int = Field(
        800,
        ge=0,
        le=32_000,
        description="Token budget of the existing-knowledge context injected into informed extraction.",
    )
    importance_category_map: Mapping[NonEmptyKey, Ratio] = Field(
        default_factory=_default_importance_categories,
        description="Semantic importance category assigned by the LLM -> fact importance.",
    )
    default_fact_importance: Ratio = Field(
        0.5,
        description=(
            "Importance of a fact without a known importance_category (the blind flow's fixed base); "
            "value from the seeds, name ours."
        ),
    )
    semantic_dedup_threshold: Ratio = Field(
        0.85,
        description="Extracted facts more similar than this (cosine) to an earlier one are dropped; name ours.",
    )
    relation_retry_min_entities: int = Field(
        2,
        ge=2,
        le=1000,
        description="Blind flow retries relation extraction once when it got 0 relations for this many entities.",
    )

    # ---- Input classification (extraction strategy) ------------------------------------------
    input_short_max_chars: int = Field(
        500,
        ge=1,
        le=1_000_000,
        description="Inputs shorter than this are SHORT; longer structured inputs are STRUCTURED; name ours.",
    )
    input_long_min_chars: int = Field(
        2000,
        ge=1,
        le=1_000_000,
        description="Unstructured inputs longer than this are LONG (between the two: MEDIUM); name ours.",
    )
    chars_per_token: int = Field(
        4,
        ge=1,
        le=16,
        description="Characters per token when estimating token counts (chars // 4); name ours.",
    )

    # ---- Entity Resolution -----------------------------------------------------------------
    fuzzy_threshold: Ratio = Field(
        0.85,
        description="Cosine similarity at or above which a fuzzy candidate resolves directly.",
    )
    fuzzy_lower_threshold: Ratio = Field(
        0.50,
        description=(
            "Below this similarity a new entity is created; between it and fuzzy_threshold the LLM decides; name ours."
        ),
    )
    enable_llm_resolution: bool = Field(
        True,
        description="Ask the LLM about ambiguous fuzzy matches; False creates a new entity instead.",
    )
    llm_resolution_max_candidates: int = Field(
        3,
        ge=1,
        le=20,
        description="Ambiguous candidates sent to the LLM for disambiguation (top-3); name ours.",
    )
    person_prefix_min_chars: int = Field(
        3,
        ge=1,
        le=50,
        description="Shortest name that may prefix-match a person ('Carol' -> 'Carolina'); name ours.",
    )

    # ---- Reconciliation --------------------------------------------------------------------
    reconciliation_similarity_threshold: Ratio = Field(
        0.50,
        description="Below this similarity to every existing fact a new fact is ADDed without an LLM call; name ours.",
    )

    # ---- Upsert and relationships ------------------------------------------------------------
    relationship_initial_strength: Ratio = Field(
        0.8,
        description="Strength of a newly created relationship; name ours.",
    )
    relationship_max_strength: Ratio = Field(
        1.0,
        description="Cap that repeated mentions reinforce a relationship's strength up to; name ours.",
    )
    mirror_fact_confidence: Ratio = Field(
        0.60,
        description="Confidence of a mirror fact generated from a relationship without a matching fact; name ours.",
    )
    entity_link_min_name_chars: int = Field(
        3,
        ge=1,
        le=50,
        description="Entity names shorter than this are not linked to facts that mention them; name ours.",
    )

    # ---- Retrieval -------------------------------------------------------------------------
    topk_facts: int = Field(20, ge=1, le=500, description="Maximum number of facts returned.")
    topk_events: int = Field(8, ge=0, le=200, description="Maximum number of events included in context.")
    event_max_scan: int = Field(200, ge=0, le=10_000, description="Maximum events scanned for relevance.")
    event_reply_context: bool = Field(
        True,
        description=(
            "Each relevant message brings the next message of its session (in arrival order) when another "
            "speaker said it: the answer to a question is often in the reply. Placed right after its parent, "
            "within topk_events; False lists the matched messages only; name ours."
        ),
    )
    event_query_unnamed_share: Ratio = Field(
        1.0,
        description=(
            "Relevant conversations compare the messages with the embedding of the query without its names (at "
            "1; a share in between mixes it with the query's own): a message rarely names its speaker, and a name in "
            "the query pulls in the messages that address that person instead; names still count through the "
            "keyword signal. 0 uses the query as it is; one more text in the embedding call when the query "
            "names someone; name ours."
        ),
    )
    event_neighbour_share: Ratio = Field(
        0.0,
        description=(
            "A message's relevance is joined (probabilistic OR) by this share of the better of its neighbours' "
            "(the messages just before and after it in its session): the turn that answers often says 'they' or "
            "'it' where the turn beside it names the subject; 0 scores each message alone; name ours."
        ),
    )
    event_question_share: Ratio = Field(
        0.5,
        description=(
            "A message's relevance is joined (probabilistic OR) by this share of the relevance of the question it "
            "answers (the previous message of its session, said by someone else, holding a '?'): 'I'm keen on "
            "counseling' is found by the question 'what jobs are you thinking of?'; 0 scores each message alone; "
            "name ours."
        ),
    )
    event_reply_max_gap_s: int = Field(
        21_600,
        ge=0,
        le=31_536_000,
        description=(
            "Longest time, in seconds, between a message and the next one of its session for the latter to be "
            "shown as its reply (6 h): a message said much later, by another import or another day's talk, "
            "answers something else; 0 pairs only messages stamped at the same instant; name ours."
        ),
    )
    min_similarity: Ratio = Field(0.20, description="Minimum cosine similarity of semantic candidates.")
    min_confidence: Ratio = Field(
        0.55,
        description="Minimum fact confidence to be retrieved (read-time filter only; writes keep every fact).",
    )
    min_score: Ratio = Field(0.15, description="Minimum final score for a fact to be returned.")
    recency_half_life_days: int = Field(
        14,
        ge=1,
        le=_MAX_DAYS,
        description="Half-life of the exponential recency decay.",
    )
    signal_max_facts: int = Field(
        50,
        ge=1,
        le=2000,
        description="Candidate budget of each retrieval signal (the plan's max_facts); name ours.",
    )
    keyword_min_word_chars: int = Field(
        3,
        ge=1,
        le=50,
        description="Keyword signal uses query words of at least this length (> 2 chars); name ours.",
    )
    keyword_max_terms: int = Field(
        5,
        ge=1,
        le=50,
        description="Keyword signal matches at most this many query words; name ours.",
    )
    keyword_idf: bool = Field(
        True,
        description=(
            "Weigh each keyword by its inverse document frequency over the agent's facts (BM25 idf), so words "
            "most facts contain count little; False is the seeds' plain fraction matched; name ours."
        ),
    )

    # ---- Graph retrieval -------------------------------------------------------------------
    graph_max_hops: int = Field(2, ge=1, le=5, description="BFS depth of the graph signal; name ours.")
    graph_hop_decay: Ratio = Field(
        0.5,
        description="Score multiplier of facts found beyond hop 1 (hop 1 = 1.0, hop 2 = 0.5); name ours.",
    )
    graph_query_bonus: float = Field(
        1.5,
        ge=1.0,
        le=10.0,
        description="Multiplier when the entity's name appears in the query text; name ours.",
    )
    graph_min_edge_strength: Ratio = Field(
        0.5,
        description="Edges weaker than this are pruned from hop 2 on (min_edge_strength).",
    )
    graph_max_facts: int = Field(
        30,
        ge=1,
        le=2000,
        description="Default limit of facts returned by the graph signal; name ours.",
    )
    entity_specificity: bool = Field(
        True,
        description=(
            "Scale the graph and spreading scores of an entity's facts by min(1, budget / its fact count), "
            "so an entity with far more facts than the signal can bring does not flood the ranking; name ours."
        ),
    )

    # ---- Reranker --------------------------------------------------------------------------
    enable_reranker: bool = Field(True, description="Rerank the top candidates with the LLM.")
    reranker_timeout_sec: float = Field(
        5.0,
        gt=0.0,
        le=120.0,
        description="Timeout of the reranker call; on timeout the original ranking is kept.",
    )
    reranker_weight: Ratio = Field(
        0.70,
        description="w in final = formula x ((1 - w) + w x reranker).",
    )
    min_reranker_score: Ratio = Field(
        0.10,
        description="Facts the reranker scores below this are eliminated (only with enable_reranker).",
    )
    reranker_candidate_multiplier: int = Field(
        2,
        ge=1,
        le=10,
        description="The reranker sees this many times topk_facts candidates; name ours.",
    )

    # ---- Score Weights ---------------------------------------------------------------------
    score_weights: ScoreWeights = Field(
        default_factory=_default_score_weights,
        description=(
            "Weights of the hybrid formula; keys semantic/recency/importance only, absent keys weigh 0, "
            "should sum to ~1.0."
        ),
    )
    pattern_signal_max_boost: Ratio = Field(
        0.10,
        description="Largest additive boost of the pattern signal for reinforced facts; name ours.",
    )

    # ---- Confidence ------------------------------------------------------------------------
    confidence_level_map: Mapping[NonEmptyKey, Ratio] = Field(
        default_factory=_default_confidence_levels,
        description="Confidence level named by the LLM -> numeric confidence.",
    )
    confidence_default: Ratio = Field(0.60, description="Confidence when the LLM names no level.")
    confidence_decay_per_week: Ratio = Field(
        0.95,
        description="effective_confidence = base x this ** weeks; name ours.",
    )
    confidence_floor: Ratio = Field(
        0.10,
        description="effective_confidence never decays below this; name ours.",
    )

    # ---- Spreading Activation --------------------------------------------------------------
    spreading_activation_hops: int = Field(
        2,
        ge=0,
        le=5,
        description="Maximum relationship hops from seed facts; 0 disables spreading.",
    )
    spreading_decay_factor: Ratio = Field(
        0.50,
        description="Score multiplier per hop (hop 1 = factor, hop 2 = factor squared).",
    )
    spreading_max_related_entities: int = Field(
        5,
        ge=0,
        le=100,
        description="Maximum related entities explored per seed.",
    )
    spreading_facts_per_entity: int = Field(
        3,
        ge=0,
        le=100,
        description="Maximum facts pulled from each related entity (hop 1 and hop 2).",
    )

    # ---- Context Compression ---------------------------------------------------------------
    context_max_tokens: int = Field(
        2000,
        ge=1,
        le=200_000,
        description="Proportional token budget of the formatted context (a target, not a hard cap).",
    )
    hot_tier_ratio: Ratio = Field(0.50, description="Budget share of the top-scoring facts (full detail).")
    warm_tier_ratio: Ratio = Field(
        0.30,
        description="Budget share of supporting facts; the rest (1 - hot - warm) is the cold tier.",
    )
    context_event_max_chars: int = Field(
        300,
        ge=0,
        le=100_000,
        description="Characters kept of each event under 'Relevant conversations:'; name ours.",
    )
    context_stale_threshold_days: int = Field(
        90,
        ge=1,
        le=_MAX_DAYS,
        description="Facts older than this are considered stale by context compression; name ours.",
    )

    # ---- Emotional Trends ------------------------------------------------------------------
    emotional_trend_window_days: int = Field(
        30,
        ge=1,
        le=_MAX_DAYS,
        description="Lookback window of emotional trend detection.",
    )
    emotional_trend_min_events: int = Field(
        5,
        ge=1,
        le=100_000,
        description="Minimum events needed to detect a trend.",
    )
    emotional_summary_max_age_days: int = Field(
        7,
        ge=1,
        le=_MAX_DAYS,
        description="An emotional trend older than this is not summarised into context; name ours.",
    )

    # ---- Dynamic importance ----------------------------------------------------------------
    dynamic_importance_recency_halflife_days: int = Field(
        7,
        ge=1,
        le=_MAX_DAYS,
        description="Half-life of the recency-of-use boost since last_retrieved_at; name ours.",
    )
    dynamic_importance_correction_penalty: Ratio = Field(
        0.8,
        description="Importance is multiplied by this once per user correction; name ours.",
    )
    dynamic_importance_pattern_boost: float = Field(
        1.3,
        ge=1.0,
        le=10.0,
        description="Multiplier for facts that belong to an active meta-observation; name ours.",
    )
    dynamic_importance_min: float = Field(
        0.05,
        ge=0.0,
        le=100.0,
        description="Lower clamp of dynamic importance; name ours.",
    )
    dynamic_importance_max: float = Field(
        3.0,
        ge=0.0,
        le=100.0,
        description="Upper clamp of dynamic importance; name ours.",
    )

    # ---- Clustering ------------------------------------------------------------------------
    cluster_max_age_days: int = Field(
        90,
        ge=1,
        le=_MAX_DAYS,
        description="Maximum age of facts included in clustering.",
    )
    cluster_min_facts: int = Field(2, ge=1, le=10_000, description="Minimum facts per cluster.")
    community_similarity_threshold: Ratio = Field(
        0.75,
        description="Cosine similarity above which clusters are grouped into a community.",
    )
    community_min_clusters: int = Field(2, ge=1, le=10_000, description="Minimum clusters to form a community.")

    # ---- Consolidation ---------------------------------------------------------------------
    consolidation_min_events: int = Field(
        3,
        ge=0,
        le=100_000,
        description="Minimum events before consolidation runs.",
    )
    consolidation_lookback_days: int = Field(
        7,
        ge=1,
        le=_MAX_DAYS,
        description="How far back consolidation looks for patterns.",
    )

    # ---- Sleep-Time Compute ----------------------------------------------------------------
    importance_recency_halflife_days: int = Field(
        30,
        ge=1,
        le=_MAX_DAYS,
        description="Half-life of the recency signal in entity importance scoring.",
    )
    summary_refresh_interval_days: int = Field(
        7,
        ge=0,
        le=_MAX_DAYS,
        description="Entity summaries and profiles older than this are stale.",
    )
    entity_importance_weights: EntityImportanceWeights = Field(
        default_factory=_default_entity_importance_weights,
        description="Weights of the entity importance signals; absent keys weigh 0; name ours.",
    )
    summary_refresh_max_entities: int = Field(
        10,
        ge=1,
        le=10_000,
        description="Entity summaries refreshed per run, highest importance first; name ours.",
    )
    profile_consolidation_max_entities: int = Field(
        20,
        ge=1,
        le=10_000,
        description="Entity profiles rebuilt per run, densest entities first; name ours.",
    )
    profile_consolidation_max_facts: int = Field(
        50,
        ge=1,
        le=10_000,
        description="Active facts read per entity to rebuild its profile; name ours.",
    )
    profile_consolidation_timeout_sec: float = Field(
        15.0,
        gt=0.0,
        le=_MAX_LLM_TIMEOUT_SEC,
        description="LLM timeout per entity when rebuilding a profile; name ours.",
    )
    entity_community_min_edge_strength: Ratio = Field(
        0.3,
        description="Edges at least this strong join entities into a community (union-find); name ours.",
    )
    entity_community_min_size: int = Field(
        2,
        ge=2,
        le=10_000,
        description="Connected components with fewer members are not communities; name ours.",
    )

    # ---- Memify ----------------------------------------------------------------------------
    vitality_stale_threshold: Ratio = Field(0.2, description="Facts with vitality below this are stale.")
    memify_merge_similarity_threshold: Ratio = Field(
        0.90,
        description="Similarity above which procedural memories are merged.",
    )
    vitality_weights: VitalityWeights = Field(
        default_factory=_default_vitality_weights,
        description="Weights of the vitality components; absent keys weigh 0; name ours.",
    )
    vitality_recency_halflife_days: int = Field(
        30,
        ge=1,
        le=_MAX_DAYS,
        description="Half-life of the vitality recency decay since last_retrieved_at; name ours.",
    )
    vitality_reinforcement_cap: int = Field(
        5,
        ge=1,
        le=1000,
        description="Reinforcement count beyond which vitality gains nothing more; name ours.",
    )
    vitality_correction_penalty: Ratio = Field(
        0.8,
        description="Vitality is multiplied by this once per user correction; name ours.",
    )

    # ---- Procedural Memory -----------------------------------------------------------------
    directive_max_tokens: int = Field(300, ge=1, le=32_000, description="Maximum tokens of procedural directives.")
    directive_cache_ttl_minutes: int = Field(
        30,
        ge=0,
        le=7 * 24 * 60,
        description="TTL of the directive cache; 0 disables caching.",
    )
    contradiction_similarity_threshold: Ratio = Field(
        0.80,
        description="Similarity above which a new directive is checked for contradiction by the LLM.",
    )

    # ---- Locale ----------------------------------------------------------------------------
    timezone: str = Field(
        "UTC",
        description="IANA zone for relative dates ('yesterday'); stored timestamps are always UTC.",
    )

    # ---- Open Catalog (deployer extensions) ------------------------------------------------
    extra_attribute_keys: frozenset[NonEmptyKey] = Field(
        default_factory=frozenset,
        description="Additional attribute keys accepted during extraction.",
    )
    attribute_aliases: Mapping[NonEmptyKey, NonEmptyKey] = Field(
        default_factory=_empty_aliases,
        description="Aliases for attribute keys, e.g. {'hometown': 'city'}.",
    )
    extra_namespaces: frozenset[NonEmptyKey] = Field(
        default_factory=frozenset,
        description="Additional entity namespaces beyond the built-in types.",
    )
    extra_self_references: frozenset[NonEmptyKey] = Field(
        default_factory=frozenset,
        description="Additional words that resolve to the speaker, e.g. {'yo'}.",
    )
    extra_relationship_hints: frozenset[NonEmptyKey] = Field(
        default_factory=frozenset,
        description="Additional relationship hint words for entity resolution.",
    )

    # ---- Limits ----------------------------------------------------------------------------
    max_facts_per_event: int = Field(
        100,
        ge=1,
        le=10_000,
        description="Safety limit of facts extracted from one message.",
    )
    embedding_dimensions: int = Field(
        1536,
        ge=1,
        le=16_000,
        description="Embedding vector dimensions; must match the embedding provider.",
    )
    pending_operation_ttl_minutes: int = Field(
        5,
        ge=1,
        le=24 * 60,
        description="Lifetime of a pending destructive operation awaiting confirmation; name ours.",
    )

    # ---- Cross-field checks ----------------------------------------------------------------
    # Each check sits on the later of its two fields so the earlier one is in info.data; when the
    # earlier one failed its own validation it is absent and the pair check is skipped.

    @field_validator("input_long_min_chars")
    @classmethod
    def _long_after_short(cls, value: int, info: ValidationInfo) -> int:
        short = info.data.get("input_short_max_chars")
        if short is not None and value < short:
            raise ValueError(f"input_long_min_chars ({value}) must be >= input_short_max_chars ({short})")
        return value

    @field_validator("fuzzy_lower_threshold")
    @classmethod
    def _lower_below_fuzzy(cls, value: float, info: ValidationInfo) -> float:
        upper = info.data.get("fuzzy_threshold")
        if upper is not None and value > upper:
            raise ValueError(f"fuzzy_lower_threshold ({value}) must be <= fuzzy_threshold ({upper})")
        return value

    @field_validator("relationship_max_strength")
    @classmethod
    def _strength_cap_above_initial(cls, value: float, info: ValidationInfo) -> float:
        initial = info.data.get("relationship_initial_strength")
        if initial is not None and value < initial:
            raise ValueError(
                f"relationship_max_strength ({value}) must be >= relationship_initial_strength ({initial})"
            )
        return value

    @field_validator("warm_tier_ratio")
    @classmethod
    def _tiers_fit_budget(cls, value: float, info: ValidationInfo) -> float:
        hot = info.data.get("hot_tier_ratio")
        if hot is not None and hot + value > 1.0 + _SUM_EPSILON:
            raise ValueError(f"hot_tier_ratio + warm_tier_ratio must be <= 1 (got {hot} + {value})")
        return value

    @field_validator("dynamic_importance_max")
    @classmethod
    def _importance_clamp_ordered(cls, value: float, info: ValidationInfo) -> float:
        low = info.data.get("dynamic_importance_min")
        if low is not None and value < low:
            raise ValueError(f"dynamic_importance_max ({value}) must be >= dynamic_importance_min ({low})")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        _load_zone(value)
        return value

    # ---- Serialisation and helpers ---------------------------------------------------------

    @field_serializer(
        "extra_attribute_keys",
        "extra_namespaces",
        "extra_self_references",
        "extra_relationship_hints",
        when_used="json",
    )
    def _sorted_set(self, value: frozenset[str]) -> list[str]:
        # Sorted so config_effective is byte-for-byte stable across processes (set order is not).
        return sorted(value)

    @property
    def cold_tier_ratio(self) -> float:
        """Budget share left for the cold tier: ``1 - hot_tier_ratio - warm_tier_ratio`` (0.20 by default)."""
        return max(0.0, 1.0 - self.hot_tier_ratio - self.warm_tier_ratio)

    @property
    def tz(self) -> tzinfo:
        """The :attr:`timezone` as a tzinfo, for resolving relative dates."""
        return _load_zone(self.timezone)

    def effective(self) -> dict[str, Any]:
        """Every value in JSON-friendly form (sets as sorted lists): the API's ``config_effective``."""
        return self.model_dump(mode="json")


class OverrideProblem(NamedTuple):
    """One rejected override: the top-level key, the path inside it, and what is wrong."""

    field: str
    path: str
    message: str


class ConfigOverrideError(AranduError, ValueError):
    """A per-request config override has a wrong type or an out-of-bounds value.

    A ``ValueError`` as the seeds specify for override type mismatches, and an
    :class:`~memory_core.errors.AranduError` because every error of the service is one.
    ``field`` is the first bad key (in the caller's order), ``message`` lists every problem,
    ``problems`` keeps them apart for callers that map them to response fields.
    """

    def __init__(self, problems: list[OverrideProblem]) -> None:
        if not problems:
            raise ValueError("ConfigOverrideError needs at least one problem")
        self.problems: tuple[OverrideProblem, ...] = tuple(problems)
        self.field: str = problems[0].field
        self.message: str = "; ".join(f"config_overrides.{p.path}: {p.message}" for p in problems)
        super().__init__(self.message)

    @property
    def fields(self) -> tuple[str, ...]:
        """Every distinct bad key, in the caller's order."""
        return tuple(dict.fromkeys(problem.field for problem in self.problems))


@dataclass(frozen=True, slots=True)
class ConfigResolution:
    """The config a request runs with, and warnings about overrides that were ignored."""

    config: MemoryConfig
    warnings: list[str]


# Cross-field checks report on the later field; attribute them to whichever of the pair the
# caller actually sent, so ``ConfigOverrideError.field`` always names one of the caller's keys.
PAIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "input_long_min_chars": ("input_short_max_chars", "input_long_min_chars"),
    "fuzzy_lower_threshold": ("fuzzy_threshold", "fuzzy_lower_threshold"),
    "relationship_max_strength": ("relationship_initial_strength", "relationship_max_strength"),
    "warm_tier_ratio": ("hot_tier_ratio", "warm_tier_ratio"),
    "dynamic_importance_max": ("dynamic_importance_min", "dynamic_importance_max"),
}


def _to_json_value(value: Any) -> Any:
    """Turn sets and tuples into lists so overrides built in Python survive ``json.dumps``."""
    if isinstance(value, set | frozenset | tuple | list):
        return [_to_json_value(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _to_json_value(item) for key, item in value.items()}
    return value


def unknown_field_hint(key: object) -> str:
    """`` (did you mean 'x'?)`` for the closest MemoryConfig field to ``key``, or an empty string."""
    if isinstance(key, str):
        close = difflib.get_close_matches(key, MemoryConfig.model_fields, n=1)
        if close:
            return f" (did you mean {close[0]!r}?)"
    return ""


def _unknown_key_warning(key: object) -> str:
    return f"unknown config override {key!r} ignored{unknown_field_hint(key)}"


def _problem_from_error(error: Mapping[str, Any], sent: Mapping[str, int]) -> OverrideProblem:
    loc = tuple(error["loc"])
    top = str(loc[0]) if loc else "config"
    field = top
    if top not in sent:
        related = [name for name in PAIRED_FIELDS.get(top, ()) if name in sent]
        if related:
            field = min(related, key=sent.__getitem__)
    # "[key]" marks an error in a mapping key rather than its value; the message already says so.
    path = ".".join(str(part) for part in loc if part != "[key]") if field == top else field
    message = str(error["msg"]).removeprefix("Value error, ")
    return OverrideProblem(field=field, path=path or field, message=message)


def apply_overrides(base: MemoryConfig, overrides: Mapping[str, Any] | None) -> ConfigResolution:
    """Return the config for one request: ``base`` with ``overrides`` applied.

    - Only the keys given change; everything else is inherited from ``base``, which is never
      modified (a new config is built).
    - Unknown keys are ignored with a warning naming the key (and the closest known key).
    - Values are checked strictly, as JSON input: ``"5"`` or ``true`` for an int field, ``1.0``
      for an int field, or ``1`` for a bool field are errors; an int for a float field and a
      list for a set field are fine. Bounds and cross-field rules apply as on construction.
    - Mapping fields (``score_weights``, ``confidence_level_map``, ``attribute_aliases``...)
      are **replaced as a whole**, not merged: ``{"score_weights": {"semantic": 0.6}}`` means
      semantic 0.6 and every other weight 0. Send the complete mapping to change one entry.
    - Every bad key is reported in one :class:`ConfigOverrideError` (``field`` = the first bad
      key in the caller's order, ``message`` = all problems).
    """
    if not overrides:
        return ConfigResolution(config=base, warnings=[])

    warnings: list[str] = []
    problems: list[OverrideProblem] = []
    accepted: dict[str, Any] = {}
    order: dict[str, int] = {}
    for position, (key, value) in enumerate(overrides.items()):
        if not isinstance(key, str) or key not in MemoryConfig.model_fields:
            warnings.append(_unknown_key_warning(key))
            continue
        order[key] = position
        candidate = _to_json_value(value)
        try:
            json.dumps(candidate)
        except (TypeError, ValueError):
            problems.append(OverrideProblem(key, key, f"Input should be a JSON value, not {type(value).__name__}"))
            continue
        accepted[key] = candidate

    merged = base.model_dump(mode="json")
    merged.update(accepted)
    config: MemoryConfig | None = None
    try:
        # Through JSON on purpose: strict JSON validation is exactly the type policy callers of
        # the HTTP API get, so in-process and HTTP overrides behave the same.
        config = MemoryConfig.model_validate_json(json.dumps(merged), strict=True)
    except ValidationError as error:
        problems.extend(_problem_from_error(item, order) for item in error.errors(include_url=False))

    if problems:
        problems.sort(key=lambda problem: order.get(problem.field, len(order)))
        raise ConfigOverrideError(problems)
    assert config is not None  # validation either returned a config or added problems
    return ConfigResolution(config=config, warnings=warnings)


__all__ = [
    "PAIRED_FIELDS",
    "ConfigOverrideError",
    "ConfigResolution",
    "MemoryConfig",
    "OverrideProblem",
    "apply_overrides",
    "unknown_field_hint",
]

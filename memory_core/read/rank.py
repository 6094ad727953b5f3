"""Merge and rank: pure functions over candidates (seeds R6, R8, R13), tested without a database.

Formulas (seeds/000 and seeds/003 "Merge & Rank", seeds/004 "compute_pattern_signal",
"compute_dynamic_importance", "effective_confidence"):

* ``recency = 0.5 ** (age_days / recency_half_life_days)`` (exponential, half-life 14 d). Age is
  measured from the fact's ``valid_from`` (when it was said: the event's ``occurred_at``) rather
  than the seeds' ``created_at``, because this service imports history: a message from 2019
  imported today must not look fresh.
* ``effective_confidence = max(0.10, confidence x 0.95 ** weeks)`` since the fact was stored
  (``created_at``) or last confirmed, never above the stored confidence. Shown in ``scores``, not
  in the formula; ``min_confidence`` filters on it (R6: the signals' SQL,
  memory_core.read.signals.DECAYED_CONFIDENCE_SQL, and :func:`rank_candidates` for what a
  signal could not check). Measured from when this memory learnt the fact rather than when it
  was said: imported history is as trustworthy on import day as a fresh message.
* ``formula = w_sem x relevance + w_rec x recency + w_imp x importance + pattern`` (capped at 1).
  With only the semantic signal, ``relevance`` is the cosine similarity and this is exactly the
  seeds' ``0.70 semantic + 0.20 recency + 0.10 importance``. The keyword and graph signals are not
  in ``score_weights`` but must "complement" the semantic one and "affect the final score"
  (seeds): they join it as a probabilistic OR, ``relevance = 1 - (1 - s)(1 - 0.5 k)(1 - 0.6 g)``,
  so agreeing signals reinforce each other and none can push relevance past 1. A fact said in
  a message that relevant conversations scored also gets that message's relevance ``m`` as a
  fourth term, ``(1 - 0.85 m)`` (:mod:`memory_core.read.message_signal`).
* ``importance`` is the fact's own importance (from its importance category) averaged with its
  entity's ``importance_score`` once the entity importance job has scored it (seeds B6: "the
  importance score is used as a signal in retrieval scoring"): of two equally relevant facts,
  the one about the entity central to this memory ranks first. Unscored entities leave the
  fact's importance as it is.
* ``pattern`` (R8): up to +0.10 for facts reinforced by repetition (NOOP decisions) or confirmed
  recently: ``0.10 x max(reinforcement part, confirmation part)``.
* graph score (R5): ``edge_strength x recency_factor x edge_recency_factor x query_bonus x
  hop_decay``, capped at 1. The two recency factors here are softened to ``[0.5, 1]`` (a
  multiplicative factor that goes to 0 would erase every old relationship).
* reranker blend (R9) lives in :mod:`memory_core.read.rerank`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from memory_core.config import MemoryConfig

__all__ = [
    "GRAPH_BLEND",
    "KEYWORD_BLEND",
    "MESSAGE_BLEND",
    "Candidate",
    "RankedFact",
    "candidate_importance",
    "compute_dynamic_importance",
    "compute_pattern_signal",
    "effective_confidence",
    "formula_score",
    "graph_score",
    "merge_candidates",
    "rank_candidates",
    "recency_score",
    "relevance",
    "soft_recency",
]

# Weight of the keyword and graph signals inside ``relevance`` (ours; the seeds give none).
KEYWORD_BLEND = 0.5
GRAPH_BLEND = 0.6
# Weight of the message signal: how relevant the message a fact was said in is to the query
# (memory_core.read.conversations scores the agent's latest messages; ours).
MESSAGE_BLEND = 0.85

# Pattern signal: reinforcement saturates at this many confirmations; a confirmation's effect
# halves every PATTERN_CONFIRMATION_HALF_LIFE_DAYS (ours).
PATTERN_REINFORCEMENT_SATURATION = 10
PATTERN_CONFIRMATION_HALF_LIFE_DAYS = 7.0

# Dynamic importance coefficients (ours; the seeds name the components only).
DYNAMIC_RETRIEVAL_WEIGHT = 0.2
DYNAMIC_RECENCY_WEIGHT = 0.3

# Share of the entity's importance_score in a fact's importance signal, when the entity is scored (ours).
ENTITY_IMPORTANCE_SHARE = 0.5

# Aggregation matches ("my friends" -> person:%) count as half a keyword match.
AGGREGATION_KEYWORD_SCORE = 0.5

_SECONDS_PER_DAY = 86_400.0


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def age_days(moment: datetime | None, now: datetime) -> float:
    """Days from ``moment`` to ``now``; 0 for the future or an unknown moment."""
    if moment is None:
        return 0.0
    return max(0.0, (_aware(now) - _aware(moment)).total_seconds() / _SECONDS_PER_DAY)


def recency_score(moment: datetime | None, now: datetime, half_life_days: float) -> float:
    """Exponential decay: 1.0 now, 0.5 after one half-life, 0.25 after two."""
    if moment is None:
        return 0.0
    return float(0.5 ** (age_days(moment, now) / max(half_life_days, 1e-9)))


def soft_recency(moment: datetime | None, now: datetime, half_life_days: float) -> float:
    """A recency factor in ``[0.5, 1]`` for multiplicative formulas: ``0.5 + 0.5 x recency``."""
    if moment is None:
        return 1.0
    return 0.5 + 0.5 * recency_score(moment, now, half_life_days)


def effective_confidence(
    base_confidence: float,
    created_at: datetime,
    now: datetime | None = None,
    *,
    decay_per_week: float = 0.95,
    floor: float = 0.10,
) -> float:
    """``base x 0.95 ** weeks``, floored at 0.10 (never raised above ``base`` by the floor)."""
    current = now or datetime.now(UTC)
    weeks = age_days(created_at, current) / 7.0
    decayed = float(base_confidence * decay_per_week**weeks)
    return max(min(base_confidence, floor), decayed)


def compute_pattern_signal(
    reinforcement_count: int,
    last_confirmed_at: datetime | None,
    now: datetime,
    *,
    max_boost: float = 0.10,
) -> float:
    """Additive boost in ``[0, max_boost]`` for facts confirmed often or recently."""
    reinforced = 0.0
    if reinforcement_count > 0:
        reinforced = min(1.0, math.log1p(reinforcement_count) / math.log1p(PATTERN_REINFORCEMENT_SATURATION))
    confirmed = 0.0
    if last_confirmed_at is not None:
        confirmed = recency_score(last_confirmed_at, now, PATTERN_CONFIRMATION_HALF_LIFE_DAYS)
    return max_boost * max(reinforced, confirmed)


def compute_dynamic_importance(  # noqa: PLR0917 - the seeds' documented positional signature
    base_importance: float,
    times_retrieved: int,
    last_retrieved_at: datetime | None,
    user_correction_count: int,
    is_in_active_pattern: bool,
    now: datetime | None = None,
    *,
    recency_half_life_days: float = 7.0,
    correction_penalty: float = 0.8,
    pattern_boost: float = 1.3,
    minimum: float = 0.05,
    maximum: float = 3.0,
) -> float:
    """Memory strength of a fact (seeds R13): base x (1 + retrieval + recency of use) x 0.8^corrections x 1.3.

    ``retrieval = 0.2 x ln(1 + times_retrieved)`` saturates gradually; ``recency of use`` is
    ``0.3 x 0.5 ** (days since last retrieval / 7)``; the result is clamped to ``[0.05, 3.0]``.
    """
    current = now or datetime.now(UTC)
    retrieval = DYNAMIC_RETRIEVAL_WEIGHT * math.log1p(max(0, times_retrieved))
    recent_use = 0.0
    if last_retrieved_at is not None:
        recent_use = DYNAMIC_RECENCY_WEIGHT * recency_score(last_retrieved_at, current, recency_half_life_days)
    value = base_importance * (1.0 + retrieval + recent_use)
    value *= correction_penalty ** max(0, user_correction_count)
    if is_in_active_pattern:
        value *= pattern_boost
    return min(maximum, max(minimum, value))


def graph_score(
    *,
    depth: int,
    edge_strength: float,
    fact_time: datetime | None,
    edge_time: datetime | None,
    mentioned_in_query: bool,
    now: datetime,
    config: MemoryConfig,
) -> float:
    """Graph signal of a fact reached at ``depth`` hops from a query entity (seeds R5), in ``[0, 1]``.

    Facts of the query entities themselves and of their direct neighbours get the full score
    (hop decay 1.0); each hop beyond multiplies it by ``graph_hop_decay`` (0.5 at hop 2).
    """
    hop_decay = config.graph_hop_decay ** max(0, depth - 1)
    bonus = config.graph_query_bonus if mentioned_in_query else 1.0
    half_life = float(config.recency_half_life_days)
    value = (
        edge_strength
        * soft_recency(fact_time, now, half_life)
        * (soft_recency(edge_time, now, half_life) if depth > 0 else 1.0)
        * bonus
        * hop_decay
    )
    return min(1.0, max(0.0, value))


def relevance(semantic: float, keyword: float, graph: float, message: float = 0.0) -> float:
    """Probabilistic OR of the retrieval signals (semantic at full weight, the others at their blend)."""
    s = min(1.0, max(0.0, semantic))
    k = min(1.0, max(0.0, keyword)) * KEYWORD_BLEND
    g = min(1.0, max(0.0, graph)) * GRAPH_BLEND
    m = min(1.0, max(0.0, message)) * MESSAGE_BLEND
    return 1.0 - (1.0 - s) * (1.0 - k) * (1.0 - g) * (1.0 - m)


def formula_score(
    *,
    semantic: float,
    keyword: float,
    graph: float,
    recency: float,
    importance: float,
    pattern: float,
    config: MemoryConfig,
    message: float = 0.0,
) -> float:
    """The pre-reranker score: weighted sum of relevance, recency and importance, plus the pattern boost."""
    weights = config.score_weights
    weighted = (
        weights["semantic"] * relevance(semantic, keyword, graph, message)
        + weights["recency"] * recency
        + weights["importance"] * min(1.0, max(0.0, importance))
    )
    return min(1.0, max(0.0, weighted + pattern))


@dataclass(slots=True)
class Candidate:
    """A fact some signal found, with everything ranking needs (no database handle)."""

    fact_id: str
    entity_key: str
    fact_text: str
    valid_from: datetime
    entity_name: str | None = None
    attribute_key: str | None = None
    speaker: str | None = None
    confidence: float = 0.8
    importance: float = 0.5
    valid_to: datetime | None = None
    reinforcement_count: int = 0
    last_confirmed_at: datetime | None = None
    # The entity's importance_score from the importance job; None until it has run.
    entity_importance: float | None = None
    cluster_id: str | None = None
    source_event_id: str | None = None
    message_id: str | None = None
    semantic: float = 0.0
    keyword: float = 0.0
    graph: float = 0.0
    # Relevance of the message the fact was said in, when relevant conversations scored it.
    message: float = 0.0
    # When its confidence started decaying: stored (created_at) or last confirmed, the later;
    # None = from valid_from or the last confirmation (candidates built without the column).
    confidence_since: datetime | None = None
    sources: set[str] = field(default_factory=set)

    def absorb(self, other: Candidate) -> None:
        """Keep the best value of every signal when two signals found the same fact."""
        self.semantic = max(self.semantic, other.semantic)
        self.keyword = max(self.keyword, other.keyword)
        self.graph = max(self.graph, other.graph)
        self.message = max(self.message, other.message)
        self.sources |= other.sources


def merge_candidates(*groups: Iterable[Candidate]) -> dict[str, Candidate]:
    """Deduplicate by fact id, keeping the strongest value of each signal (first occurrence's row)."""
    merged: dict[str, Candidate] = {}
    for group in groups:
        for candidate in group:
            existing = merged.get(candidate.fact_id)
            if existing is None:
                merged[candidate.fact_id] = candidate
            else:
                existing.absorb(candidate)
    return merged


@dataclass(slots=True)
class RankedFact:
    """A candidate with its score breakdown; ``score`` is the final score (formula until reranked).

    ``scores["formula"]`` is rounded to 6 decimals (it orders the facts); the other values of the
    breakdown are not (the answer rounds them).
    """

    candidate: Candidate
    scores: dict[str, float]
    score: float
    # -(the candidate's valid_from as a POSIX timestamp): the tie-break of the ranking order,
    # computed once (the order is sorted several times per retrieve); None until first needed.
    newest_first: float | None = None

    @property
    def formula(self) -> float:
        """The pre-reranker score."""
        return self.scores["formula"]


def candidate_importance(candidate: Candidate) -> float:
    """The importance signal: the fact's importance, averaged with its entity's score when it has one."""
    own = min(1.0, max(0.0, candidate.importance))
    if candidate.entity_importance is None:
        return own
    entity = min(1.0, max(0.0, candidate.entity_importance))
    return (1.0 - ENTITY_IMPORTANCE_SHARE) * own + ENTITY_IMPORTANCE_SHARE * entity


def score_candidate(candidate: Candidate, config: MemoryConfig, now: datetime) -> RankedFact:
    """Every signal of ``candidate`` and its formula score."""
    return _Scorer(config, now).score(candidate)


_PATTERN_SATURATION_LOG = math.log1p(PATTERN_REINFORCEMENT_SATURATION)


class _Scorer:
    """:func:`score_candidate` for many candidates: the config's values and ``now`` are read once.

    The same arithmetic as :func:`recency_score`, :func:`effective_confidence`,
    :func:`compute_pattern_signal`, :func:`candidate_importance` and :func:`formula_score`, in
    the same order (so the same floating-point results), written out in one function: called
    for each of a retrieve's one to three hundred candidates, the helpers' calls were a third of
    the API's CPU for ranking.
    """

    __slots__ = ("decay_per_week", "floor", "half_life", "max_boost", "now", "w_importance", "w_recency", "w_semantic")

    def __init__(self, config: MemoryConfig, now: datetime) -> None:
        self.now = _aware(now)
        self.half_life = max(float(config.recency_half_life_days), 1e-9)
        self.decay_per_week = config.confidence_decay_per_week
        self.floor = config.confidence_floor
        self.max_boost = config.pattern_signal_max_boost
        weights = config.score_weights
        self.w_semantic = weights["semantic"]
        self.w_recency = weights["recency"]
        self.w_importance = weights["importance"]

    def _age_days(self, moment: datetime) -> float:
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        age = (self.now - moment).total_seconds() / _SECONDS_PER_DAY
        return age if age > 0.0 else 0.0

    def score(self, candidate: Candidate) -> RankedFact:
        """The candidate's signals and formula score (:func:`score_candidate`)."""
        age = self._age_days(candidate.valid_from)
        recency = float(0.5 ** (age / self.half_life))
        confirmed_at = candidate.last_confirmed_at
        confirmed_age = self._age_days(confirmed_at) if confirmed_at is not None else 0.0
        # Confidence decays from when the fact was stored or last confirmed (the later one).
        since = candidate.confidence_since
        if since is not None:
            since_age = self._age_days(since)
        else:
            since_age = confirmed_age if confirmed_at is not None and confirmed_age < age else age
        base_confidence = candidate.confidence
        decayed = float(base_confidence * self.decay_per_week ** (since_age / 7.0))
        low = base_confidence if base_confidence < self.floor else self.floor
        confidence = decayed if decayed > low else low
        reinforced = 0.0
        if candidate.reinforcement_count > 0:
            share = math.log1p(candidate.reinforcement_count) / _PATTERN_SATURATION_LOG
            reinforced = share if share < 1.0 else 1.0
        confirmed = 0.0
        if confirmed_at is not None:
            confirmed = float(0.5 ** (confirmed_age / PATTERN_CONFIRMATION_HALF_LIFE_DAYS))
        pattern = self.max_boost * (confirmed if confirmed > reinforced else reinforced)
        importance = _unit(candidate.importance)
        if candidate.entity_importance is not None:
            importance = (1.0 - ENTITY_IMPORTANCE_SHARE) * importance + ENTITY_IMPORTANCE_SHARE * _unit(
                candidate.entity_importance
            )
        semantic = candidate.semantic
        keyword = candidate.keyword
        graph = candidate.graph
        related = 1.0 - (1.0 - _unit(semantic)) * (1.0 - _unit(keyword) * KEYWORD_BLEND) * (
            1.0 - _unit(graph) * GRAPH_BLEND
        )
        message = candidate.message
        if message > 0.0:
            related = 1.0 - (1.0 - related) * (1.0 - _unit(message) * MESSAGE_BLEND)
        weighted = self.w_semantic * related + self.w_recency * recency + self.w_importance * _unit(importance)
        formula = round(_unit(weighted + pattern), 6)
        # Only the formula is rounded here (it orders the facts); the answer rounds the breakdown
        # of the few facts it returns (pipeline._scored) rather than every candidate's seven values.
        scores = {
            "semantic": semantic if semantic > 0.0 else 0.0,
            "keyword": keyword,
            "graph": graph,
            "message": message,
            "recency": recency,
            "importance": importance,
            "confidence": confidence,
            "pattern": pattern,
            "formula": formula,
        }
        return RankedFact(candidate=candidate, scores=scores, score=formula)


def _unit(value: float) -> float:
    """``min(1.0, max(0.0, value))``."""
    if value > 0.0:
        return value if value < 1.0 else 1.0
    return 0.0


def rank_candidates(candidates: Iterable[Candidate], config: MemoryConfig, now: datetime) -> list[RankedFact]:
    """Score every candidate and sort best first (ties: newer, then fact id, so the order is stable).

    Candidates whose decayed confidence is below ``min_confidence`` are dropped (R6): the facts a
    signal read through entity links were filtered on their stored confidence only.
    """
    score = _Scorer(config, now).score
    floor = config.min_confidence
    ranked = [fact for fact in map(score, candidates) if fact.scores["confidence"] >= floor]
    ranked.sort(key=_order_key)
    return ranked


def _order_key(fact: RankedFact) -> tuple[float, float, str]:
    newest_first = fact.newest_first
    if newest_first is None:
        newest_first = fact.newest_first = -_aware(fact.candidate.valid_from).timestamp()
    return (-fact.score, newest_first, fact.candidate.fact_id)


def sort_ranked(facts: list[RankedFact]) -> list[RankedFact]:
    """Best final score first, with the same stable tie-breaks as :func:`rank_candidates`."""
    return sorted(facts, key=_order_key)


def select_final(facts: list[RankedFact], config: MemoryConfig) -> list[RankedFact]:
    """Facts at or above ``min_score``, best first, at most ``topk_facts``."""
    kept = [fact for fact in sort_ranked(facts) if fact.score >= config.min_score and fact.score > 0.0]
    return kept[: config.topk_facts]

"""Stage 3 of retrieval: spreading activation from the best facts (seeds R7), plus clusters and patterns.

Hops are counted from fact to fact, as in the seeds' example (seed "Marcos lives in Porto Alegre"
-> "Marcos is married to Carolina" via the entity, -> "Carolina is an architect" via 2 hops):

* hop 1 (activation = seed score x ``spreading_decay_factor``, 0.50): other facts of the seed
  facts' entities (primary and linked) and of their clusters;
* hop 2 (x decay², 0.25): facts of the entities the knowledge graph relates to those entities,
  at most ``spreading_max_related_entities`` (5) per entity, strongest active edges first;
* hop n > 2: one more relationship step each (edges of at least ``graph_min_edge_strength``).

Each entity (or cluster) contributes at most ``spreading_facts_per_entity`` (3) facts per hop,
the strongest by dynamic importance (seeds R13), scaled by the entity's specificity when
``entity_specificity`` is on (:mod:`memory_core.read.focus`); an entity so broad that its share
falls under :data:`~memory_core.read.focus.MIN_SPECIFICITY` (with 3 facts taken, more than
60 facts) is not read at all: its facts would add nothing to the ranking.
``spreading_activation_hops = 0`` disables it.
A spread fact enters ranking with its activation as its graph signal; facts already found by the
signals keep their own entry (the seeds dedupe spreading against the existing results).

:func:`context_extras` fetches what the context shows besides facts: the clusters of the
candidates (cluster-first layout of broad queries) and active meta-observations that support
them, resemble the query, or are a recent emotional trend ("Observed patterns").
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from memory_core.config import MemoryConfig
from memory_core.db.driver_reads import fetch_all
from memory_core.db.vectors import vector_param
from memory_core.read.compress import ClusterInfo, ContextPattern
from memory_core.read.entities import TimeWindow, fact_validity_sql, window_params
from memory_core.read.focus import MIN_SPECIFICITY, specificity
from memory_core.read.rank import DYNAMIC_RECENCY_WEIGHT, DYNAMIC_RETRIEVAL_WEIGHT, Candidate
from memory_core.read.signals import (
    ELIGIBLE_CTE,
    FACT_COLUMNS,
    base_candidate,
    confidence_params,
    fact_filter_sql,
    link_filter_sql,
)

__all__ = [
    "SPREADING_SEED_FACTS",
    "ContextExtras",
    "SpreadingResult",
    "context_extras",
    "spread_activation",
]

# Spreading starts from this many of the best-ranked facts.
SPREADING_SEED_FACTS = 5
# Observed patterns shown at most.
MAX_PATTERNS = 5
# Clusters fetched at most (broad queries show the agent's most important ones).
MAX_CLUSTERS = 10
# Meta-observation types that describe emotional trends (the background job's "trend").
TREND_TYPES = ("trend", "emotional_trend")


@dataclass
class SpreadingResult:
    """Facts reached by spreading activation and what was explored."""

    candidates: list[Candidate] = field(default_factory=list)
    returned: int = 0
    hop_counts: dict[int, int] = field(default_factory=dict)
    entities_explored: list[str] = field(default_factory=list)
    clusters_explored: list[str] = field(default_factory=list)
    duration_ms: float = 0.0

    def summary(self, unique: int) -> dict[str, Any]:
        """JSON-friendly form for the trace; ``unique`` = candidates no other signal had found."""
        return {
            "spreading_candidates_returned": self.returned,
            "spreading_candidates_unique": unique,
            "hop_counts": {str(hop): count for hop, count in sorted(self.hop_counts.items())},
            "entities_explored": list(self.entities_explored),
            "clusters_explored": list(self.clusters_explored),
            "duration_ms": round(self.duration_ms, 2),
        }


_SEEDS_CTE = """
seeds AS (
    SELECT s.id, s.score, f.entity_key, f.cluster_id
    FROM unnest(CAST(:seed_ids AS uuid[]), CAST(:seed_scores AS float8[])) AS s(id, score)
    JOIN memory_facts f ON f.id = s.id AND f.agent_id = :agent
),
lvl1 AS (
    SELECT key, max(score) AS origin FROM (
        SELECT entity_key AS key, score FROM seeds
        UNION ALL
        SELECT l.entity_key, s.score FROM seeds s
        JOIN memory_fact_entity_links l ON l.fact_id = s.id AND l.agent_id = :agent
    ) x
    GROUP BY key
)"""

_LEVEL_CTE = """
lvl{level} AS (
    SELECT n.key, max(n.origin) AS origin FROM lvl{previous} e
    CROSS JOIN LATERAL (
        SELECT CASE WHEN r.source_entity_key = e.key THEN r.target_entity_key ELSE r.source_entity_key END AS key,
               e.origin
        FROM memory_entity_relationships r
        WHERE r.agent_id = :agent AND (r.source_entity_key = e.key OR r.target_entity_key = e.key)
          AND {edge_validity} {strength}
        ORDER BY r.strength DESC, r.id
        LIMIT :max_related
    ) n
    WHERE n.key NOT IN ({visited})
    GROUP BY n.key
)"""

_LEVEL_ROWS = "SELECT key, origin, {level} AS level FROM lvl{level}"
_LEVEL_KEYS = "SELECT key FROM lvl{level}"

# An entity's facts to spread to: its links (every fact is linked to its own subject) carry the
# fact's ranking columns, so its most important facts valid now are the first entries of
# ix_fact_entity_links_entity_ranked (migration 0011) and no fact is read to be thrown away.
_ENTITY_TOP_LINKS = """
        SELECT l.fact_id AS id FROM memory_fact_entity_links l
        WHERE l.agent_id = :agent AND l.entity_key = lv.key AND {link_filter}
          AND l.fact_id <> ALL(CAST(:seed_ids AS uuid[]))
        ORDER BY l.fact_importance DESC, l.fact_valid_from DESC, l.fact_id
        LIMIT :fetch"""

# Narrowed to a session, a fact's source event decides, so the facts themselves are read.
_ENTITY_TOP_FACTS = """
        SELECT f.id FROM memory_facts f
        WHERE f.id IN (
                SELECT l.fact_id FROM memory_fact_entity_links l WHERE l.agent_id = :agent AND l.entity_key = lv.key
                UNION
                SELECT f1.id FROM memory_facts f1 WHERE f1.agent_id = :agent AND f1.entity_key = lv.key
              )
          AND {fact_filter} AND f.id <> ALL(CAST(:seed_ids AS uuid[]))
        ORDER BY f.importance DESC, f.valid_from DESC, f.id
        LIMIT :fetch"""

# MATERIALIZED: each entity's fact count is looked up once. Inlined, the scalar subquery was
# copied into the size filter twice and into every hit row the lateral join made (1k agent:
# ~265 index probes for 44 entities and 177 hits; 0.1 ms of a 1.4 ms statement).
_HITS_SQL = """
levels AS ({levels}),
sized_levels AS MATERIALIZED (
    SELECT lv.level, lv.key, lv.origin,
           (SELECT me.fact_count FROM memory_entities me WHERE me.agent_id = :agent AND me.canonical_key = lv.key)
               AS via_facts
    FROM levels lv
),
entity_hits AS (
    SELECT lv.level, lv.key AS via, lv.origin, x.id, lv.via_facts
    FROM (
        SELECT * FROM sized_levels
        WHERE CAST(:max_via_facts AS int) IS NULL OR via_facts IS NULL OR via_facts <= :max_via_facts
    ) lv
    CROSS JOIN LATERAL ({entity_facts}) x
),
cluster_hits AS (
    SELECT 1 AS level, 'cluster:' || CAST(c.cluster_id AS text) AS via, c.origin, x.id,
           (SELECT mc.fact_count FROM memory_clusters mc WHERE mc.id = c.cluster_id) AS via_facts
    FROM (
        SELECT s.cluster_id, max(s.score) AS origin FROM seeds s WHERE s.cluster_id IS NOT NULL
        GROUP BY s.cluster_id
        HAVING CAST(:max_via_facts AS int) IS NULL
            OR COALESCE((SELECT mc.fact_count FROM memory_clusters mc WHERE mc.id = s.cluster_id), 0)
               <= :max_via_facts
    ) c
    CROSS JOIN LATERAL (
        SELECT f.id FROM memory_facts f
        WHERE f.cluster_id = c.cluster_id AND {fact_filter} AND f.id <> ALL(CAST(:seed_ids AS uuid[]))
        ORDER BY f.importance DESC, f.valid_from DESC, f.id
        LIMIT :fetch
    ) x
),
hits AS (SELECT * FROM entity_hits UNION ALL SELECT * FROM cluster_hits),
patterned_hits AS (
    SELECT h.*, EXISTS (
               SELECT 1 FROM memory_meta_observations m
               WHERE m.agent_id = :agent AND m.is_active AND jsonb_exists(m.supporting_fact_ids, CAST(h.id AS text))
           ) AS in_pattern
    FROM hits h
),
kept_hits AS (
    SELECT level, via, origin, via_facts, id, place FROM (
        SELECT h.*, row_number() OVER (
                   PARTITION BY h.level, h.via ORDER BY {dynamic_importance} DESC, f.valid_from DESC, f.id
               ) AS place
        FROM patterned_hits h
        JOIN memory_facts f ON f.id = h.id
        LEFT JOIN memory_fact_usage u ON u.fact_id = f.id
    ) ranked
    WHERE place <= :per_entity
)
SELECT {fact_columns}, h.level, h.via, h.origin, h.via_facts, {similarity} AS similarity, h.place
FROM kept_hits h
JOIN memory_facts f ON f.id = h.id
LEFT JOIN memory_events ev ON ev.id = f.source_event_id
"""

# A fact's dynamic importance (seeds R13), as rank.compute_dynamic_importance computes it, on
# ``f`` (memory_facts), ``u`` (its counters, memory_fact_usage; a fact never retrieved has no
# row: 0 and NULL) and ``h.in_pattern``: each entity's facts are ranked by it where they are
# read, so only the few kept per entity are fetched whole (with their vector distance and event)
# and built in Python. Computed in Python, twice as many rows came back
# (spreading_facts_per_entity x 2 per entity: 257 rows for 44 entities of a 100,000-fact agent)
# only to be thrown away.
_DYNAMIC_IMPORTANCE_SQL = """LEAST(CAST(:dyn_max AS float8), GREATEST(CAST(:dyn_min AS float8),
    f.importance
    * (CAST(1 AS float8)
       + CAST(:dyn_retrieval_weight AS float8) * ln(CAST(1 + GREATEST(0, COALESCE(u.times_retrieved, 0)) AS float8))
       + CASE WHEN u.last_retrieved_at IS NULL THEN CAST(0 AS float8)
              ELSE CAST(:dyn_recency_weight AS float8) * power(CAST(0.5 AS float8),
                  GREATEST(CAST(0 AS float8),
                           CAST(EXTRACT(EPOCH FROM CAST(:now AS timestamptz) - u.last_retrieved_at) AS float8))
                  / CAST(86400 AS float8) / CAST(:dyn_half_life_days AS float8))
         END)
    * power(CAST(:dyn_correction_penalty AS float8), CAST(GREATEST(0, f.user_correction_count) AS float8))
    * CASE WHEN h.in_pattern THEN CAST(:dyn_pattern_boost AS float8) ELSE CAST(1 AS float8) END))"""


def _dynamic_importance_params(config: MemoryConfig, now: datetime) -> dict[str, Any]:
    """The parameters of :data:`_DYNAMIC_IMPORTANCE_SQL` (rank.compute_dynamic_importance's arguments)."""
    return {
        "now": now,
        "dyn_retrieval_weight": DYNAMIC_RETRIEVAL_WEIGHT,
        "dyn_recency_weight": DYNAMIC_RECENCY_WEIGHT,
        "dyn_half_life_days": max(float(config.dynamic_importance_recency_halflife_days), 1e-9),
        "dyn_correction_penalty": float(config.dynamic_importance_correction_penalty),
        "dyn_pattern_boost": float(config.dynamic_importance_pattern_boost),
        "dyn_min": float(config.dynamic_importance_min),
        "dyn_max": float(config.dynamic_importance_max),
    }


def spread_activation(
    session: Session,
    agent_id: str,
    seeds: Sequence[tuple[str, float]],
    config: MemoryConfig,
    *,
    now: datetime,
    query_vector: Sequence[float] | None = None,
    window: TimeWindow | None = None,
    session_id: str | None = None,
    filter_keys: Sequence[str] | None = None,
) -> SpreadingResult:
    """Facts reached from ``seeds`` (fact id, score) by entity, cluster and relationship hops."""
    started = time.perf_counter()
    hops = config.spreading_activation_hops
    per_entity = config.spreading_facts_per_entity
    result = SpreadingResult()
    if hops <= 0 or per_entity <= 0 or not seeds:
        return result
    ctes: list[str] = []
    params: dict[str, Any] = {
        "agent": agent_id,
        "seed_ids": [fact_id for fact_id, _ in seeds],
        "seed_scores": [float(score) for _, score in seeds],
        **confidence_params(config, now),
        "max_related": config.spreading_max_related_entities,
        "min_edge_strength": config.graph_min_edge_strength,
        # Read from each entity's ranked links: twice what is kept, for the facts' dynamic
        # importance (their counters, corrections and patterns) to choose among.
        "fetch": per_entity * 2,
        "per_entity": per_entity,
        **_dynamic_importance_params(config, now),
        # Entities (and clusters) too broad for their facts to carry activation are not read.
        "max_via_facts": (math.floor(per_entity / MIN_SPECIFICITY) if config.entity_specificity else None),
        **window_params(window),
    }
    if filter_keys is not None:
        ctes.append(ELIGIBLE_CTE)
        params["filter_keys"] = list(filter_keys)
    if session_id is not None:
        params["session_id"] = session_id
    ctes.append(_SEEDS_CTE)
    levels = [_LEVEL_ROWS.format(level=1)]
    visited = [_LEVEL_KEYS.format(level=1)]
    edge_validity = fact_validity_sql("r", window)
    for level in range(2, hops + 1):
        if config.spreading_max_related_entities <= 0:
            break
        ctes.append(
            _LEVEL_CTE.format(
                level=level,
                previous=level - 1,
                edge_validity=edge_validity,
                strength="" if level == 2 else "AND r.strength >= :min_edge_strength",
                visited=" UNION ALL ".join(visited),
            )
        )
        levels.append(_LEVEL_ROWS.format(level=level))
        visited.append(_LEVEL_KEYS.format(level=level))
    fact_filter = fact_filter_sql(window, session_filter=session_id is not None, entity_filter=filter_keys is not None)
    if session_id is None:
        link_filter = link_filter_sql(window, entity_filter=filter_keys is not None)
        entity_facts = _ENTITY_TOP_LINKS.format(link_filter=link_filter)
    else:
        entity_facts = _ENTITY_TOP_FACTS.format(fact_filter=fact_filter)
    similarity = "NULL::float8"
    if query_vector is not None:
        params["vec"] = vector_param(query_vector)
        similarity = "1 - (f.embedding_vec <=> CAST(:vec AS vector))"
    sql = (
        "WITH "
        + ",\n".join(cte.strip() for cte in ctes)
        + ",\n"
        + _HITS_SQL.format(
            levels=" UNION ALL ".join(levels),
            entity_facts=entity_facts.strip(),
            fact_filter=fact_filter,
            fact_columns=FACT_COLUMNS,
            similarity=similarity,
            dynamic_importance=_DYNAMIC_IMPORTANCE_SQL,
        ).strip()
    )
    rows = fetch_all(session, sql, params)
    result.returned = len(rows)

    # Each group's facts, strongest by dynamic importance first (ranked by the statement).
    groups: dict[tuple[int, str], list[tuple[int, Candidate]]] = {}
    origins: dict[tuple[int, str], float] = {}
    weights: dict[tuple[int, str], float] = {}
    for row in rows:
        candidate = base_candidate(row)
        if row.similarity is not None:
            candidate.semantic = max(0.0, min(1.0, float(row.similarity)))
        group = (int(row.level), str(row.via))
        groups.setdefault(group, []).append((int(row.place), candidate))
        origins[group] = float(row.origin)
        # An entity (or cluster) with far more facts than the few taken from it says little
        # about each of them: see memory_core.read.focus.
        weights[group] = specificity(row.via_facts, per_entity) if config.entity_specificity else 1.0
    best: dict[str, Candidate] = {}
    hop_of: dict[str, int] = {}
    for (level, via), members in sorted(groups.items()):
        activation = origins[(level, via)] * config.spreading_decay_factor**level * weights[(level, via)]
        for _, candidate in sorted(members, key=lambda member: member[0]):
            candidate.graph = min(1.0, activation)
            candidate.sources.add("spreading")
            kept = best.get(candidate.fact_id)
            if kept is None or candidate.graph > kept.graph:
                best[candidate.fact_id] = candidate
                hop_of[candidate.fact_id] = level
        if via.startswith("cluster:"):
            result.clusters_explored.append(via.removeprefix("cluster:"))
        elif via not in result.entities_explored:
            result.entities_explored.append(via)
    for level in hop_of.values():
        result.hop_counts[level] = result.hop_counts.get(level, 0) + 1
    result.candidates = sorted(best.values(), key=lambda c: (-c.graph, c.fact_id))
    result.duration_ms = (time.perf_counter() - started) * 1000.0
    return result


@dataclass
class ContextExtras:
    """Clusters and observed patterns for the context."""

    clusters: list[ClusterInfo] = field(default_factory=list)
    patterns: list[ContextPattern] = field(default_factory=list)
    pattern_ids: list[str] = field(default_factory=list)


_EXTRAS_SQL = """
SELECT * FROM (
    SELECT 'cluster' AS kind, CAST(c.id AS text) AS id, c.label AS title, c.summary_text AS body,
           c.importance, CAST(NULL AS float8) AS similarity,
           CAST(c.id AS text) = ANY(CAST(:cluster_ids AS text[])) AS related, c.last_updated_at AS seen_at
    FROM memory_clusters c
    WHERE c.agent_id = :agent AND c.is_active
      AND (CAST(c.id AS text) = ANY(CAST(:cluster_ids AS text[])) OR :broad)
    ORDER BY related DESC, c.importance DESC, c.id
    LIMIT :max_clusters
) clusters
UNION ALL
SELECT * FROM (
    SELECT 'pattern' AS kind, CAST(m.id AS text) AS id, m.title, m.text AS body, m.importance,
           {similarity} AS similarity,
           jsonb_exists_any(m.supporting_fact_ids, CAST(:fact_ids AS text[])) AS related,
           m.last_reinforced_at AS seen_at
    FROM memory_meta_observations m
    WHERE m.agent_id = :agent AND m.is_active
      AND (
          jsonb_exists_any(m.supporting_fact_ids, CAST(:fact_ids AS text[]))
          OR (m.observation_type = ANY(CAST(:trend_types AS text[])) AND m.last_reinforced_at >= :trend_since)
          OR {similar}
      )
    ORDER BY related DESC, similarity DESC NULLS LAST, m.importance DESC, m.id
    LIMIT :max_patterns
) patterns
"""


def context_extras(
    session: Session,
    agent_id: str,
    config: MemoryConfig,
    *,
    fact_ids: Sequence[str],
    cluster_ids: Sequence[str],
    now: datetime,
    query_vector: Sequence[float] | None = None,
    broad: bool = False,
) -> ContextExtras:
    """Clusters of the candidates (and, for broad queries, the agent's main clusters) and observed patterns."""
    params: dict[str, Any] = {
        "agent": agent_id,
        "cluster_ids": list(dict.fromkeys(cluster_ids)),
        "fact_ids": list(dict.fromkeys(fact_ids)),
        "broad": broad,
        "max_clusters": MAX_CLUSTERS,
        "max_patterns": MAX_PATTERNS,
        "trend_types": list(TREND_TYPES),
        "trend_since": now - timedelta(days=config.emotional_summary_max_age_days),
    }
    similarity, similar = "CAST(NULL AS float8)", "false"
    if query_vector is not None:
        params["vec"] = vector_param(query_vector)
        params["min_similarity"] = config.min_similarity
        similarity = "1 - (m.embedding_vec <=> CAST(:vec AS vector))"
        similar = "(m.embedding_vec IS NOT NULL AND 1 - (m.embedding_vec <=> CAST(:vec AS vector)) >= :min_similarity)"
    rows = fetch_all(session, _EXTRAS_SQL.format(similarity=similarity, similar=similar), params)
    extras = ContextExtras()
    for row in rows:
        if row.kind == "cluster":
            extras.clusters.append(ClusterInfo(cluster_id=str(row.id), label=str(row.title), summary_text=row.body))
        elif str(row.body or "").strip():
            extras.patterns.append(ContextPattern(text=str(row.body)))
            extras.pattern_ids.append(str(row.id))
    return extras

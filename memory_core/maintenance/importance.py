"""Entity importance (seeds B6): one set-based SQL statement per agent, no LLM, no per-row Python.

Four signals per active entity, each normalised within the agent to ``[0, 1]``:

* **fact density** (0.30): active facts linked to the entity through
  ``memory_fact_entity_links``, as primary subject *or* mention;
* **recency** (0.25): ``0.5 ** (days behind the agent's most recent activity / half-life)``
  where an entity's activity is the later of ``last_seen_at`` and its newest linked active
  fact's ``valid_from``; measured against the agent's own latest activity rather than the
  wall clock, so imported history ranks its entities like a live memory would
  (``importance_recency_halflife_days``, 30 d);
* **retrieval frequency** (0.25): the sum of ``times_retrieved`` of those facts (their rows of
  ``memory_fact_usage``);
* **relationship degree** (0.20): incoming + outgoing active edges.

Counts are heavy-tailed (the user's own entity has hundreds of facts), so density,
retrieval and degree are normalised on a log scale, ``ln(1 + x) / ln(1 + max)``, which keeps
a 4-fact entity visibly above a 1-fact one next to a 400-fact one. The weighted sum is
divided by the sum of the weights (``entity_importance_weights``), so the score stays in
``[0, 1]`` whatever weights a deployment chooses. Retrieval ranking reads the score as
the importance of an entity's facts (:mod:`memory_core.read.rank`); summary refresh uses
it as its priority.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from memory_core.config import MemoryConfig
from memory_core.maintenance.context import MaintenanceContext

__all__ = ["TOP_ENTITIES", "run", "score_entities"]

# How many (key, score) pairs the result lists, best first.
TOP_ENTITIES = 10

_IMPORTANCE_SQL = text(
    """
    WITH entity AS (
        SELECT e.id, e.canonical_key, e.last_seen_at
        FROM memory_entities e
        WHERE e.agent_id = :agent AND e.is_active
    ),
    linked AS (
        SELECT l.entity_key,
               count(DISTINCT f.id) AS facts,
               sum(u.times_retrieved) AS retrieved,
               max(f.valid_from) AS newest_fact
        FROM memory_fact_entity_links l
        JOIN memory_facts f ON f.id = l.fact_id AND f.agent_id = :agent
        LEFT JOIN memory_fact_usage u ON u.fact_id = f.id
        WHERE l.agent_id = :agent AND f.valid_to IS NULL
        GROUP BY l.entity_key
    ),
    edge_ends AS (
        SELECT source_entity_key AS entity_key FROM memory_entity_relationships
        WHERE agent_id = :agent AND valid_to IS NULL
        UNION ALL
        SELECT target_entity_key FROM memory_entity_relationships
        WHERE agent_id = :agent AND valid_to IS NULL
    ),
    degree AS (
        SELECT entity_key, count(*) AS edges FROM edge_ends GROUP BY entity_key
    ),
    raw AS (
        SELECT entity.id, entity.canonical_key,
               ln(1 + COALESCE(linked.facts, 0)) AS density,
               ln(1 + COALESCE(linked.retrieved, 0)) AS retrieval,
               ln(1 + COALESCE(degree.edges, 0)) AS degree,
               GREATEST(entity.last_seen_at, COALESCE(linked.newest_fact, entity.last_seen_at)) AS active_at
        FROM entity
        LEFT JOIN linked ON linked.entity_key = entity.canonical_key
        LEFT JOIN degree ON degree.entity_key = entity.canonical_key
    ),
    normalised AS (
        SELECT id, canonical_key,
               COALESCE(density / NULLIF(max(density) OVER (), 0), 0) AS density,
               COALESCE(retrieval / NULLIF(max(retrieval) OVER (), 0), 0) AS retrieval,
               COALESCE(degree / NULLIF(max(degree) OVER (), 0), 0) AS degree,
               power(0.5, EXTRACT(EPOCH FROM (max(active_at) OVER () - active_at)) / 86400.0 / :half_life)
                   AS recency
        FROM raw
    )
    UPDATE memory_entities e
    SET importance_score = LEAST(1.0, GREATEST(0.0,
        (:w_density * n.density + :w_recency * n.recency + :w_retrieval * n.retrieval + :w_degree * n.degree)
        / :w_total))
    FROM normalised n
    WHERE e.id = n.id AND e.agent_id = :agent
    RETURNING e.canonical_key, e.importance_score
    """
)


def score_entities(context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> list[tuple[str, float]]:
    """Write ``importance_score`` of every active entity of ``agent_id``; (key, score) pairs, best first."""
    weights = config.entity_importance_weights
    params: dict[str, Any] = {
        "agent": agent_id,
        "half_life": float(config.importance_recency_halflife_days),
        "w_density": weights["fact_density"],
        "w_recency": weights["recency"],
        "w_retrieval": weights["retrieval_frequency"],
        "w_degree": weights["relationship_degree"],
        # The validator guarantees one positive weight, so the total is never 0.
        "w_total": sum(weights.values()),
    }
    with context.sessions.begin() as session:
        rows = session.execute(_IMPORTANCE_SQL, params).all()
    scored = [(str(row.canonical_key), round(float(row.importance_score), 6)) for row in rows]
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored


def run(context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> dict[str, Any]:
    """Score every active entity of ``agent_id``: ``entities_scored`` and ``top_entities`` ([key, score])."""
    scored = score_entities(context, agent_id, config)
    return {
        "entities_scored": len(scored),
        "top_entities": [[key, score] for key, score in scored[:TOP_ENTITIES]],
    }

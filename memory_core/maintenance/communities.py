"""Community detection (seeds B2 and "Job 4"): themes across clusters, and connected groups of entities.

**Cluster communities.** The agent's active clusters (at most :data:`MAX_COMPARED_CLUSTERS`,
most important first) are compared pairwise by the cosine similarity of their embeddings, in
one SQL self-join; pairs at or above ``community_similarity_threshold`` are edges, and each
connected component of at least ``community_min_clusters`` clusters is a community. Each is
stored as one meta-observation of type ``community_theme``: a title and a paragraph from
``skills.describe_community``, the member cluster ids in ``members``, the member clusters'
facts (newest :data:`MAX_SUPPORTING_FACTS`) in ``supporting_fact_ids`` and an embedding of the
text, so retrieval shows it under "Observed patterns" next to those facts or for a similar query.

**Entity communities.** Union-find (path compression, union by rank) over the active edges of
``memory_entity_relationships`` with ``strength >= entity_community_min_edge_strength`` between
active entities; components of at least ``entity_community_min_size`` members are communities,
with no LLM call. Each is stored as a meta-observation of type ``entity_community`` (member keys
in ``members``, a plain description naming the members and the relationship types), and every
member entity points at it through ``memory_entities.community_id``: the API and retrieval find
an entity's community, or a community's members, with one indexed look-up. These observations
carry no embedding and no supporting facts on purpose: a component is often most of the graph,
and its member list is not a pattern worth context space.

**Idempotence.** A new component takes over the existing observation of its kind that shares
the most members with it (each observation at most once), so a community that keeps, gains or
loses members is updated in place, never duplicated; observations no component takes over are
deactivated. A fingerprint of what a text was made from (member ids and their clusters'
fingerprints) is stored with it: when it is unchanged, nothing is written and no skill is
called. At most :data:`DESCRIPTIONS_PER_RUN` communities are (re)described per run.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.cognition.maintenance_models import CommunityInput
from memory_core.config import MemoryConfig
from memory_core.db.vectors import vector_param
from memory_core.maintenance.context import MaintenanceContext
from memory_core.maintenance.union_find import connected_components

__all__ = [
    "CLUSTER_COMMUNITY",
    "DESCRIPTIONS_PER_RUN",
    "ENTITY_COMMUNITY",
    "MAX_COMPARED_CLUSTERS",
    "MAX_ENTITY_COMMUNITIES",
    "MAX_SUPPORTING_FACTS",
    "run",
]

CLUSTER_COMMUNITY = "community_theme"
ENTITY_COMMUNITY = "entity_community"
# Clusters compared per run (the self-join is quadratic in this).
MAX_COMPARED_CLUSTERS = 500
# Cluster communities (re)described per run: the bound on LLM calls.
DESCRIPTIONS_PER_RUN = 10
# Summaries shown to the describing skill per community.
MAX_DESCRIBED_CLUSTERS = 12
# Facts a community observation cites (newest first).
MAX_SUPPORTING_FACTS = 100
# Entity communities stored per run, largest first.
MAX_ENTITY_COMMUNITIES = 500
# Members named in an entity community's title.
_TITLE_MEMBERS = 3
_TITLE_MAX_CHARS = 256

_CLUSTERS_SQL = text(
    """
    SELECT id, label, summary_text, facts_fingerprint, importance
    FROM memory_clusters
    WHERE agent_id = :agent AND is_active AND embedding_vec IS NOT NULL
    ORDER BY importance DESC, id
    LIMIT :max_clusters
    """
)

_SIMILAR_PAIRS_SQL = text(
    """
    WITH c AS (
        SELECT id, embedding_vec FROM memory_clusters
        WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[]))
    )
    SELECT a.id AS first, b.id AS second, 1 - (a.embedding_vec <=> b.embedding_vec) AS similarity
    FROM c a JOIN c b ON a.id < b.id
    WHERE 1 - (a.embedding_vec <=> b.embedding_vec) >= :threshold
    """
)

_OBSERVATIONS_SQL = text(
    """
    SELECT id, members, fingerprint, first_detected_at
    FROM memory_meta_observations
    WHERE agent_id = :agent AND observation_type = :type AND is_active
    ORDER BY first_detected_at, id
    """
)

_SUPPORTING_FACTS_SQL = text(
    """
    SELECT id FROM memory_facts
    WHERE agent_id = :agent AND cluster_id = ANY(CAST(:clusters AS uuid[])) AND valid_to IS NULL
    ORDER BY valid_from DESC, id
    LIMIT :limit
    """
)

_INSERT_SQL = text(
    """
    INSERT INTO memory_meta_observations (agent_id, observation_type, title, text, members, fingerprint,
        supporting_fact_ids, confidence, importance, embedding_vec, first_detected_at, last_reinforced_at, created_at)
    VALUES (:agent, :type, :title, :text, CAST(:members AS jsonb), :fingerprint, CAST(:facts AS jsonb),
        :confidence, :importance, CAST(:vec AS vector), :now, :now, :now)
    RETURNING id
    """
)

_UPDATE_SQL = text(
    """
    UPDATE memory_meta_observations
    SET title = :title, text = :text, members = CAST(:members AS jsonb), fingerprint = :fingerprint,
        supporting_fact_ids = CAST(:facts AS jsonb), confidence = :confidence, importance = :importance,
        embedding_vec = CAST(:vec AS vector), times_reinforced = times_reinforced + 1, last_reinforced_at = :now
    WHERE agent_id = :agent AND id = :id
    """
)

_DEACTIVATE_SQL = text(
    """
    UPDATE memory_meta_observations SET is_active = false
    WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[]))
    """
)

_ENTITIES_SQL = text(
    """
    SELECT canonical_key, display_name FROM memory_entities
    WHERE agent_id = :agent AND is_active
    ORDER BY canonical_key
    """
)

_EDGES_SQL = text(
    """
    SELECT r.source_entity_key AS source, r.target_entity_key AS target, r.rel_type
    FROM memory_entity_relationships r
    WHERE r.agent_id = :agent AND r.valid_to IS NULL AND r.strength >= :min_strength
      AND r.source_entity_key <> r.target_entity_key
    ORDER BY r.source_entity_key, r.target_entity_key, r.rel_type
    """
)

_ASSIGN_ENTITIES_SQL = text(
    """
    UPDATE memory_entities SET community_id = :community
    WHERE agent_id = :agent AND canonical_key = ANY(CAST(:keys AS text[])) AND community_id IS DISTINCT FROM :community
    """
)

_RELEASE_ENTITIES_SQL = text(
    """
    UPDATE memory_entities SET community_id = NULL
    WHERE agent_id = :agent AND community_id IS NOT NULL AND canonical_key <> ALL(CAST(:keys AS text[]))
    """
)


def _fingerprint(parts: Sequence[str]) -> str:
    # Change detection, not security.
    return hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()


@dataclass(frozen=True)
class _Observation:
    observation_id: uuid.UUID
    members: frozenset[str]
    fingerprint: str | None


@dataclass
class _Plan:
    """What to do with one component: the observation it takes over (if any)."""

    members: list[str]
    fingerprint: str
    taken: _Observation | None


@dataclass
class _Counts:
    created: int = 0
    reinforced: int = 0
    unchanged: int = 0
    dissolved: int = 0
    deferred: int = 0
    fallbacks: int = 0


def _load_observations(session: Session, agent_id: str, kind: str) -> list[_Observation]:
    rows = session.execute(_OBSERVATIONS_SQL, {"agent": agent_id, "type": kind}).all()
    return [
        _Observation(row.id, frozenset(str(member) for member in (row.members or [])), row.fingerprint) for row in rows
    ]


def _match(components: list[tuple[list[str], str]], existing: list[_Observation]) -> tuple[list[_Plan], list[str]]:
    """Pair each component with the unused observation sharing most members; the leftover observation ids."""
    free = list(existing)
    plans: list[_Plan] = []
    for members, fingerprint in components:
        member_set = set(members)
        best: _Observation | None = None
        best_overlap = 0
        for candidate in free:
            overlap = len(member_set & candidate.members)
            if overlap > best_overlap:
                best, best_overlap = candidate, overlap
        if best is not None:
            free.remove(best)
        plans.append(_Plan(members=members, fingerprint=fingerprint, taken=best))
    return plans, [str(observation.observation_id) for observation in free]


# --- cluster communities -----------------------------------------------------------------


@dataclass(frozen=True)
class _Cluster:
    cluster_id: str
    summary: str
    fingerprint: str
    importance: float


def _cluster_communities(
    context: MaintenanceContext, agent_id: str, config: MemoryConfig, now: datetime
) -> dict[str, Any]:
    with context.sessions.begin() as session:
        rows = session.execute(_CLUSTERS_SQL, {"agent": agent_id, "max_clusters": MAX_COMPARED_CLUSTERS}).all()
        clusters = {
            str(row.id): _Cluster(
                cluster_id=str(row.id),
                summary=" ".join(str(row.summary_text or row.label).split()),
                fingerprint=str(row.facts_fingerprint or ""),
                importance=float(row.importance),
            )
            for row in rows
        }
        pairs = session.execute(
            _SIMILAR_PAIRS_SQL,
            {"agent": agent_id, "ids": list(clusters), "threshold": config.community_similarity_threshold},
        ).all()
        existing = _load_observations(session, agent_id, CLUSTER_COMMUNITY)
    counts = _Counts()
    similarity = {frozenset((str(pair.first), str(pair.second))): float(pair.similarity) for pair in pairs}
    components = connected_components(
        list(clusters),
        [(str(pair.first), str(pair.second)) for pair in pairs],
        min_size=max(2, config.community_min_clusters),
    )
    keyed = [
        (members, _fingerprint([f"{member}:{clusters[member].fingerprint}" for member in members]))
        for members in components
    ]
    plans, leftovers = _match(keyed, existing)
    described = 0
    for plan in plans:
        if plan.taken is not None and plan.taken.fingerprint == plan.fingerprint:
            counts.unchanged += 1
            continue
        if described >= DESCRIPTIONS_PER_RUN:
            counts.deferred += 1
            continue
        described += 1
        _write_cluster_community(
            context, agent_id, plan, clusters=clusters, similarity=similarity, now=now, counts=counts
        )
    if leftovers:
        with context.sessions.begin() as session:
            session.execute(_DEACTIVATE_SQL, {"agent": agent_id, "ids": leftovers})
    counts.dissolved = len(leftovers)
    result: dict[str, Any] = {
        "communities_created": counts.created,
        "communities_reinforced": counts.reinforced,
        "communities_unchanged": counts.unchanged,
        "communities_dissolved": counts.dissolved,
        "communities_deferred": counts.deferred,
        "clusters_in_communities": sum(len(members) for members in components),
        "description_fallbacks": counts.fallbacks,
        "skipped": False,
        "skip_reason": None,
    }
    if len(clusters) < max(2, config.community_min_clusters):
        result["skipped"] = True
        result["skip_reason"] = f"{len(clusters)} active clusters with an embedding; run clustering first"
    return result


def _write_cluster_community(
    context: MaintenanceContext,
    agent_id: str,
    plan: _Plan,
    *,
    clusters: dict[str, _Cluster],
    similarity: dict[frozenset[str], float],
    now: datetime,
    counts: _Counts,
) -> None:
    members = plan.members
    summaries = [clusters[member].summary for member in members[:MAX_DESCRIBED_CLUSTERS] if clusters[member].summary]
    outcome = context.skills.describe_community.run(CommunityInput(cluster_summaries=summaries))
    counts.fallbacks += int(outcome.used_fallback)
    title = " ".join(outcome.output.title.split())[:_TITLE_MAX_CHARS]
    body = " ".join(outcome.output.observation.split())
    if not body:
        return  # nothing usable to store; the next run tries again
    member_set = set(members)
    inner = [value for pair, value in similarity.items() if pair <= member_set]
    vector = context.embedder.embed_one(body)
    with context.sessions.begin() as session:
        facts = [
            str(fact_id)
            for fact_id in session.execute(
                _SUPPORTING_FACTS_SQL, {"agent": agent_id, "clusters": members, "limit": MAX_SUPPORTING_FACTS}
            ).scalars()
        ]
        params = {
            "agent": agent_id,
            "type": CLUSTER_COMMUNITY,
            "title": title or body[:_TITLE_MAX_CHARS],
            "text": body,
            "members": json.dumps(members),
            "fingerprint": plan.fingerprint,
            "facts": json.dumps(facts),
            # How tight the community is: the mean similarity of its similar pairs.
            "confidence": round(min(1.0, max(0.0, sum(inner) / len(inner))), 6) if inner else 0.7,
            "importance": max(clusters[member].importance for member in members),
            "vec": vector_param(vector),
            "now": now,
        }
        if plan.taken is None:
            session.execute(_INSERT_SQL, params)
            counts.created += 1
        else:
            session.execute(_UPDATE_SQL, {**params, "id": plan.taken.observation_id})
            counts.reinforced += 1


# --- entity communities ------------------------------------------------------------------


def _entity_communities(
    context: MaintenanceContext, agent_id: str, config: MemoryConfig, now: datetime
) -> dict[str, Any]:
    with context.sessions.begin() as session:
        names = {
            str(row.canonical_key): str(row.display_name or row.canonical_key)
            for row in session.execute(_ENTITIES_SQL, {"agent": agent_id}).all()
        }
        edges = [
            (str(row.source), str(row.target), str(row.rel_type))
            for row in session.execute(
                _EDGES_SQL, {"agent": agent_id, "min_strength": config.entity_community_min_edge_strength}
            ).all()
            if str(row.source) in names and str(row.target) in names
        ]
        existing = _load_observations(session, agent_id, ENTITY_COMMUNITY)
    components = connected_components(
        list(names), [(source, target) for source, target, _ in edges], min_size=config.entity_community_min_size
    )
    stored = components[:MAX_ENTITY_COMMUNITIES]
    plans, leftovers = _match([(members, _fingerprint(members)) for members in stored], existing)
    counts = _Counts()
    assigned: list[str] = []
    with context.sessions.begin() as session:
        if leftovers:
            session.execute(_DEACTIVATE_SQL, {"agent": agent_id, "ids": leftovers})
        for plan in plans:
            community_id = _write_entity_community(
                session, agent_id, plan, names=names, edges=edges, now=now, counts=counts
            )
            session.execute(_ASSIGN_ENTITIES_SQL, {"agent": agent_id, "community": community_id, "keys": plan.members})
            assigned.extend(plan.members)
        session.execute(_RELEASE_ENTITIES_SQL, {"agent": agent_id, "keys": assigned})
    return {
        "communities_found": len(components),
        "total_entities_assigned": len(assigned),
        "entity_communities_created": counts.created,
        "entity_communities_updated": counts.reinforced,
        "entity_communities_unchanged": counts.unchanged,
        "entity_communities_dissolved": len(leftovers),
        "largest_entity_community": len(components[0]) if components else 0,
    }


def _write_entity_community(
    session: Session,
    agent_id: str,
    plan: _Plan,
    *,
    names: dict[str, str],
    edges: list[tuple[str, str, str]],
    now: datetime,
    counts: _Counts,
) -> uuid.UUID:
    if plan.taken is not None and plan.taken.fingerprint == plan.fingerprint:
        counts.unchanged += 1
        return plan.taken.observation_id
    members = set(plan.members)
    inside = [(source, target, rel) for source, target, rel in edges if source in members and target in members]
    degree = Counter(key for source, target, _ in inside for key in (source, target))
    # The best-connected members name the community; ties alphabetical by name.
    ranked = sorted(plan.members, key=lambda key: (-degree[key], names[key].casefold(), key))
    shown = [names[key] for key in ranked[:_TITLE_MEMBERS]]
    more = len(ranked) - len(shown)
    title = ", ".join(shown) + (f" (+{more})" if more else "")
    relations = sorted({rel for _, _, rel in inside})
    body = (
        f"{len(ranked)} connected entities: {', '.join(names[key] for key in ranked)}. "
        f"Relationships: {', '.join(relations)}."
    )
    params = {
        "agent": agent_id,
        "type": ENTITY_COMMUNITY,
        "title": title[:_TITLE_MAX_CHARS],
        "text": body,
        "members": json.dumps(plan.members),
        "fingerprint": plan.fingerprint,
        "facts": "[]",
        "confidence": 1.0,  # a connected component is a fact about the graph, not a guess
        "importance": 0.5,
        "vec": None,
        "now": now,
    }
    if plan.taken is None:
        counts.created += 1
        created: uuid.UUID = session.execute(_INSERT_SQL, params).scalar_one()
        return created
    session.execute(_UPDATE_SQL, {**params, "id": plan.taken.observation_id})
    counts.reinforced += 1
    return plan.taken.observation_id


def run(context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> dict[str, Any]:
    """Detect cluster communities and entity communities of ``agent_id`` (see the module docstring).

    Result: the seeds' ``communities_created``, ``communities_reinforced`` (updated in place),
    ``clusters_in_communities``, ``skipped``/``skip_reason`` (fewer active clusters with an
    embedding than a community needs) for cluster communities, plus ``communities_unchanged``,
    ``communities_dissolved``, ``communities_deferred`` and ``description_fallbacks``; and the
    seeds' ``communities_found`` and ``total_entities_assigned`` for entity communities, plus
    ``entity_communities_created/updated/unchanged/dissolved`` and ``largest_entity_community``.
    """
    now = context.now()
    result = _cluster_communities(context, agent_id, config, now)
    result.update(_entity_communities(context, agent_id, config, now))
    return result

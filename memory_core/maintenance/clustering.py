"""Fact clustering (seeds B1): one cluster per entity, a 2-3 sentence summary, an embedding.

An agent's active facts not older than ``cluster_max_age_days`` (by ``valid_from``) are
grouped by ``(entity_type, entity_key)``; a group with at least ``cluster_min_facts`` facts
is a cluster (``cluster_type = 'auto'``, one per entity, enforced by a partial unique index).
Its facts point at it through ``memory_facts.cluster_id``; retrieval lays broad queries out
cluster-first from the label and summary, ranked by the cluster's importance (the entity's
``importance_score`` when the importance job has scored it, else the facts' mean importance).

Idempotence and cost: a group's *fingerprint* is the md5 of its facts' ids and text hashes,
computed in SQL for every group in one statement. A cluster whose stored fingerprint matches
is left alone (no skill call, no write); only new and changed groups are summarised, at most
:data:`SUMMARIES_PER_RUN` per run, freshest first; the rest are reported as deferred and
picked up by the next run. Clusters whose entity no longer has enough facts are deactivated
and their facts released.

The cluster embedding is the mean of its facts' embeddings (pgvector ``avg``), not an
embedding of the summary: it costs no provider call, it stands for every member fact rather
than the few sentences a summary keeps (the offline summary keeps two), and it lives in the
facts' vector space, which is what community detection compares. A cluster whose facts have
no embedding at all falls back to embedding its summary.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.cognition.maintenance_models import FactLine, SummaryInput
from memory_core.config import MemoryConfig
from memory_core.maintenance.context import MaintenanceContext
from memory_core.write.repository import vector_literal

__all__ = ["SUMMARIES_PER_RUN", "SUMMARY_MAX_FACTS", "facts_fingerprint", "run"]

# Clusters (re)summarised per run: the bound on LLM calls of one run.
SUMMARIES_PER_RUN = 25
# Newest facts shown to the summariser; every fact of the group is still a member.
SUMMARY_MAX_FACTS = 50
_LABEL_MAX_CHARS = 128

# The fingerprint formula is written twice, here in SQL and in facts_fingerprint(): both
# hash "<id>:<md5(text)>" joined by commas in uuid order, so an unchanged group matches.
_GROUPS_SQL = text(
    """
    SELECT f.entity_type, f.entity_key, count(*) AS fact_count, max(f.valid_from) AS newest,
           md5(string_agg(CAST(f.id AS text) || ':' || md5(f.fact_text), ',' ORDER BY f.id)) AS fingerprint
    FROM memory_facts f
    WHERE f.agent_id = :agent AND f.valid_to IS NULL AND f.valid_from >= :since
    GROUP BY f.entity_type, f.entity_key
    HAVING count(*) >= :min_facts
    """
)

_CLUSTERS_SQL = text(
    """
    SELECT id, entity_type, entity_key, facts_fingerprint, summary_text IS NOT NULL AS has_summary,
           embedding_vec IS NOT NULL AS has_embedding, is_active
    FROM memory_clusters
    WHERE agent_id = :agent AND cluster_type = 'auto'
    """
)

_GROUP_FACTS_SQL = text(
    """
    SELECT f.id, f.fact_text, f.attribute_key, f.valid_from, f.entity_name, f.importance
    FROM memory_facts f
    WHERE f.agent_id = :agent AND f.entity_type = :type AND f.entity_key = :key
      AND f.valid_to IS NULL AND f.valid_from >= :since
    ORDER BY f.valid_from DESC, f.id
    """
)

_ENTITY_SQL = text(
    """
    SELECT display_name, importance_score FROM memory_entities
    WHERE agent_id = :agent AND canonical_key = :key
    """
)

_MEAN_EMBEDDING_SQL = text(
    """
    SELECT CAST(avg(embedding_vec) AS text) FROM memory_facts
    WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[])) AND embedding_vec IS NOT NULL
    """
)

_UPSERT_SQL = text(
    """
    INSERT INTO memory_clusters (agent_id, entity_type, entity_key, label, summary_text, cluster_type,
        fact_count, importance, embedding_vec, is_active, facts_fingerprint, last_updated_at, created_at)
    VALUES (:agent, :type, :key, :label, :summary, 'auto', :fact_count, :importance, CAST(:vec AS vector), true,
        :fingerprint, :now, :now)
    ON CONFLICT (agent_id, entity_type, entity_key) WHERE cluster_type = 'auto' DO UPDATE SET
        label = EXCLUDED.label, summary_text = EXCLUDED.summary_text, fact_count = EXCLUDED.fact_count,
        importance = EXCLUDED.importance, embedding_vec = EXCLUDED.embedding_vec, is_active = true,
        facts_fingerprint = EXCLUDED.facts_fingerprint, last_updated_at = EXCLUDED.last_updated_at
    RETURNING id, (xmax = 0) AS inserted
    """
)

_ASSIGN_SQL = text(
    """
    WITH assigned AS (
        UPDATE memory_facts SET cluster_id = :cluster
        WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[])) AND cluster_id IS DISTINCT FROM :cluster
        RETURNING id
    )
    SELECT count(*) FROM assigned
    """
)

_RELEASE_OTHERS_SQL = text(
    """
    UPDATE memory_facts SET cluster_id = NULL
    WHERE agent_id = :agent AND cluster_id = :cluster AND id <> ALL(CAST(:ids AS uuid[]))
    """
)

_REACTIVATE_SQL = text(
    """
    WITH members AS (
        UPDATE memory_facts SET cluster_id = :cluster
        WHERE agent_id = :agent AND entity_type = :type AND entity_key = :key
          AND valid_to IS NULL AND valid_from >= :since AND cluster_id IS DISTINCT FROM :cluster
        RETURNING id
    )
    UPDATE memory_clusters SET is_active = true WHERE agent_id = :agent AND id = :cluster
    RETURNING (SELECT count(*) FROM members) AS assigned
    """
)

_DEACTIVATE_SQL = text(
    """
    WITH gone AS (
        UPDATE memory_clusters SET is_active = false, last_updated_at = :now
        WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[])) AND is_active
        RETURNING id
    )
    UPDATE memory_facts SET cluster_id = NULL
    WHERE agent_id = :agent AND cluster_id IN (SELECT id FROM gone)
    """
)

# Clusters follow their entity's importance as the importance job rescores it (no LLM, one statement).
_FOLLOW_IMPORTANCE_SQL = text(
    """
    UPDATE memory_clusters c SET importance = e.importance_score
    FROM memory_entities e
    WHERE c.agent_id = :agent AND c.cluster_type = 'auto' AND c.is_active
      AND e.agent_id = :agent AND e.canonical_key = c.entity_key AND e.importance_score IS NOT NULL
      AND c.importance IS DISTINCT FROM e.importance_score
    """
)


def facts_fingerprint(facts: list[tuple[str, str]]) -> str:
    """md5 of ``(fact_id, fact_text)`` pairs exactly as :data:`_GROUPS_SQL` computes it in PostgreSQL."""
    # uuid order in PostgreSQL is byte order, which is the order of the canonical lower-case text form.
    # md5 because PostgreSQL has it built in; this is change detection, not security.
    parts = [f"{fact_id}:{_md5(fact_text)}" for fact_id, fact_text in sorted(facts)]
    return _md5(",".join(parts))


def _md5(value: str) -> str:
    return hashlib.md5(value.encode(), usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class _Group:
    entity_type: str
    entity_key: str
    fact_count: int
    newest: datetime
    fingerprint: str


@dataclass(frozen=True)
class _Existing:
    cluster_id: uuid.UUID
    fingerprint: str | None
    complete: bool
    is_active: bool


@dataclass
class _Tally:
    created: int = 0
    reinforced: int = 0
    unchanged: int = 0
    deactivated: int = 0
    deferred: int = 0
    summaries: int = 0
    fallbacks: int = 0
    facts_assigned: int = 0


def _load_groups(session: Session, agent_id: str, since: datetime, min_facts: int) -> list[_Group]:
    rows = session.execute(_GROUPS_SQL, {"agent": agent_id, "since": since, "min_facts": min_facts}).all()
    return [
        _Group(str(row.entity_type), str(row.entity_key), int(row.fact_count), row.newest, str(row.fingerprint))
        for row in rows
    ]


def _load_existing(session: Session, agent_id: str) -> dict[tuple[str, str], _Existing]:
    return {
        (str(row.entity_type), str(row.entity_key)): _Existing(
            cluster_id=row.id,
            fingerprint=row.facts_fingerprint,
            complete=bool(row.has_summary and row.has_embedding),
            is_active=bool(row.is_active),
        )
        for row in session.execute(_CLUSTERS_SQL, {"agent": agent_id}).all()
    }


def _summarise(
    context: MaintenanceContext, agent_id: str, group: _Group, *, since: datetime, now: datetime, tally: _Tally
) -> None:
    """Summarise one new or changed group and write its cluster and membership."""
    with context.sessions.begin() as session:
        rows = session.execute(
            _GROUP_FACTS_SQL, {"agent": agent_id, "type": group.entity_type, "key": group.entity_key, "since": since}
        ).all()
        entity = session.execute(_ENTITY_SQL, {"agent": agent_id, "key": group.entity_key}).first()
    if not rows:
        return  # the facts were superseded since the group query; the next run sees the truth
    ids = [str(row.id) for row in rows]
    fingerprint = facts_fingerprint([(str(row.id), str(row.fact_text)) for row in rows])
    subject = (entity.display_name if entity is not None else None) or rows[0].entity_name or group.entity_key
    facts = [
        FactLine(
            fact_id=str(row.id), text=str(row.fact_text), attribute_key=row.attribute_key, valid_from=row.valid_from
        )
        for row in rows[:SUMMARY_MAX_FACTS]
    ]
    # No connection is held during the skill call: an LLM can take seconds.
    outcome = context.skills.summarize_cluster.run(SummaryInput(subject=str(subject), facts=facts))
    tally.summaries += 1
    tally.fallbacks += int(outcome.used_fallback)
    summary = " ".join(outcome.output.summary.split())
    label = (" ".join(outcome.output.label.split()) or str(subject))[:_LABEL_MAX_CHARS]
    mean_importance = sum(float(row.importance) for row in rows) / len(rows)
    importance = float(entity.importance_score) if entity is not None and entity.importance_score is not None else None
    with context.sessions.begin() as session:
        vector = session.execute(_MEAN_EMBEDDING_SQL, {"agent": agent_id, "ids": ids}).scalar()
        if vector is None and summary:
            embedded = context.embedder.embed_one(summary)
            vector = vector_literal(embedded) if embedded else None
        cluster = session.execute(
            _UPSERT_SQL,
            {
                "agent": agent_id,
                "type": group.entity_type,
                "key": group.entity_key,
                "label": label,
                "summary": summary or None,
                "fact_count": len(rows),
                "importance": importance if importance is not None else mean_importance,
                "vec": vector,
                "fingerprint": fingerprint,
                "now": now,
            },
        ).one()
        assigned = session.execute(_ASSIGN_SQL, {"agent": agent_id, "cluster": cluster.id, "ids": ids}).scalar_one()
        session.execute(_RELEASE_OTHERS_SQL, {"agent": agent_id, "cluster": cluster.id, "ids": ids})
    tally.facts_assigned += int(assigned)
    if cluster.inserted:
        tally.created += 1
    else:
        tally.reinforced += 1


def run(context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> dict[str, Any]:
    """Cluster ``agent_id``'s recent active facts by entity (see the module docstring).

    Result: ``clusters_created``, ``clusters_reinforced`` (existing clusters re-summarised),
    ``summaries_generated`` (skill calls), ``facts_assigned`` (facts whose cluster changed),
    ``clusters_unchanged``, ``clusters_deactivated``, ``clusters_deferred`` (left for the next
    run by the per-run bound) and ``summary_fallbacks`` (LLM answers replaced by rules).
    """
    now = context.now()
    since = now - timedelta(days=config.cluster_max_age_days)
    tally = _Tally()
    with context.sessions.begin() as session:
        groups = _load_groups(session, agent_id, since, config.cluster_min_facts)
        existing = _load_existing(session, agent_id)
    wanted = {(group.entity_type, group.entity_key) for group in groups}
    pending: list[_Group] = []
    for group in groups:
        known = existing.get((group.entity_type, group.entity_key))
        if known is None or known.fingerprint != group.fingerprint or not known.complete:
            pending.append(group)
            continue
        tally.unchanged += 1
        if not known.is_active:
            with context.sessions.begin() as session:
                tally.facts_assigned += int(
                    session.execute(
                        _REACTIVATE_SQL,
                        {
                            "agent": agent_id,
                            "cluster": known.cluster_id,
                            "type": group.entity_type,
                            "key": group.entity_key,
                            "since": since,
                        },
                    ).scalar_one()
                )
    # Freshest memories first; then the biggest groups; then a stable order.
    pending.sort(key=lambda group: (-group.newest.timestamp(), -group.fact_count, group.entity_type, group.entity_key))
    for group in pending[:SUMMARIES_PER_RUN]:
        _summarise(context, agent_id, group, since=since, now=now, tally=tally)
    tally.deferred = max(0, len(pending) - SUMMARIES_PER_RUN)
    stale = [str(known.cluster_id) for key, known in existing.items() if key not in wanted and known.is_active]
    with context.sessions.begin() as session:
        if stale:
            session.execute(_DEACTIVATE_SQL, {"agent": agent_id, "ids": stale, "now": now})
        session.execute(_FOLLOW_IMPORTANCE_SQL, {"agent": agent_id})
    tally.deactivated = len(stale)
    return {
        "clusters_created": tally.created,
        "clusters_reinforced": tally.reinforced,
        "summaries_generated": tally.summaries,
        "facts_assigned": tally.facts_assigned,
        "clusters_unchanged": tally.unchanged,
        "clusters_deactivated": tally.deactivated,
        "clusters_deferred": tally.deferred,
        "summary_fallbacks": tally.fallbacks,
    }

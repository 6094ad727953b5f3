"""Memify (seeds B5): fact vitality, stale marking, merges of near-duplicates, distillation.

Three steps per agent, each bounded:

1. **Vitality** of every active fact in one set-based statement (the same formula as
   :func:`compute_vitality`, which tests hold it to):
   ``0.30 x retrieval + 0.25 x recency + 0.20 x confidence + 0.15 x reinforcement``, times
   ``0.8 ** user_correction_count``; a superseded fact (``valid_to`` set) is 0.

   * retrieval: ``ln(1 + times_retrieved) / ln(1 + 20)``, capped at 1 (log scale: the 20th
     retrieval adds far less than the first);
   * recency: ``0.5 ** (days / 30)`` since the fact was last retrieved, else last confirmed,
     else since it entered memory (``created_at``): a fact nobody has asked for yet is as
     fresh as its arrival, not dead on arrival;
   * confidence: the stored value; reinforcement: ``min(count, 5) / 5``.

   The weighted sum is not rescaled (the seeds' weights sum to 0.90), so
   ``vitality_stale_threshold`` (0.2) keeps the meaning the seeds give it. Facts below it get
   ``is_stale = true``; a stale fact whose vitality recovers (it was retrieved or
   reinforced) gets ``is_stale = false`` again. Nothing is deleted.

2. **Merges** of near-duplicate active facts of one entity: cosine similarity of their
   embeddings >= ``memify_merge_similarity_threshold`` (0.90), the same attribute key (or one
   without any), and one fact's content words all found in the other (:func:`restates`: similar
   embeddings alone would merge "likes chess" into "likes running"). The strongest fact of a
   group (vitality, then confidence, reinforcement, recency) is kept; each duplicate is closed
   as the write path closes a replaced fact (``valid_to`` and ``invalidated_at`` = now, so time
   travel still finds it), the kept fact takes over its reinforcements (+1 for the repetition
   itself), retrieval counts (in ``memory_fact_usage``), confidence if higher, entity links, and
   the relationships it was evidence for, and points at it through ``supersedes_fact_id`` when
   it has no predecessor yet (one pointer column: with several duplicates only the first is
   recorded there; the others stay readable by id). At most :data:`MAX_MERGE_GROUPS` groups a
   run; pairs are sought among each entity's :data:`MERGE_SCAN_FACTS` newest facts.

3. **Distillation** of episodic facts into general knowledge: an entity's active facts that
   share an attribute key, at least :data:`DISTILL_MIN_FACTS` of them (repeated instances of
   the same kind: meetups attended, dishes liked), go to ``skills.distill``. The statements
   are stored as one meta-observation of type ``"semantic"`` per (entity, attribute key),
   with the group's fact ids as ``supporting_fact_ids`` and an embedding, so retrieval shows
   them under "Observed patterns" next to the facts they generalise. The source facts are
   kept: distillation adds knowledge, forgetting is vitality's job. A group whose facts have
   not changed since its observation was written is not sent again (no tokens); a group
   the skill could not generalise keeps an inactive, empty observation as that marker; an
   observation whose group fell below the minimum is deactivated. At most
   :data:`MAX_DISTILL_GROUPS` groups a run.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.cognition.maintenance_models import DistillInput, FactLine
from memory_core.config import MemoryConfig
from memory_core.db.vectors import vector_param
from memory_core.maintenance.context import MaintenanceContext
from memory_core.maintenance.entity_facts import SkillTally
from memory_core.maintenance.union_find import connected_components
from memory_core.providers.hashing_embedder import content_words

__all__ = [
    "DISTILLED_TYPE",
    "DISTILL_MIN_FACTS",
    "MAX_DISTILL_GROUPS",
    "MAX_MERGE_GROUPS",
    "MERGE_SCAN_FACTS",
    "RETRIEVAL_SATURATION",
    "FactLike",
    "compute_vitality",
    "run",
]

# times_retrieved at which the retrieval component reaches 1 (ours; the seeds say "log scale").
RETRIEVAL_SATURATION = 20
# Merge groups closed per run, and how many of an entity's newest facts are compared pairwise.
MAX_MERGE_GROUPS = 100
MERGE_SCAN_FACTS = 500
# Episodic groups: at least this many facts of one entity under one attribute key.
DISTILL_MIN_FACTS = 3
MAX_DISTILL_GROUPS = 10
DISTILL_MAX_FACTS = 30
DISTILLED_TYPE = "semantic"

_SECONDS_PER_DAY = 86_400.0


class FactLike(Protocol):
    """What vitality reads from a fact (a row, an ORM object or a test double)."""

    times_retrieved: int
    last_retrieved_at: datetime | None
    confidence: float
    reinforcement_count: int
    user_correction_count: int
    valid_to: datetime | None


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def compute_vitality(fact: FactLike, now: datetime | None = None, config: MemoryConfig | None = None) -> float:
    """How alive ``fact`` is, in ``[0, 1]`` (see the module docstring); 0.0 for a superseded fact.

    Synchronous and per fact. ``now`` defaults to the current UTC time, ``config`` to the
    defaults (weights 0.30/0.25/0.20/0.15, half-life 30 d, cap 5, penalty 0.8). Reads the
    optional ``last_confirmed_at`` and ``created_at`` when the fact has them, as the job does.
    """
    settings = config or MemoryConfig()
    if fact.valid_to is not None:
        return 0.0
    current = _aware(now or datetime.now(UTC))
    weights = settings.vitality_weights
    retrieval = min(1.0, math.log1p(max(0, fact.times_retrieved)) / math.log1p(RETRIEVAL_SATURATION))
    since = fact.last_retrieved_at or getattr(fact, "last_confirmed_at", None) or getattr(fact, "created_at", None)
    recency = 0.0
    if since is not None:
        days = max(0.0, (current - _aware(since)).total_seconds() / _SECONDS_PER_DAY)
        recency = 0.5 ** (days / settings.vitality_recency_halflife_days)
    cap = settings.vitality_reinforcement_cap
    reinforcement = min(max(0, fact.reinforcement_count), cap) / cap
    value = (
        weights["retrieval"] * retrieval
        + weights["recency"] * recency
        + weights["confidence"] * min(1.0, max(0.0, fact.confidence))
        + weights["reinforcement"] * reinforcement
    )
    value *= settings.vitality_correction_penalty ** max(0, fact.user_correction_count)
    return min(1.0, max(0.0, value))


# --- 1. vitality and stale marking -------------------------------------------------------

_VITALITY_SQL = text(
    """
    WITH scored AS (
        SELECT f.id,
               LEAST(1.0, GREATEST(0.0, (
                   :w_retrieval * LEAST(1.0, ln(1 + GREATEST(COALESCE(u.times_retrieved, 0), 0))
                                           / ln(1 + :saturation))
                   + :w_recency * power(0.5, GREATEST(0.0, EXTRACT(EPOCH FROM (
                         :now - COALESCE(u.last_retrieved_at, f.last_confirmed_at, f.created_at)))) / 86400.0
                         / :half_life)
                   + :w_confidence * LEAST(1.0, GREATEST(0.0, f.confidence))
                   + :w_reinforcement * LEAST(GREATEST(f.reinforcement_count, 0), :cap) / CAST(:cap AS float8)
               ) * power(:penalty, GREATEST(f.user_correction_count, 0)))) AS vitality,
               f.is_stale AS was_stale
        FROM memory_facts f
        LEFT JOIN memory_fact_usage u ON u.fact_id = f.id
        WHERE f.agent_id = :agent AND f.valid_to IS NULL
    ),
    changed AS (
        UPDATE memory_facts f
        SET vitality_score = s.vitality, is_stale = s.vitality < :threshold
        FROM scored s
        WHERE f.id = s.id AND f.agent_id = :agent
          AND (f.vitality_score IS DISTINCT FROM s.vitality OR f.is_stale <> (s.vitality < :threshold))
        RETURNING f.id
    )
    SELECT count(*) AS scored,
           count(*) FILTER (WHERE vitality < :threshold AND NOT was_stale) AS marked,
           count(*) FILTER (WHERE vitality >= :threshold AND was_stale) AS unmarked,
           count(*) FILTER (WHERE vitality < :threshold) AS stale,
           (SELECT count(*) FROM changed) AS written
    FROM scored
    """
)

_SUPERSEDED_SQL = text(
    "UPDATE memory_facts SET vitality_score = 0 "
    "WHERE agent_id = :agent AND valid_to IS NOT NULL AND vitality_score IS DISTINCT FROM 0"
)


def _score_vitality(session: Session, agent_id: str, config: MemoryConfig, now: datetime) -> dict[str, int]:
    weights = config.vitality_weights
    row = session.execute(
        _VITALITY_SQL,
        {
            "agent": agent_id,
            "now": now,
            "saturation": RETRIEVAL_SATURATION,
            "half_life": float(config.vitality_recency_halflife_days),
            "cap": config.vitality_reinforcement_cap,
            "penalty": config.vitality_correction_penalty,
            "threshold": config.vitality_stale_threshold,
            "w_retrieval": weights["retrieval"],
            "w_recency": weights["recency"],
            "w_confidence": weights["confidence"],
            "w_reinforcement": weights["reinforcement"],
        },
    ).one()
    session.execute(_SUPERSEDED_SQL, {"agent": agent_id})
    return {
        "facts_scored": int(row.scored),
        "facts_marked_stale": int(row.marked),
        "facts_unmarked_stale": int(row.unmarked),
        "stale_facts": int(row.stale),
    }


# --- 2. merges of near-duplicates -----------------------------------------------------------

_PAIRS_SQL = text(
    """
    WITH recent AS (
        SELECT id, entity_key, attribute_key, fact_text, embedding_vec FROM (
            SELECT f.id, f.entity_key, f.attribute_key, f.fact_text, f.embedding_vec,
                   row_number() OVER (PARTITION BY f.entity_key ORDER BY f.valid_from DESC, f.id) AS position
            FROM memory_facts f
            WHERE f.agent_id = :agent AND f.valid_to IS NULL AND f.embedding_vec IS NOT NULL
        ) ranked
        WHERE position <= :scan
    )
    SELECT a.id AS a_id, b.id AS b_id, a.fact_text AS a_text, b.fact_text AS b_text
    FROM recent a JOIN recent b ON b.entity_key = a.entity_key AND a.id < b.id
    WHERE (a.attribute_key = b.attribute_key OR a.attribute_key IS NULL OR b.attribute_key IS NULL)
      AND (a.embedding_vec <=> b.embedding_vec) <= 1 - :threshold
    ORDER BY a.embedding_vec <=> b.embedding_vec, a.id, b.id
    LIMIT :max_pairs
    """
)

# NO KEY UPDATE, the lock the merge's own UPDATEs take: it still excludes concurrent writers and
# deletions of these facts, but not the foreign key checks of rows that reference them, so
# retrieval bookkeeping inserting a fact's first count never waits for a merge.
_LOCK_FACTS_SQL = text(
    """
    SELECT id, entity_key, confidence, reinforcement_count, last_confirmed_at, valid_from,
           vitality_score, supersedes_fact_id
    FROM memory_facts
    WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[])) AND valid_to IS NULL
    ORDER BY id
    FOR NO KEY UPDATE
    """
)

_CLOSE_DUPLICATES_SQL = text(
    "UPDATE memory_facts SET valid_to = :now, invalidated_at = now() "
    "WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[])) AND valid_to IS NULL"
)

_ABSORB_SQL = text(
    """
    UPDATE memory_facts k SET
        reinforcement_count = k.reinforcement_count + d.reinforcements,
        -- A duplicate said after the kept fact was stated is a repetition: a confirmation then.
        last_confirmed_at = GREATEST(k.last_confirmed_at, d.last_confirmed,
                                     CASE WHEN d.said > k.valid_from THEN d.said END),
        confidence = GREATEST(k.confidence, d.confidence),
        supersedes_fact_id = COALESCE(k.supersedes_fact_id, CAST(:first AS uuid))
    FROM (
        SELECT sum(reinforcement_count + 1) AS reinforcements, max(last_confirmed_at) AS last_confirmed,
               max(confidence) AS confidence, max(valid_from) AS said
        FROM memory_facts WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[]))
    ) d
    WHERE k.agent_id = :agent AND k.id = :kept
    """
)

# The duplicates' retrieval counters added to the kept fact's (an upsert: the kept fact may never
# have been retrieved itself). Nothing is written when no duplicate was ever retrieved.
_ABSORB_USAGE_SQL = text(
    """
    INSERT INTO memory_fact_usage (fact_id, agent_id, times_retrieved, last_retrieved_at)
    SELECT CAST(:kept AS uuid), :agent, sum(u.times_retrieved), max(u.last_retrieved_at)
    FROM memory_fact_usage u
    WHERE u.agent_id = :agent AND u.fact_id = ANY(CAST(:ids AS uuid[]))
    HAVING count(*) > 0
    ON CONFLICT (fact_id) DO UPDATE
    SET times_retrieved = memory_fact_usage.times_retrieved + excluded.times_retrieved,
        last_retrieved_at = GREATEST(memory_fact_usage.last_retrieved_at, excluded.last_retrieved_at)
    """
)

_MOVE_LINKS_SQL = text(
    """
    INSERT INTO memory_fact_entity_links (fact_id, entity_key, is_primary, agent_id)
    SELECT CAST(:kept AS uuid), l.entity_key, false, :agent
    FROM memory_fact_entity_links l
    WHERE l.agent_id = :agent AND l.fact_id = ANY(CAST(:ids AS uuid[]))
    ON CONFLICT (fact_id, entity_key) DO NOTHING
    """
)

_MOVE_EVIDENCE_SQL = text(
    "UPDATE memory_entity_relationships SET evidence_fact_id = :kept, updated_at = now() "
    "WHERE agent_id = :agent AND evidence_fact_id = ANY(CAST(:ids AS uuid[]))"
)

_REFRESH_COUNTS_SQL = text(
    """
    UPDATE memory_entities e SET fact_count = (
        SELECT count(*) FROM memory_fact_entity_links l JOIN memory_facts f ON f.id = l.fact_id
        WHERE l.agent_id = e.agent_id AND l.entity_key = e.canonical_key AND f.valid_to IS NULL
    )
    WHERE e.agent_id = :agent AND e.canonical_key IN (
        SELECT l.entity_key FROM memory_fact_entity_links l
        WHERE l.agent_id = :agent AND l.fact_id = ANY(CAST(:ids AS uuid[]))
    )
    """
)


def _strength(row: Any) -> tuple[float, float, int, float, str]:
    """Sort key, strongest first."""
    return (
        -float(row.vitality_score or 0.0),
        -float(row.confidence),
        -int(row.reinforcement_count),
        -_aware(row.valid_from).timestamp(),
        str(row.id),
    )


def restates(first: str, second: str) -> bool:
    """Whether one fact only restates the other: every content word of one appears in the other.

    Embedding similarity alone cannot tell "Ana likes chess" from "Ana likes running": short
    sentences that differ in their one informative word score above 0.9 with many models, and
    always with the offline hashing embedder. Merging those would lose a fact, so a merge also
    needs the words to agree ("Ana lives in Lisbon" / "Ana lives in Lisbon, Portugal" merge).
    """
    a, b = set(content_words(first)), set(content_words(second))
    return bool(a and b) and (a <= b or b <= a)


def _groups(pairs: list[tuple[str, str]]) -> list[tuple[list[str], set[tuple[str, str]]]]:
    """Connected groups of similar facts, each with its similar pairs (both directions)."""
    components = connected_components((node for pair in pairs for node in pair), pairs, min_size=2)
    edges = {(a, b) for a, b in pairs} | {(b, a) for a, b in pairs}
    groups = []
    for component in components:
        members = set(component)
        groups.append((sorted(component), {edge for edge in edges if edge[0] in members}))
    return sorted(groups)


def _merge_group(
    session: Session, agent_id: str, ids: list[str], similar: set[tuple[str, str]], now: datetime
) -> tuple[str, list[str]] | None:
    """Keep the strongest fact of ``ids``; close those directly similar to it. None when nothing merged."""
    rows = session.execute(_LOCK_FACTS_SQL, {"agent": agent_id, "ids": ids}).all()
    if len(rows) < 2:
        return None
    ranked = sorted(rows, key=_strength)
    kept = str(ranked[0].id)
    # Only facts similar to the kept one itself: a chain a~b~c does not make a and c duplicates.
    closed = [str(row.id) for row in ranked[1:] if (kept, str(row.id)) in similar]
    if not closed:
        return None
    params = {"agent": agent_id, "ids": closed, "kept": kept, "first": closed[0], "now": now}
    session.execute(_ABSORB_SQL, params)
    session.execute(_ABSORB_USAGE_SQL, params)
    session.execute(_CLOSE_DUPLICATES_SQL, params)
    session.execute(_MOVE_LINKS_SQL, params)
    session.execute(_MOVE_EVIDENCE_SQL, params)
    session.execute(_REFRESH_COUNTS_SQL, {"agent": agent_id, "ids": [kept, *closed]})
    return kept, closed


def _merge_duplicates(context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> dict[str, Any]:
    with context.sessions.begin() as session:
        pairs = [
            (str(row.a_id), str(row.b_id))
            for row in session.execute(
                _PAIRS_SQL,
                {
                    "agent": agent_id,
                    "scan": MERGE_SCAN_FACTS,
                    "threshold": config.memify_merge_similarity_threshold,
                    "max_pairs": MAX_MERGE_GROUPS * 10,
                },
            ).all()
            if restates(row.a_text, row.b_text)
        ]
    merges: list[list[str]] = []
    closed_count = 0
    for ids, similar in _groups(pairs)[:MAX_MERGE_GROUPS]:
        # One transaction per group: a conflict with a concurrent write loses one group, not the run.
        with context.sessions.begin() as session:
            merged = _merge_group(session, agent_id, ids, similar, context.now())
        if merged is not None:
            kept, closed = merged
            merges.append([kept, *closed])
            closed_count += len(closed)
    return {"merges_executed": len(merges), "facts_merged": closed_count, "merges": merges}


# --- 3. distillation ------------------------------------------------------------------------


@dataclass
class _Group:
    entity_key: str
    entity_name: str
    attribute_key: str
    fact_ids: list[str]

    @property
    def title(self) -> str:
        # The observation's stable identity: one per (entity, attribute key).
        return f"{self.entity_key} {self.attribute_key}"[:256]


_EPISODIC_GROUPS_SQL = text(
    """
    SELECT f.entity_key, max(COALESCE(f.entity_name, f.entity_key)) AS entity_name, f.attribute_key,
           array_agg(CAST(f.id AS text) ORDER BY f.id) AS fact_ids, max(f.valid_from) AS newest
    FROM memory_facts f
    WHERE f.agent_id = :agent AND f.valid_to IS NULL AND f.attribute_key IS NOT NULL
    GROUP BY f.entity_key, f.attribute_key
    HAVING count(*) >= :min_facts
    ORDER BY max(f.valid_from) DESC, f.entity_key, f.attribute_key
    """
)

_DISTILLED_SQL = text(
    "SELECT id, title, supporting_fact_ids, is_active FROM memory_meta_observations "
    "WHERE agent_id = :agent AND observation_type = :type"
)

_GROUP_FACTS_SQL = text(
    """
    SELECT id, fact_text, attribute_key, valid_from FROM memory_facts
    WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[])) AND valid_to IS NULL
    ORDER BY valid_from DESC, id
    LIMIT :limit
    """
)

_INSERT_OBSERVATION_SQL = text(
    """
    INSERT INTO memory_meta_observations (id, agent_id, observation_type, title, text, supporting_fact_ids,
        confidence, is_active, embedding_vec, first_detected_at, last_reinforced_at)
    VALUES (:id, :agent, :type, :title, :text, CAST(:facts AS jsonb), :confidence, :active,
        CAST(:vec AS vector), :now, :now)
    """
)

_UPDATE_OBSERVATION_SQL = text(
    """
    UPDATE memory_meta_observations SET text = :text, supporting_fact_ids = CAST(:facts AS jsonb),
        is_active = :active, embedding_vec = CAST(:vec AS vector), last_reinforced_at = :now,
        times_reinforced = times_reinforced + 1
    WHERE agent_id = :agent AND id = :id
    """
)

_RETIRE_SQL = text(
    "UPDATE memory_meta_observations SET is_active = false "
    "WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[])) AND is_active"
)

# Confidence of a distilled observation: a generalisation is less certain than its facts (ours).
DISTILLED_CONFIDENCE = 0.7


def _json_ids(ids: list[str]) -> str:
    return "[" + ",".join(f'"{fact_id}"' for fact_id in ids) + "]"


def _distill(context: MaintenanceContext, agent_id: str) -> dict[str, Any]:
    with context.sessions.begin() as session:
        groups = [
            _Group(str(row.entity_key), str(row.entity_name), str(row.attribute_key), list(row.fact_ids))
            for row in session.execute(_EPISODIC_GROUPS_SQL, {"agent": agent_id, "min_facts": DISTILL_MIN_FACTS})
        ]
        existing = {
            str(row.title): row for row in session.execute(_DISTILLED_SQL, {"agent": agent_id, "type": DISTILLED_TYPE})
        }
    titles = {group.title for group in groups}
    retired = [str(row.id) for title, row in existing.items() if title not in titles and row.is_active]
    due = [
        group
        for group in groups
        if group.title not in existing or sorted(existing[group.title].supporting_fact_ids or []) != group.fact_ids
    ]
    tally = SkillTally()
    created = updated = 0
    for group in due[:MAX_DISTILL_GROUPS]:
        with context.sessions.begin() as session:
            rows = session.execute(
                _GROUP_FACTS_SQL, {"agent": agent_id, "ids": group.fact_ids, "limit": DISTILL_MAX_FACTS}
            ).all()
        facts = [
            FactLine(
                fact_id=str(row.id), text=row.fact_text, attribute_key=row.attribute_key, valid_from=row.valid_from
            )
            for row in rows
        ]
        outcome = context.skills.distill.run(DistillInput(entity_name=group.entity_name, facts=facts))
        tally.add(outcome)
        statements = [" ".join(item.text.split()) for item in outcome.output.statements if item.text.strip()]
        body = " ".join(statements)
        vector = context.embedder.embed_one(body) if body else None
        params = {
            "agent": agent_id,
            "type": DISTILLED_TYPE,
            "title": group.title,
            "text": body,
            "facts": _json_ids(group.fact_ids),
            "confidence": DISTILLED_CONFIDENCE,
            "active": bool(body),
            "vec": vector_param(vector),
            "now": context.now(),
        }
        with context.sessions.begin() as session:
            previous = existing.get(group.title)
            if previous is None:
                session.execute(_INSERT_OBSERVATION_SQL, {**params, "id": str(uuid.uuid4())})
                created += 1
            else:
                session.execute(_UPDATE_OBSERVATION_SQL, {**params, "id": str(previous.id)})
                updated += 1
    if retired:
        with context.sessions.begin() as session:
            session.execute(_RETIRE_SQL, {"agent": agent_id, "ids": retired})
    return {
        "distill_groups_due": len(due),
        "observations_created": created,
        "observations_updated": updated,
        "observations_retired": len(retired),
        **tally.as_result(),
    }


def run(context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> dict[str, Any]:
    """Vitality and stale marking, then merges, then distillation, for ``agent_id``.

    Vitality is scored again after the merges, so the kept facts' absorbed reinforcements and
    retrievals count at once. Result: the seeds' ``facts_scored``, ``facts_marked_stale`` and
    ``merges_executed``, plus ``facts_unmarked_stale``, ``stale_facts``, ``facts_merged``,
    ``merges`` ([kept, closed...] id lists), the distillation counts and the skill accounting.
    """
    with context.sessions.begin() as session:
        vitality = _score_vitality(session, agent_id, config, context.now())
    merged = _merge_duplicates(context, agent_id, config)
    if merged["merges_executed"]:
        with context.sessions.begin() as session:
            rescored = _score_vitality(session, agent_id, config, context.now())
        vitality["facts_unmarked_stale"] += rescored["facts_unmarked_stale"]
        vitality["facts_marked_stale"] += rescored["facts_marked_stale"]
        vitality["stale_facts"] = rescored["stale_facts"]
        vitality["facts_scored"] = rescored["facts_scored"]
    distilled = _distill(context, agent_id)
    return {**vitality, **merged, **distilled}

"""Managing memory directly (seeds M1, "Passo 6: Gerenciando Fatos"): get, list and delete facts, list entities.

Every statement is scoped by ``agent_id``: an id that belongs to another agent behaves exactly
like one that does not exist. The functions take a session and never commit: the caller owns the
transaction (``with ctx.sessions.begin() as session: delete_fact(session, ...)``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.read.entities import resolve_entity_filter
from memory_core.read.schemas import EntityDetail, EntityProfile, EntityRelationship, FactDetail

__all__ = ["delete_all_facts", "delete_fact", "get_entity", "get_fact", "list_entities", "list_facts"]

# ``u``: the fact's retrieval counters (memory_fact_usage; a fact never retrieved has no row there).
_FACT_COLUMNS = """
    f.id, f.entity_key, COALESCE(f.entity_name, e.display_name) AS entity_name,
    COALESCE(f.entity_type, e.entity_type) AS entity_type, f.attribute_key, f.fact_text, f.confidence,
    f.importance, f.speaker, f.source_event_id, f.supersedes_fact_id, f.valid_from, f.valid_to,
    f.invalidated_at, f.reinforcement_count, COALESCE(u.times_retrieved, 0) AS times_retrieved,
    u.last_retrieved_at, f.source_context, f.created_at
"""


_GET_SQL = """
SELECT {columns} FROM memory_facts f
LEFT JOIN memory_entities e ON e.agent_id = f.agent_id AND e.canonical_key = f.entity_key
LEFT JOIN memory_fact_usage u ON u.fact_id = f.id
WHERE f.agent_id = :agent AND f.id = :id
"""

# {scope} is empty or the fixed entity-filter condition below; values are always bound.
_COUNT_ACTIVE_SQL = "SELECT count(*) FROM memory_facts f WHERE f.agent_id = :agent AND f.valid_to IS NULL {scope}"

_LIST_SQL = """
SELECT {columns} FROM memory_facts f
LEFT JOIN memory_entities e ON e.agent_id = f.agent_id AND e.canonical_key = f.entity_key
LEFT JOIN memory_fact_usage u ON u.fact_id = f.id
WHERE f.agent_id = :agent AND f.valid_to IS NULL {scope}
ORDER BY f.created_at DESC, f.valid_from DESC, f.id
LIMIT :limit OFFSET :offset
"""

_ENTITY_SCOPE = """
AND (f.entity_key = ANY(CAST(:keys AS text[])) OR f.id IN (
    SELECT l.fact_id FROM memory_fact_entity_links l
    WHERE l.agent_id = :agent AND l.entity_key = ANY(CAST(:keys AS text[]))))
"""


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        return None


def _optional_str(value: Any) -> str | None:
    return str(value) if value is not None else None


def _fact_detail(row: Any) -> FactDetail:
    return FactDetail(
        fact_id=str(row.id),
        entity_key=str(row.entity_key),
        entity_name=row.entity_name,
        entity_type=row.entity_type,
        attribute_key=row.attribute_key,
        fact_text=str(row.fact_text),
        confidence=float(row.confidence),
        importance=float(row.importance),
        speaker=row.speaker,
        source_event_id=_optional_str(row.source_event_id),
        supersedes_fact_id=_optional_str(row.supersedes_fact_id),
        valid_from=row.valid_from,
        valid_to=row.valid_to,
        invalidated_at=row.invalidated_at,
        is_active=row.valid_to is None,
        reinforcement_count=int(row.reinforcement_count or 0),
        times_retrieved=int(row.times_retrieved or 0),
        last_retrieved_at=row.last_retrieved_at,
        source_context=row.source_context,
        created_at=row.created_at,
    )


def get_fact(session: Session, agent_id: str, fact_id: str) -> FactDetail | None:
    """The fact with this id, active or not (superseded and deleted-by-reconciliation facts too)."""
    parsed = _uuid(fact_id)
    if parsed is None:
        return None
    row = session.execute(
        text(_GET_SQL.format(columns=_FACT_COLUMNS)),
        {"agent": agent_id, "id": parsed},
    ).first()
    return _fact_detail(row) if row is not None else None


def list_facts(
    session: Session,
    agent_id: str,
    *,
    limit: int = 50,
    offset: int = 0,
    entity_keys: Sequence[str] | None = None,
) -> tuple[list[FactDetail], int]:
    """Active facts, newest first, and how many there are in total.

    ``entity_keys`` (canonical keys or aliases) keeps facts linked to any of them (OR); keys that
    resolve to nothing are ignored (use :func:`~memory_core.read.entities.resolve_entity_filter`
    for the warnings), and when none resolves the page is empty.
    """
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset must not be negative")
    params: dict[str, Any] = {"agent": agent_id, "limit": limit, "offset": offset}
    scope = ""
    if entity_keys:
        resolved = resolve_entity_filter(session, agent_id, entity_keys)
        if not resolved.keys:
            return [], 0
        params["keys"] = resolved.keys
        scope = _ENTITY_SCOPE
    total = int(
        session.execute(
            text(_COUNT_ACTIVE_SQL.format(scope=scope)),
            params,
        ).scalar_one()
    )
    if total == 0 or offset >= total or limit == 0:
        return [], total
    rows = session.execute(
        text(_LIST_SQL.format(columns=_FACT_COLUMNS, scope=scope)),
        params,
    ).all()
    return [_fact_detail(row) for row in rows], total


_REFRESH_COUNTS = text(
    """
    UPDATE memory_entities e SET fact_count = (
        SELECT count(*) FROM memory_fact_entity_links l JOIN memory_facts f ON f.id = l.fact_id
        WHERE l.agent_id = e.agent_id AND l.entity_key = e.canonical_key AND f.valid_to IS NULL
    )
    WHERE e.agent_id = :agent AND e.canonical_key = ANY(CAST(:keys AS text[]))
    """
)


def delete_fact(session: Session, agent_id: str, fact_id: str) -> bool:
    """Hard-delete one fact; ``True`` when it existed for this agent.

    Its entity links and retrieval counters go with it (``ON DELETE CASCADE``); relationships it
    was the evidence of, and facts that superseded it, keep existing without the reference
    (``ON DELETE SET NULL``). The ``fact_count`` of the entities it was linked to is recomputed.
    """
    parsed = _uuid(fact_id)
    if parsed is None:
        return False
    keys = [
        str(key)
        for key in session.execute(
            text(
                "SELECT entity_key FROM memory_fact_entity_links WHERE agent_id = :agent AND fact_id = :id "
                "UNION SELECT entity_key FROM memory_facts WHERE agent_id = :agent AND id = :id"
            ),
            {"agent": agent_id, "id": parsed},
        ).scalars()
    ]
    deleted = session.execute(
        text("DELETE FROM memory_facts WHERE agent_id = :agent AND id = :id RETURNING id"),
        {"agent": agent_id, "id": parsed},
    ).first()
    if deleted is None:
        return False
    if keys:
        session.execute(_REFRESH_COUNTS, {"agent": agent_id, "keys": keys})
    return True


def delete_all_facts(session: Session, agent_id: str) -> int:
    """Hard-delete every fact of the agent (a reset); return how many were deleted. Entities stay, with 0 facts."""
    count = int(
        session.execute(
            text(
                "WITH gone AS (DELETE FROM memory_facts WHERE agent_id = :agent RETURNING 1) SELECT count(*) FROM gone"
            ),
            {"agent": agent_id},
        ).scalar_one()
    )
    session.execute(
        text("UPDATE memory_entities SET fact_count = 0 WHERE agent_id = :agent AND fact_count <> 0"),
        {"agent": agent_id},
    )
    return count


def list_entities(
    session: Session, agent_id: str, *, limit: int = 50, offset: int = 0
) -> tuple[list[EntityDetail], int]:
    """Active entities, most recently seen first, with fact count, summary, importance and profile."""
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset must not be negative")
    params = {"agent": agent_id, "limit": limit, "offset": offset}
    total = int(
        session.execute(
            text("SELECT count(*) FROM memory_entities WHERE agent_id = :agent AND is_active"), params
        ).scalar_one()
    )
    if total == 0 or offset >= total or limit == 0:
        return [], total
    rows = session.execute(
        text(
            "SELECT id, canonical_key, display_name, entity_type, summary_text, fact_count, importance_score, "
            "first_seen_at, last_seen_at, profile_text FROM memory_entities "
            "WHERE agent_id = :agent AND is_active "
            "ORDER BY last_seen_at DESC, canonical_key LIMIT :limit OFFSET :offset"
        ),
        params,
    ).all()
    return [EntityDetail(**_entity_fields(row)) for row in rows], total


def _entity_fields(row: Any) -> dict[str, Any]:
    return {
        "entity_id": str(row.id),
        "canonical_key": str(row.canonical_key),
        "display_name": row.display_name,
        "entity_type": str(row.entity_type),
        "summary_text": row.summary_text,
        "fact_count": int(row.fact_count or 0),
        "importance_score": float(row.importance_score) if row.importance_score is not None else None,
        "first_seen_at": row.first_seen_at,
        "last_seen_at": row.last_seen_at,
        "profile_text": row.profile_text,
    }


# A profile lists the strongest edges only: a hub entity can have thousands.
MAX_PROFILE_RELATIONSHIPS = 50

_ENTITY_SQL = """
SELECT id, canonical_key, display_name, entity_type, summary_text, fact_count, importance_score,
       first_seen_at, last_seen_at, profile_text
FROM memory_entities WHERE agent_id = :agent AND canonical_key = :key AND is_active
"""

_ALIASES_SQL = """
SELECT alias FROM memory_entity_aliases WHERE agent_id = :agent AND canonical_entity_key = :key ORDER BY alias
"""

_RELATIONSHIPS_SQL = """
SELECT source_entity_key, target_entity_key, rel_type, strength, valid_from
FROM memory_entity_relationships
WHERE agent_id = :agent AND (source_entity_key = :key OR target_entity_key = :key) AND valid_to IS NULL
ORDER BY strength DESC, valid_from DESC, id LIMIT :limit
"""


def get_entity(session: Session, agent_id: str, key_or_alias: str) -> EntityProfile | None:
    """One active entity by canonical key or alias (``person:ana``, ``Ana``), with aliases and relationships.

    None when nothing of the agent's resolves to it. A name shared by several entities resolves
    to the one the query resolution ranks first.
    """
    keys = [key_or_alias, *resolve_entity_filter(session, agent_id, [key_or_alias]).keys]
    for key in dict.fromkeys(keys):
        row = session.execute(text(_ENTITY_SQL), {"agent": agent_id, "key": key}).first()
        if row is not None:
            break
    else:
        return None
    params = {"agent": agent_id, "key": str(row.canonical_key), "limit": MAX_PROFILE_RELATIONSHIPS}
    aliases = [str(alias) for alias in session.execute(text(_ALIASES_SQL), params).scalars()]
    relationships = [
        EntityRelationship(
            source_entity_key=str(edge.source_entity_key),
            target_entity_key=str(edge.target_entity_key),
            rel_type=str(edge.rel_type),
            strength=float(edge.strength),
            valid_from=edge.valid_from,
        )
        for edge in session.execute(text(_RELATIONSHIPS_SQL), params)
    ]
    return EntityProfile(**_entity_fields(row), aliases=aliases, relationships=relationships)

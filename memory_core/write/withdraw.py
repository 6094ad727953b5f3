"""Withdraw what one processed message did to memory, before it is processed again from scratch.

Re-processing a done event (``POST /v1/events/{event_id}/retry`` with ``from_scratch``) must
not leave the old extraction's facts behind, nor let the new extraction find them and count
them as a repetition (a NOOP reinforcing the message's own fact). So, in the re-drive's
transaction and under the agent's lock, the message's recorded result is undone:

* facts it wrote that no other message repeated since are deleted (their links and usage go
  with them); those another message repeated stay, one repetition fewer (the others said it);
* facts it only repeated (NOOP) lose that repetition;
* facts it closed (an update's predecessor, a delete) are reopened when they are still closed
  at the message's time and nothing newer replaced them, and so are the relationships their
  closing ended;
* the fact counts of the entities these facts name are recomputed.

Entities, aliases and relationship strengths the message added stay (they are what other
messages may rely on too). Re-deriving an agent's whole memory exactly is what a re-process
does (:mod:`memory_core.maintenance.reprocess`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.config import MemoryConfig
from memory_core.write.schemas import WriteResult
from memory_core.write.upsert import RELATIONSHIP_REINFORCEMENT, refresh_entity_counts

__all__ = ["Withdrawn", "withdraw_result"]


@dataclass(frozen=True)
class Withdrawn:
    """What withdrawing a message changed."""

    deleted: int
    kept_repeated: int
    unreinforced: int
    reopened: int


def _count(result: Any) -> int:
    """Rows a DML statement touched."""
    return int(getattr(result, "rowcount", 0) or 0)


def _ids(values: list[str | None]) -> list[str]:
    found: list[str] = []
    for value in values:
        try:
            found.append(str(uuid.UUID(str(value))))
        except ValueError:
            continue
    return list(dict.fromkeys(found))


_EDGES = "unnest(CAST(:sources AS text[]), CAST(:targets AS text[]), CAST(:types AS text[])) AS x(s, t, kind)"
_SAME_EDGE = "r.agent_id = :agent AND r.source_entity_key = x.s AND r.target_entity_key = x.t AND r.rel_type = x.kind"
_DELETE_LONE_EDGES = text(
    f"DELETE FROM memory_entity_relationships r USING {_EDGES} WHERE {_SAME_EDGE} "  # noqa: S608 - constants
    "AND r.evidence_fact_id IS NULL AND r.strength <= :initial + 1e-9"
)
_UNREINFORCE_EDGES = text(
    "UPDATE memory_entity_relationships r SET "  # noqa: S608 - built from the constants above
    f"strength = GREATEST(r.strength - :step, :initial), updated_at = now() FROM {_EDGES} WHERE {_SAME_EDGE}"
)


def _withdraw_edges(session: Session, agent_id: str, written: WriteResult, config: MemoryConfig) -> None:
    """The message's relationships lose its reinforcement; one it alone created (its evidence deleted
    with the message's facts, never repeated) goes."""
    edges = sorted(
        {
            (str(edge.get("source")), str(edge.get("target")), str(edge.get("rel_type")))
            for edge in written.relationships
            if edge.get("source") and edge.get("target") and edge.get("rel_type")
        }
    )
    if not edges:
        return
    params = {
        "agent": agent_id,
        "sources": [edge[0] for edge in edges],
        "targets": [edge[1] for edge in edges],
        "types": [edge[2] for edge in edges],
        "initial": config.relationship_initial_strength,
        "step": RELATIONSHIP_REINFORCEMENT,
    }
    session.execute(_DELETE_LONE_EDGES, params)
    session.execute(_UNREINFORCE_EDGES, params)


def withdraw_result(
    session: Session,
    agent_id: str,
    occurred_at: datetime,
    result: dict[str, Any] | None,
    config: MemoryConfig | None = None,
) -> Withdrawn:
    """Undo ``result`` (the message's stored write result) in the caller's transaction.

    ``config`` is the agent's effective config (the seeds' defaults when not given).

    The caller holds the run row's lock and the agent's lock (the apply step's order).
    """
    if not result:
        return Withdrawn(0, 0, 0, 0)
    written = WriteResult.model_validate(result)
    created = _ids([change.fact_id for change in [*written.facts_added, *written.facts_updated]])
    repeated = [
        fact_id for fact_id in _ids([change.fact_id for change in written.facts_unchanged]) if fact_id not in created
    ]
    closed = _ids(
        [change.supersedes_fact_id for change in written.facts_updated]
        + [change.fact_id for change in written.facts_deleted]
    )
    params = {"agent": agent_id, "created": created, "repeated": repeated, "closed": closed, "at": occurred_at}
    entity_keys = set(
        session.execute(
            text(
                "SELECT DISTINCT entity_key FROM memory_fact_entity_links WHERE agent_id = :agent "
                "AND fact_id = ANY(CAST(:facts AS uuid[]))"
            ),
            {"agent": agent_id, "facts": [*created, *repeated, *closed]},
        ).scalars()
    )
    unreinforced = _count(
        session.execute(
            text(
                "UPDATE memory_facts SET reinforcement_count = GREATEST(reinforcement_count - 1, 0) "
                "WHERE agent_id = :agent AND id = ANY(CAST(:repeated AS uuid[]))"
            ),
            params,
        )
    )
    # Deleted first, so that a fact repeated once is then decremented and kept, not deleted too.
    deleted = _count(
        session.execute(
            text(
                "DELETE FROM memory_facts WHERE agent_id = :agent AND id = ANY(CAST(:created AS uuid[])) "
                "AND reinforcement_count = 0"
            ),
            params,
        )
    )
    kept = _count(
        session.execute(
            text(
                "UPDATE memory_facts SET reinforcement_count = reinforcement_count - 1 "
                "WHERE agent_id = :agent AND id = ANY(CAST(:created AS uuid[])) AND reinforcement_count > 0"
            ),
            params,
        )
    )
    reopened = _count(
        session.execute(
            text(
                """
                UPDATE memory_facts f SET valid_to = NULL, invalidated_at = NULL
                WHERE f.agent_id = :agent AND f.id = ANY(CAST(:closed AS uuid[])) AND f.valid_to = :at
                  AND NOT EXISTS (SELECT 1 FROM memory_facts g
                                  WHERE g.agent_id = :agent AND g.supersedes_fact_id = f.id AND g.id <> f.id)
                """
            ),
            params,
        )
    )
    session.execute(
        text(
            "UPDATE memory_entity_relationships SET valid_to = NULL, invalidated_at = NULL, updated_at = now() "
            "WHERE agent_id = :agent AND evidence_fact_id = ANY(CAST(:closed AS uuid[])) AND valid_to = :at "
            "AND EXISTS (SELECT 1 FROM memory_facts f WHERE f.id = evidence_fact_id AND f.valid_to IS NULL)"
        ),
        params,
    )
    _withdraw_edges(session, agent_id, written, config or MemoryConfig())
    refresh_entity_counts(session, agent_id, entity_keys)
    return Withdrawn(deleted, kept, unreinforced, reopened)

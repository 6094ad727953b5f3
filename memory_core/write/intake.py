"""Accepting messages: the immutable event and its pipeline run, written in one transaction.

The API calls this before it answers ``202``; enqueueing happens after the commit, so a
task never looks for an event that is not there yet. A ``message_id`` already known for the
agent returns the existing event and creates nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import insert, select, text, update
from sqlalchemy.orm import Session

from memory_core.db.models import Import, MemoryEvent, PipelineRun


@dataclass(frozen=True)
class IncomingMessage:
    """A validated message to store (the API has already checked every field)."""

    message: str
    speaker_name: str
    session_id: str = "default"
    occurred_at: datetime | None = None
    message_id: str | None = None
    source: str = "api"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AcceptedMessage:
    """The event a message became; ``created`` is False when its message_id was already known."""

    event_id: uuid.UUID
    created: bool
    status: str


_INSERT_EVENTS_AND_RUNS = text(
    """
    WITH incoming AS (
        SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x(
            id uuid, agent_id text, text text, speaker text, session_id text, message_id text,
            import_id uuid, source text, occurred_at timestamptz, options jsonb, position integer
        )
    ), events AS (
        INSERT INTO memory_events (id, agent_id, text, speaker, session_id, message_id, import_id, source, occurred_at)
        SELECT id, agent_id, text, speaker, session_id, message_id, import_id, source, occurred_at FROM incoming
        ORDER BY position
        ON CONFLICT (agent_id, message_id) DO NOTHING
        RETURNING id
    ), runs AS (
        INSERT INTO pipeline_runs (event_id, agent_id, import_id, status, options)
        SELECT incoming.id, incoming.agent_id, incoming.import_id, 'received', COALESCE(incoming.options, '{}'::jsonb)
        FROM incoming JOIN events ON events.id = incoming.id
    )
    SELECT id FROM events
    """
)


def accept_messages(
    session: Session,
    agent_id: str,
    messages: Sequence[IncomingMessage],
    *,
    import_id: uuid.UUID | None = None,
) -> list[AcceptedMessage]:
    """Insert events and runs for ``messages`` of one agent (in the caller's transaction), in input order.

    The events and runs are inserted by one statement, so a session in autocommit mode gets
    the same all-or-nothing insert without a transaction around it.
    """
    return accept_agent_messages(session, [(agent_id, message) for message in messages], import_id=import_id)


def accept_agent_messages(
    session: Session,
    items: Sequence[tuple[str, IncomingMessage]],
    *,
    import_id: uuid.UUID | None = None,
) -> list[AcceptedMessage]:
    """Insert events and runs for ``(agent_id, message)`` pairs of any agents, in input order.

    One statement for all of them (the API writes the single messages of concurrent requests
    together, :mod:`api.event_writer`). A ``message_id`` already known for its agent, or sent
    twice among ``items``, keeps the first event: the later ones return it and create nothing.
    """
    now = datetime.now(UTC)
    planned: list[tuple[uuid.UUID, str, IncomingMessage]] = [
        (uuid.uuid4(), agent_id, message) for agent_id, message in items
    ]
    inserted: set[uuid.UUID] = set()
    if planned:
        rows = [
            {
                "id": str(event_id),
                "agent_id": agent_id,
                "text": message.message,
                "speaker": message.speaker_name,
                "session_id": message.session_id,
                "message_id": message.message_id,
                "import_id": str(import_id) if import_id else None,
                "source": message.source,
                "occurred_at": (message.occurred_at or now).isoformat(),
                "options": message.options,
                "position": position,
            }
            for position, (event_id, agent_id, message) in enumerate(planned)
        ]
        # One cached statement and one round trip, whatever the batch size: events and their
        # runs are inserted together; a known (agent_id, message_id) inserts neither. Rows are
        # inserted in input order, so each takes its seq (column default) in the order sent.
        inserted = set(session.execute(_INSERT_EVENTS_AND_RUNS, {"rows": orjson.dumps(rows).decode()}).scalars())

    duplicates = {(agent_id, message.message_id) for event_id, agent_id, message in planned if event_id not in inserted}
    known: dict[tuple[str, str], tuple[uuid.UUID, str]] = {}
    if duplicates:
        found = session.execute(
            select(MemoryEvent.agent_id, MemoryEvent.message_id, MemoryEvent.id, PipelineRun.status)
            .join(PipelineRun, PipelineRun.event_id == MemoryEvent.id, isouter=True)
            .where(
                MemoryEvent.agent_id.in_(sorted({agent_id for agent_id, _ in duplicates})),
                MemoryEvent.message_id.in_(sorted({str(message_id) for _, message_id in duplicates})),
            )
        ).all()
        known = {
            (agent_id, message_id): (event_id, status or "received")
            for agent_id, message_id, event_id, status in found
            if message_id and (agent_id, message_id) in duplicates
        }

    accepted: list[AcceptedMessage] = []
    for event_id, agent_id, message in planned:
        if event_id in inserted:
            accepted.append(AcceptedMessage(event_id=event_id, created=True, status="received"))
        else:
            assert message.message_id is not None, "only a known message_id can make an insert a no-op"
            existing_id, status = known[(agent_id, message.message_id)]
            accepted.append(AcceptedMessage(event_id=existing_id, created=False, status=status))
    return accepted


def create_import(session: Session, agent_id: str, source: str) -> uuid.UUID:
    """Record a batch import (counts filled by :func:`finish_import_intake`)."""
    import_id = uuid.uuid4()
    session.execute(insert(Import).values(id=import_id, agent_id=agent_id, total=0, source=source))
    return import_id


def finish_import_intake(session: Session, import_id: uuid.UUID, accepted: Sequence[AcceptedMessage]) -> None:
    """Set the import's total to the events it created; already-known message ids count as duplicates.

    Progress is counted from the runs of the events this import created, so re-sending a file
    whose messages are all known yields an import that is done at once with nothing new.
    """
    created = sum(1 for item in accepted if item.created)
    session.execute(
        update(Import).where(Import.id == import_id).values(total=created, duplicates=len(accepted) - created)
    )

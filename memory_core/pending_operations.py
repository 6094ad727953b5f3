"""Pending operations: a destructive operation awaiting the user's confirmation (seeds' save/get/clear_pending).

An agent that found several candidates for "delete my dentist appointment" (a *selection*) or
was stopped before running a destructive tool call (an *execution*) keeps what it was about to
do, and the text it asked the user to confirm, until the user answers. One pending operation
per agent: saving replaces the previous one. It lives ``pending_operation_ttl_minutes`` (5 by
default): an expired one reads as absent and is deleted on the next read or save.

The seeds keep it in the SDK's process memory (lost on restart); a service with several API
processes keeps it in PostgreSQL (``memory_pending_operations``) so any of them answers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel
from sqlalchemy.orm import Session

from memory_core.config import MemoryConfig
from memory_core.db.statements import sql

__all__ = ["PendingKind", "PendingOperation", "clear_pending", "get_pending", "save_pending"]

PendingKind = Literal["selection", "execution"]


class PendingOperation(BaseModel):
    """A pending operation as stored: its kind, its payload, the confirmation text and when it expires."""

    kind: PendingKind
    payload: dict[str, Any]
    confirmation_text: str
    created_at: datetime
    expires_at: datetime


_SAVE = sql(
    "INSERT INTO memory_pending_operations (agent_id, kind, payload, confirmation_text, created_at, expires_at) "
    "VALUES (:agent, :kind, CAST(:payload AS jsonb), :text, now(), now() + make_interval(mins => :ttl)) "
    "ON CONFLICT (agent_id) DO UPDATE SET kind = EXCLUDED.kind, payload = EXCLUDED.payload, "
    "confirmation_text = EXCLUDED.confirmation_text, created_at = EXCLUDED.created_at, "
    "expires_at = EXCLUDED.expires_at "
    "RETURNING kind, payload, confirmation_text, created_at, expires_at"
)
_GET = sql(
    "SELECT kind, payload, confirmation_text, created_at, expires_at FROM memory_pending_operations "
    "WHERE agent_id = :agent AND expires_at > now()"
)
_DROP_EXPIRED = sql("DELETE FROM memory_pending_operations WHERE agent_id = :agent AND expires_at <= now()")
_CLEAR = sql("DELETE FROM memory_pending_operations WHERE agent_id = :agent")


def _operation(row: Any) -> PendingOperation:
    return PendingOperation(
        kind=row.kind,
        payload=dict(row.payload or {}),
        confirmation_text=row.confirmation_text,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


def save_pending(
    session: Session,
    agent_id: str,
    *,
    kind: PendingKind,
    payload: dict[str, Any],
    confirmation_text: str,
    config: MemoryConfig,
) -> PendingOperation:
    """Store ``agent_id``'s pending operation (replacing any) for ``pending_operation_ttl_minutes``.

    In the caller's transaction.
    """
    row = session.execute(
        _SAVE,
        {
            "agent": agent_id,
            "kind": kind,
            "payload": orjson.dumps(payload).decode(),
            "text": confirmation_text,
            "ttl": config.pending_operation_ttl_minutes,
        },
    ).one()
    return _operation(row)


def get_pending(session: Session, agent_id: str) -> PendingOperation | None:
    """``agent_id``'s pending operation if one exists and has not expired (an expired one is deleted)."""
    row = session.execute(_GET, {"agent": agent_id}).one_or_none()
    if row is None:
        session.execute(_DROP_EXPIRED, {"agent": agent_id})
        return None
    return _operation(row)


def clear_pending(session: Session, agent_id: str) -> bool:
    """Remove ``agent_id``'s pending operation (after it ran or was cancelled); whether there was one."""
    result = session.execute(_CLEAR, {"agent": agent_id})
    return bool(getattr(result, "rowcount", 0))

"""``POST /v1/agents/{agent_id}/events/lookup``: the events behind a list of message ids.

An importer that re-sends a file needs to know what became of messages it sent before (they
come back as ``duplicates`` and are not part of the new import), and which ones failed and
why. This read answers both: for each of up to 10,000 ``message_id`` values, the agent's event
with its run's status, stage and last error, optionally only those in some statuses.
Message ids the agent does not have are simply absent from the answer.
"""

from __future__ import annotations

from typing import Any, get_args

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from starlette.responses import JSONResponse

from api.auth import READ, require_api_key
from api.dependencies import JsonBody, answer, body_doc, get_state, parse_json
from api.routes.messages import ERROR_RESPONSES, AgentId
from api.run_errors import client_error
from api.schemas import MAX_IMPORT_MESSAGES, ShortText
from memory_core.db.models import MemoryEvent, PipelineRun
from memory_core.write.schemas import RunStatus

# Every status once is all a filter can say.
MAX_STATUSES = len(get_args(RunStatus))

router = APIRouter(tags=["events"], dependencies=[Depends(require_api_key)])


class EventLookupIn(BaseModel):
    """Body of the lookup: message ids, and optionally the statuses to keep."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    message_ids: list[ShortText] = Field(
        min_length=1, max_length=MAX_IMPORT_MESSAGES, description="Up to 10,000 of the agent's message ids."
    )
    # Bounded: each value is a bound parameter, and 100,000 of them broke the driver's limit (a 500).
    status: list[RunStatus] | None = Field(
        None,
        max_length=MAX_STATUSES,
        description=f"Only events whose run is in one of these statuses (at most {MAX_STATUSES}).",
    )


class EventSummary(BaseModel):
    """A message's event and where its processing stands."""

    event_id: str
    message_id: str
    status: str
    stage: str | None
    error: str | None
    import_id: str | None


class EventLookup(BaseModel):
    """The events found, in no particular order."""

    events: list[EventSummary]


_QUERY = select(
    PipelineRun.event_id,
    MemoryEvent.message_id,
    PipelineRun.status,
    PipelineRun.stage,
    PipelineRun.error,
    PipelineRun.import_id,
).join(MemoryEvent, MemoryEvent.id == PipelineRun.event_id)


@router.post(
    "/v1/agents/{agent_id}/events/lookup",
    dependencies=[READ],
    response_model=EventLookup,
    responses=ERROR_RESPONSES,
    openapi_extra=body_doc(EventLookupIn),
    summary="Find the agent's events by message id",
)
def lookup_events(request: Request, agent_id: AgentId, body: JsonBody) -> JSONResponse:
    """Status, stage, last error and import of the events of these message ids (unknown ids are absent)."""
    lookup = parse_json(EventLookupIn, body)
    query = _QUERY.where(
        MemoryEvent.agent_id == agent_id, MemoryEvent.message_id.in_(list(dict.fromkeys(lookup.message_ids)))
    )
    if lookup.status is not None:
        query = query.where(PipelineRun.status.in_(lookup.status))
    with get_state(request).engine.connect() as connection:
        rows = connection.execute(query).all()
    events: list[dict[str, Any]] = [
        {
            "event_id": str(row.event_id),
            "message_id": row.message_id,
            "status": row.status,
            "stage": row.stage,
            "error": client_error(row.error),
            "import_id": str(row.import_id) if row.import_id else None,
        }
        for row in rows
    ]
    return answer(200, {"events": events})

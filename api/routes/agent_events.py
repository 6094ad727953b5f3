"""An agent's messages by processing status, and failed ones re-driven in bulk.

``GET /v1/agents/{agent_id}/events?status=failed`` pages through the agent's events (newest
received first, keyset ``cursor``) with their run's status, stage, attempts and last error;
``POST /v1/agents/{agent_id}/events/retry`` re-drives failed events, a list of them or all,
each from the stage that failed, as ``POST /v1/events/{event_id}/retry`` does for one.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.responses import JSONResponse

from api.auth import ADMIN, READ, require_api_key
from api.dependencies import JsonBody, answer, body_doc, get_state, parse_json
from api.errors import ApiError
from api.routes.messages import ERROR_RESPONSES, AgentId
from api.run_errors import client_error
from api.schemas import MAX_IMPORT_MESSAGES
from memory_core.read.explorer import Cursor, list_agent_events
from memory_core.write.runs import count_failed, redrive_failed
from memory_core.write.schemas import STAGE_INPUT_STATUS

router = APIRouter(tags=["events"], dependencies=[Depends(require_api_key)])

MAX_PAGE = 200
#: Runs re-driven by one request; ``remaining`` tells a client to call again.
MAX_RETRY = MAX_IMPORT_MESSAGES


class AgentEvent(BaseModel):
    """A message and where its processing stands."""

    event_id: str
    status: str
    stage: str | None
    attempts: int
    error: str | None
    speaker: str
    text: str
    occurred_at: str
    created_at: str
    finished_at: str | None
    import_id: str | None


class AgentEventPage(BaseModel):
    """A page of events; ``next_cursor`` (None on the last page) is the ``cursor`` of the next one."""

    events: list[AgentEvent]
    next_cursor: str | None


class BulkRetryIn(BaseModel):
    """Which failed events to re-drive: ``event_ids``, or ``all``."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    event_ids: list[uuid.UUID] | None = Field(
        None, min_length=1, max_length=MAX_RETRY, description="Up to 10,000 of the agent's failed events."
    )
    all: bool = Field(False, description="Every failed event of the agent (10,000 per call; see `remaining`).")

    @model_validator(mode="after")
    def _one_selection(self) -> BulkRetryIn:
        if (self.event_ids is not None) == self.all:
            raise ValueError("give either event_ids or all=true (exactly one)")
        return self


class BulkRetryAccepted(BaseModel):
    """What was re-driven, by the stage each restarts at, and what was not."""

    retried: int
    by_stage: dict[str, int]
    event_ids: list[str]
    not_retried: list[str]
    remaining: int


StatusFilter = Annotated[
    Literal["all", "failed", "pending"],
    Query(description="`failed`, `pending` (not done nor failed) or `all`."),
]


@router.get(
    "/v1/agents/{agent_id}/events",
    dependencies=[READ],
    response_model=AgentEventPage,
    responses=ERROR_RESPONSES,
    summary="The agent's events by status (paged)",
)
def list_events(
    request: Request,
    agent_id: AgentId,
    status: StatusFilter = "all",
    cursor: Annotated[str | None, Query(max_length=200, description="`next_cursor` of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"Events per page (1 to {MAX_PAGE}).")] = 50,
) -> JSONResponse:
    """The agent's events, newest received first, with status, stage, attempts and the last error."""
    before = Cursor.decode(cursor) if cursor else None
    if cursor and (before is None or before.at.tzinfo is None):
        raise ApiError(422, "query cursor: not a cursor this endpoint gave", [("query.cursor", "malformed cursor")])
    with get_state(request).sessions() as session:
        page = list_agent_events(session, agent_id, status=status, before=before, limit=limit)
    events = [
        {
            "event_id": event.event_id,
            "status": event.status,
            "stage": event.stage,
            "attempts": event.attempts,
            "error": client_error(event.error),
            "speaker": event.speaker,
            "text": event.text,
            "occurred_at": event.occurred_at.isoformat(),
            "created_at": event.created_at.isoformat(),
            "finished_at": event.finished_at.isoformat() if event.finished_at else None,
            "import_id": event.import_id,
        }
        for event in page.items
    ]
    return answer(200, {"events": events, "next_cursor": page.next_cursor})


@router.post(
    "/v1/agents/{agent_id}/events/retry",
    dependencies=[ADMIN],
    status_code=202,
    response_model=BulkRetryAccepted,
    responses=ERROR_RESPONSES,
    openapi_extra=body_doc(BulkRetryIn),
    summary="Re-drive the agent's failed events in bulk",
)
def retry_events(request: Request, agent_id: AgentId, body: JsonBody) -> JSONResponse:
    """Run failed events' pipelines again, each from the stage that failed.

    ``{"all": true}`` takes the oldest 10,000 failed events (``remaining`` counts the rest);
    ``{"event_ids": [...]}`` those of the list that are the agent's and failed (the others are
    listed in ``not_retried``).
    """
    selection = parse_json(BulkRetryIn, body)
    state = get_state(request)
    with state.sessions.begin() as session:
        by_stage = redrive_failed(session, agent_id, selection.event_ids, limit=MAX_RETRY)
        remaining = count_failed(session, agent_id)
    retried = [event_id for ids in by_stage.values() for event_id in ids]
    asked = list(dict.fromkeys(selection.event_ids or []))
    done = set(retried)

    def publish() -> None:
        for stage, ids in by_stage.items():
            state.enqueue([str(event_id) for event_id in ids], stage)

    content: dict[str, Any] = {
        "retried": len(retried),
        "by_stage": {stage: len(ids) for stage, ids in by_stage.items()},
        "event_ids": [str(event_id) for event_id in retried],
        "not_retried": [str(event_id) for event_id in asked if event_id not in done],
        "remaining": remaining,
    }
    assert all(stage in STAGE_INPUT_STATUS for stage in by_stage)
    return answer(202, content, then=publish)

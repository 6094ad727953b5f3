"""A message's processing: ``GET /v1/events/{event_id}`` and ``POST /v1/events/{event_id}/retry``."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy import bindparam, select
from starlette.responses import JSONResponse

from api.auth import ADMIN, READ, may_see, require_api_key
from api.dependencies import JsonBody, answer, body_doc, get_state, parse_json
from api.errors import ApiError
from api.routes.agent_config import config_resolver
from api.routes.messages import AgentId
from api.run_errors import client_error
from api.schemas import ErrorBody, EventStatus, RetryAccepted, RetryIn
from memory_core.agent_config import load_agent_overrides
from memory_core.db.models import MemoryEvent, PipelineRun
from memory_core.write.runs import redrive
from memory_core.write.schemas import STAGE_INPUT_STATUS, TERMINAL_STATUSES

router = APIRouter(tags=["events"], dependencies=[Depends(require_api_key)])

_EVENT_QUERY = (
    select(
        PipelineRun.event_id,
        PipelineRun.agent_id,
        PipelineRun.status,
        PipelineRun.stage,
        PipelineRun.attempts,
        PipelineRun.throttled_retries,
        PipelineRun.error,
        PipelineRun.result,
        PipelineRun.import_id,
        PipelineRun.created_at,
        PipelineRun.finished_at,
        MemoryEvent.occurred_at,
        MemoryEvent.message_id,
    )
    .join(MemoryEvent, MemoryEvent.id == PipelineRun.event_id)
    .where(PipelineRun.event_id == bindparam("event_id"))
)

_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    404: {"model": ErrorBody, "description": "no such event"},
    422: {"model": ErrorBody, "description": "malformed event id"},
}


def _not_found(event_id: uuid.UUID) -> ApiError:
    return ApiError(404, f"event {event_id} not found", [("path.event_id", "no such event")])


def _event(request: Request, event_id: uuid.UUID, agent_id: str | None) -> dict[str, Any]:
    with get_state(request).engine.connect() as connection:
        row = connection.execute(_EVENT_QUERY, {"event_id": event_id}).first()
    # Another tenant's event answers exactly as an unknown one (after the same single query).
    if row is None or (agent_id is not None and row.agent_id != agent_id) or not may_see(request, row.agent_id):
        raise _not_found(event_id)
    return {
        "event_id": str(row.event_id),
        "agent_id": row.agent_id,
        "status": row.status,
        "stage": row.stage,
        "attempts": row.attempts,
        "throttled_retries": row.throttled_retries,
        "error": client_error(row.error),
        "occurred_at": row.occurred_at.isoformat(),
        "message_id": row.message_id,
        "import_id": str(row.import_id) if row.import_id else None,
        "created_at": row.created_at.isoformat(),
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
        "result": row.result,
    }


@router.get(
    "/v1/events/{event_id}",
    dependencies=[READ],
    response_model=EventStatus,
    responses=_RESPONSES,
    summary="A message's processing",
)
def get_event(request: Request, event_id: uuid.UUID) -> JSONResponse:
    """Status (``received`` ... ``done`` or ``failed``), the stage reached or failed, attempts, the
    last error, and the write result once done. An event of an agent the key does not cover is a 404."""
    return answer(200, _event(request, event_id, None))


@router.get(
    "/v1/agents/{agent_id}/events/{event_id}",
    dependencies=[READ],
    response_model=EventStatus,
    responses=_RESPONSES,
    summary="A message's processing (agent-scoped)",
)
def get_agent_event(request: Request, agent_id: AgentId, event_id: uuid.UUID) -> JSONResponse:
    """As ``GET /v1/events/{event_id}``, and 404 unless the event belongs to ``agent_id``."""
    return answer(200, _event(request, event_id, agent_id))


@router.post(
    "/v1/events/{event_id}/retry",
    dependencies=[ADMIN],
    status_code=202,
    response_model=RetryAccepted,
    responses={**_RESPONSES, 409: {"model": ErrorBody, "description": "not failed (nor done, with from_scratch)"}},
    openapi_extra={**body_doc(RetryIn), "requestBody": {**body_doc(RetryIn)["requestBody"], "required": False}},
    summary="Re-drive a failed event",
)
def retry_event(request: Request, event_id: uuid.UUID, body: JsonBody) -> JSONResponse:
    """Run a failed event's pipeline again from the stage that failed (earlier outputs are kept).

    ``{"from_scratch": true}`` re-processes a done (or failed) event from the event log, e.g.
    after changing the model. Any other state answers 409.
    """
    options = parse_json(RetryIn, body) if body.strip() else RetryIn()
    state = get_state(request)
    with state.sessions.begin() as session:
        owner = session.execute(select(PipelineRun.agent_id).where(PipelineRun.event_id == event_id)).scalar()
        if owner is None or not may_see(request, owner):
            raise _not_found(event_id)
        config = config_resolver(request).for_agent(load_agent_overrides(session, owner))
        start = redrive(session, event_id, from_scratch=options.from_scratch, config=config)
        if start is None:
            status = session.execute(select(PipelineRun.status).where(PipelineRun.event_id == event_id)).scalar()
            if status is None:
                raise _not_found(event_id)
            raise ApiError(409, _conflict_message(event_id, status, from_scratch=options.from_scratch))
    status = STAGE_INPUT_STATUS[start]
    state.enqueue((str(event_id),), start)
    return answer(202, {"event_id": str(event_id), "status": status, "start_stage": start})


def _conflict_message(event_id: uuid.UUID, status: str, *, from_scratch: bool) -> str:
    if status == "done":
        return (
            f"event {event_id} is done, not failed: only a failed event is retried; "
            'send {"from_scratch": true} to re-process it from the event log'
        )
    if status in TERMINAL_STATUSES:  # pragma: no cover - redrive accepts every other terminal state
        return f"event {event_id} is {status} and cannot be retried"
    detail = " (even from scratch)" if from_scratch else ""
    return (
        f"event {event_id} is still being processed (status {status}): "
        f"it cannot be retried{detail} until it is done or failed"
    )

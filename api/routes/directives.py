"""Procedural memory and pending operations of an agent.

- ``GET /v1/agents/{agent_id}/directives`` (read): the directive block (persona + learned
  directives merged, cached; ``?persona=`` merges one in) and the directives themselves with their
  effective confidence; ``?include_inactive=true`` adds superseded ones.
- ``DELETE /v1/agents/{agent_id}/directives/{directive_id}`` (write): forget one directive; its
  cached blocks go with it. Another agent's directive id is a 404, like an unknown one.
- ``PUT | GET | DELETE /v1/agents/{agent_id}/pending``: the seeds' save/get/clear_pending, one
  pending destructive operation per agent, expiring after ``pending_operation_ttl_minutes``.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import ValidationError
from sqlalchemy.orm import Session
from starlette.responses import JSONResponse

from api.auth import READ, WRITE, require_api_key
from api.dependencies import JsonBody, answer, body_doc, get_state
from api.errors import ApiError, problems_from_pydantic, validation_failed
from api.routes.agent_config import config_resolver
from api.routes.messages import AgentId
from api.schemas import MAX_PERSONA_CHARS, ErrorBody, PendingIn
from memory_core.agent_config import load_agent_overrides
from memory_core.config import MemoryConfig
from memory_core.pending_operations import PendingOperation, clear_pending, get_pending, save_pending
from memory_core.read.directives import delete_directive, directive_block, list_directives

router = APIRouter(tags=["procedural memory"], dependencies=[Depends(require_api_key)])

Persona = Annotated[
    str,
    Query(max_length=MAX_PERSONA_CHARS, description="A persona merged with the directives into the block."),
]
IncludeInactive = Annotated[bool, Query(description="Also list superseded directives.")]

_READ_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    403: {"model": ErrorBody, "description": "the key does not cover the agent"},
    422: {"model": ErrorBody, "description": "bad agent id or query parameter"},
}
_ONE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_READ_RESPONSES,
    404: {"model": ErrorBody, "description": "no such directive for this agent"},
}
_PENDING_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_READ_RESPONSES,
    404: {"model": ErrorBody, "description": "no pending operation (none saved, or it expired)"},
    415: {"model": ErrorBody, "description": "the body is not JSON"},
}


def _agent_config(request: Request, session: Session, agent_id: str) -> MemoryConfig:
    """The config the agent's work runs on: the service's, with the agent's stored overrides."""
    return config_resolver(request).for_agent(load_agent_overrides(session, agent_id))


@router.get(
    "/v1/agents/{agent_id}/directives",
    dependencies=[READ],
    responses=_READ_RESPONSES,
    summary="The agent's directive block and directives",
)
def get_directives(
    request: Request, agent_id: AgentId, persona: Persona = "", include_inactive: IncludeInactive = False
) -> JSONResponse:
    """``{"agent_id", "block": {text, directive_count, cache_hit}, "directives": [...]}``.

    Directives are behavioural instructions learned from the agent's conversations, in English,
    strongest effective confidence first (x0.95 per week since last taught, floor 0.10).
    """
    context = get_state(request).read_context()
    usage = context.usage
    with context.sessions() as session:
        config = _agent_config(request, session, agent_id)
    block = directive_block(
        context.sessions,
        agent_id,
        config,
        composer=context.directive_composer,
        persona=persona,
        report_usage=(lambda skill, spent, failed: usage.record(agent_id, skill, spent, failed=failed))
        if usage is not None
        else None,
    )
    with context.sessions() as session:
        directives = list_directives(session, agent_id, include_inactive=include_inactive)
    return answer(
        200,
        {
            "agent_id": agent_id,
            "block": block.model_dump(mode="json"),
            "directives": [item.model_dump(mode="json") for item in directives],
        },
    )


@router.delete(
    "/v1/agents/{agent_id}/directives/{directive_id}",
    dependencies=[WRITE],
    responses=_ONE_RESPONSES,
    summary="Forget one directive",
)
def delete_one_directive(request: Request, agent_id: AgentId, directive_id: uuid.UUID) -> JSONResponse:
    """Delete the directive for good (``200 {"deleted": 1}``); the agent's cached blocks are invalidated."""
    with get_state(request).sessions.begin() as session:
        if not delete_directive(session, agent_id, directive_id):
            raise ApiError(
                404,
                f"directive {directive_id} not found",
                [("path.directive_id", "no such directive for this agent")],
            )
    return answer(200, {"deleted": 1})


def _pending_body(agent_id: str, operation: PendingOperation) -> dict[str, Any]:
    return {
        "agent_id": agent_id,
        "kind": operation.kind,
        "confirmation_text": operation.confirmation_text,
        **operation.payload,
        "created_at": operation.created_at.isoformat(),
        "expires_at": operation.expires_at.isoformat(),
    }


def _parse_pending(body: bytes) -> PendingIn:
    try:
        payload = PendingIn.model_validate_json(body)
    except ValidationError as error:
        raise validation_failed(problems_from_pydantic(error.errors(include_url=False), ("body",))) from None
    problems: list[tuple[str, str]] = []
    if payload.kind == "selection":
        if payload.intent is None:
            problems.append(("body.intent", "required when kind is selection"))
        if payload.transactions is None:
            problems.append(("body.transactions", "required when kind is selection"))
        for name in ("tool_calls", "search_result"):
            if getattr(payload, name) is not None:
                problems.append((f"body.{name}", "only for kind execution"))
    else:
        if payload.tool_calls is None:
            problems.append(("body.tool_calls", "required when kind is execution"))
        for name in ("intent", "transactions", "edit_params"):
            if getattr(payload, name) is not None:
                problems.append((f"body.{name}", "only for kind selection"))
    if problems:
        raise validation_failed(problems)
    return payload


@router.put(
    "/v1/agents/{agent_id}/pending",
    dependencies=[WRITE],
    responses=_PENDING_RESPONSES,
    openapi_extra=body_doc(PendingIn),
    summary="Save the agent's pending operation",
)
def put_pending(request: Request, agent_id: AgentId, body: JsonBody) -> JSONResponse:
    """Store the operation awaiting confirmation, replacing any; it expires after pending_operation_ttl_minutes."""
    payload = _parse_pending(body)
    state = get_state(request)
    fields = payload.model_dump(exclude={"kind", "confirmation_text"}, exclude_none=True)
    with state.sessions.begin() as session:
        operation = save_pending(
            session,
            agent_id,
            kind=payload.kind,
            payload=fields,
            confirmation_text=payload.confirmation_text,
            config=_agent_config(request, session, agent_id),
        )
    return answer(200, _pending_body(agent_id, operation))


@router.get(
    "/v1/agents/{agent_id}/pending",
    dependencies=[READ],
    responses=_PENDING_RESPONSES,
    summary="The agent's pending operation",
)
def get_pending_operation(request: Request, agent_id: AgentId) -> JSONResponse:
    """The pending operation, or 404 when there is none or it expired."""
    with get_state(request).sessions.begin() as session:
        operation = get_pending(session, agent_id)
    if operation is None:
        raise ApiError(404, f"agent {agent_id} has no pending operation (none saved, or it expired)")
    return answer(200, _pending_body(agent_id, operation))


@router.delete(
    "/v1/agents/{agent_id}/pending",
    dependencies=[WRITE],
    responses=_READ_RESPONSES,
    summary="Clear the agent's pending operation",
)
def delete_pending(request: Request, agent_id: AgentId) -> JSONResponse:
    """Remove the pending operation after it ran or was cancelled: ``{"cleared": true|false}``."""
    with get_state(request).sessions.begin() as session:
        cleared = clear_pending(session, agent_id)
    return answer(200, {"cleared": cleared})

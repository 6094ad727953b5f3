"""Whole-agent operations: ``DELETE /v1/agents/{agent_id}?confirm=true`` erases everything of an agent.

Erasure removes the agent's events and everything derived from them (pipeline runs and stage
outputs, facts, links, entities, aliases, relationships, observations, clusters, job runs, usage
counters, imports...) in one transaction (:mod:`memory_core.maintenance.erasure`), and answers
``200 {"agent_id", "deleted": {table: rows}, "indexes_dropped"}`` with every table, zeros
included, so erasing an agent that has nothing is a 200 of zeros. Without ``confirm=true`` the
answer is ``400`` naming the parameter: nothing can be erased by a stray ``DELETE``. Tasks still
queued for the agent find nothing and end as no-ops; messages accepted afterwards start a fresh
memory.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import JSONResponse

from api.auth import ADMIN, require_api_key
from api.dependencies import answer, get_state
from api.errors import ApiError
from api.routes.messages import AgentId
from api.schemas import AgentErased, ErrorBody
from memory_core.maintenance.erasure import erase_agent

router = APIRouter(tags=["agents"], dependencies=[Depends(require_api_key)])

Confirm = Annotated[bool, Query(description="Must be true: erasing an agent cannot be undone.")]

_ERASE_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "confirm=true is missing"},
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    403: {"model": ErrorBody, "description": "the key does not cover the agent, or lacks the admin permission"},
    422: {"model": ErrorBody, "description": "bad agent id or confirm value"},
}


@router.delete(
    "/v1/agents/{agent_id}",
    dependencies=[ADMIN],
    response_model=AgentErased,
    responses=_ERASE_RESPONSES,
    summary="Erase an agent",
)
def erase(request: Request, agent_id: AgentId, confirm: Confirm = False) -> JSONResponse:
    """Delete every row of the agent and everything derived from its events, for good.

    Needs ``?confirm=true``. Answers the rows deleted per table (zeros included); an agent with
    nothing answers zeros.
    """
    if not confirm:
        raise ApiError(
            400,
            "erasing an agent deletes all of its memory for good: add the query parameter confirm=true",
            [("query.confirm", "must be true to erase the agent")],
        )
    erasure = erase_agent(get_state(request).engine, agent_id)
    return answer(200, {"agent_id": agent_id, "deleted": erasure.deleted, "indexes_dropped": erasure.indexes_dropped})

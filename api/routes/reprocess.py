"""Re-processing an agent: ``POST/GET/DELETE /v1/agents/{agent_id}/reprocess``.

``POST`` re-derives the agent's whole memory from its event log with the skills and embedder
the service runs now, into a hidden generation that replaces the live memory in one
transaction when every message is through (:mod:`memory_core.maintenance.reprocess`);
retrieval answers from the old memory until then. One re-process per agent at a time (409).
``GET`` shows progress (as an import's: total, done, failed, pending), ``DELETE`` cancels:
the new generation is discarded, the live memory untouched.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel
from starlette.responses import JSONResponse

from api.auth import ADMIN, READ, require_api_key
from api.dependencies import answer, get_state
from api.errors import ApiError
from api.routes.messages import AgentId
from api.schemas import ErrorBody
from memory_core.maintenance.reprocess import (
    ReprocessRunningError,
    ReprocessView,
    cancel_reprocess,
    get_reprocess,
    latest_reprocess,
    start_reprocess,
)
from workers.tasks.reprocess import watch_reprocess

logger = logging.getLogger("arandu.api")

router = APIRouter(tags=["agents"], dependencies=[Depends(require_api_key)])


class ReprocessStatus(BaseModel):
    """A re-process and its progress: counts of the messages it re-derives, as an import's."""

    reprocess_id: str
    agent_id: str
    status: str
    total: int
    done: int
    failed: int
    pending: int
    requeued: int
    catch_up_rounds: int
    error: str | None
    created_at: str
    finished_at: str | None


_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    403: {"model": ErrorBody, "description": "the key does not cover the agent, or lacks the permission"},
    422: {"model": ErrorBody, "description": "bad agent id or re-process id"},
}


def view_answer(view: ReprocessView) -> dict[str, Any]:
    """The JSON of a re-process."""
    return {
        "reprocess_id": str(view.reprocess_id),
        "agent_id": view.agent_id,
        "status": view.status,
        "total": view.total,
        "done": view.done,
        "failed": view.failed,
        "pending": view.pending,
        "requeued": view.requeued,
        "catch_up_rounds": view.catch_up_rounds,
        "error": view.error,
        "created_at": view.created_at.isoformat(),
        "finished_at": view.finished_at.isoformat() if view.finished_at else None,
    }


@router.post(
    "/v1/agents/{agent_id}/reprocess",
    dependencies=[ADMIN],
    status_code=202,
    response_model=ReprocessStatus,
    responses={**_RESPONSES, 409: {"model": ErrorBody, "description": "a re-process of the agent is running"}},
    summary="Re-process the agent's whole memory from its event log",
)
def post_reprocess(request: Request, agent_id: AgentId) -> JSONResponse:
    """Re-derive every fact, entity and relationship of the agent from its messages, with the
    current skills and embedder, as a fresh import of the same messages would; switch to the
    result at once when done. Messages sent meanwhile are kept. Follow it with ``GET``.
    """
    state = get_state(request)
    try:
        with state.sessions.begin() as session:
            view, queued = start_reprocess(session, agent_id)
    except ReprocessRunningError as running:
        raise ApiError(
            409,
            f"agent {agent_id} is being re-processed already (re-process {running.running}): "
            "wait for it, or cancel it with DELETE /v1/agents/{agent_id}/reprocess",
            [("path.agent_id", "a re-process of this agent is running")],
        ) from running

    def publish() -> None:
        state.enqueue(queued)
        try:
            watch_reprocess(state.celery, view.reprocess_id)
        except Exception as error:
            # Beat's sweeper watches a re-process nobody looked at (ARANDU_PIPELINE_STALE_AFTER_S).
            logger.warning(
                "could not publish the watcher of re-process %s (%s: %s)",
                view.reprocess_id,
                type(error).__name__,
                error,
            )

    return answer(202, view_answer(view), then=publish)


_NOT_FOUND: dict[int | str, dict[str, Any]] = {**_RESPONSES, 404: {"model": ErrorBody, "description": "no re-process"}}


@router.get(
    "/v1/agents/{agent_id}/reprocess",
    dependencies=[READ],
    response_model=ReprocessStatus,
    responses=_NOT_FOUND,
    summary="The agent's latest re-process",
)
def get_latest_reprocess(request: Request, agent_id: AgentId) -> JSONResponse:
    """Progress of the agent's most recent re-process: ``running``, ``done`` or ``cancelled``."""
    with get_state(request).sessions() as session:
        view = latest_reprocess(session, agent_id)
    if view is None:
        raise ApiError(404, f"agent {agent_id} was never re-processed", [("path.agent_id", "no re-process")])
    return answer(200, view_answer(view))


@router.get(
    "/v1/agents/{agent_id}/reprocess/{reprocess_id}",
    dependencies=[READ],
    response_model=ReprocessStatus,
    responses=_NOT_FOUND,
    summary="A re-process's progress",
)
def get_one_reprocess(request: Request, agent_id: AgentId, reprocess_id: uuid.UUID) -> JSONResponse:
    """As ``GET /v1/agents/{agent_id}/reprocess``, for one re-process of the agent."""
    with get_state(request).sessions() as session:
        view = get_reprocess(session, agent_id, reprocess_id)
    if view is None:
        raise ApiError(404, f"re-process {reprocess_id} not found", [("path.reprocess_id", "no such re-process")])
    return answer(200, view_answer(view))


@router.delete(
    "/v1/agents/{agent_id}/reprocess",
    dependencies=[ADMIN],
    response_model=ReprocessStatus,
    responses={**_RESPONSES, 409: {"model": ErrorBody, "description": "no re-process of the agent is running"}},
    summary="Cancel the agent's running re-process",
)
def delete_reprocess(request: Request, agent_id: AgentId) -> JSONResponse:
    """Discard the new memory being derived; the live memory stays as it is."""
    view = cancel_reprocess(get_state(request).engine, agent_id)
    if view is None:
        raise ApiError(
            409,
            f"agent {agent_id} has no re-process running (it finished, or none was started)",
            [("path.agent_id", "no running re-process")],
        )
    return answer(200, view_answer(view))

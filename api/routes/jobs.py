"""Maintenance jobs of an agent: run one now, and list recent runs (Beat's and the API's).

``POST /v1/agents/{agent_id}/jobs/{job}`` queues a run (trigger ``api``) under the same
per-(agent, job) guard Beat uses. When that job already has a queued or running run for the
agent, the answer is ``409`` naming that run's id: a second run would overlap it, and
answering ``202`` with someone else's run would hide that this request started nothing.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import JSONResponse

from api.auth import ADMIN, READ, require_api_key
from api.dependencies import answer, get_state
from api.errors import ApiError, validation_failed
from api.routes.messages import AgentId
from api.run_errors import client_error
from api.schemas import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, ErrorBody, JobRunAccepted, JobRunPage
from memory_core.maintenance.registry import JOB_NAMES
from memory_core.maintenance.runs import JobRun, list_runs, request_run, skip_queued_run
from workers.tasks.maintenance import release_stale_guards, send_job_run

logger = logging.getLogger("arandu.api")

router = APIRouter(tags=["maintenance"], dependencies=[Depends(require_api_key)])

Limit = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description=f"How many runs, 1 to {MAX_PAGE_SIZE}.")]
JobFilter = Annotated[str | None, Query(description="Only the runs of this job.")]

_RUN_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    404: {"model": ErrorBody, "description": "unknown job (the message lists the valid ones)"},
    409: {"model": ErrorBody, "description": "this job already has a queued or running run for the agent"},
    422: {"model": ErrorBody, "description": "bad agent id"},
    503: {"model": ErrorBody, "description": "the broker did not accept the task"},
}
_LIST_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    422: {"model": ErrorBody, "description": "bad agent id, limit or job"},
}


def run_view(run: JobRun) -> dict[str, Any]:
    """A run as the API shows it."""
    return {
        "job_run_id": str(run.run_id),
        "agent_id": run.agent_id,
        "job": run.job,
        "status": run.status,
        "trigger": run.trigger,
        "task_id": run.task_id,
        "created_at": run.created_at.isoformat(),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "duration_ms": run.duration_ms,
        "result": run.result,
        "error": client_error(run.error),
    }


@router.post(
    "/v1/agents/{agent_id}/jobs/{job}",
    dependencies=[ADMIN],
    status_code=202,
    response_model=JobRunAccepted,
    responses=_RUN_RESPONSES,
    summary="Run a maintenance job now",
)
def run_job(request: Request, agent_id: AgentId, job: str) -> JSONResponse:
    """Queue ``job`` for the agent now; follow it with ``GET /v1/agents/{agent_id}/jobs``.

    ``job`` is one of importance, summaries, profiles, clustering, communities, consolidation,
    memify, emotional_trends. ``409`` when the job is already queued or running for the agent.
    """
    if job not in JOB_NAMES:
        valid = ", ".join(JOB_NAMES)
        raise ApiError(404, f"unknown job {job[:64]!r}; valid jobs: {valid}", [("path.job", f"one of {valid}")])
    state = get_state(request)
    settings = state.settings
    with state.sessions.begin() as session:
        release_stale_guards(session, settings, job, agent_id)
        requested = request_run(session, agent_id, job, "api")
    if not requested.created:
        message = f"{job} is already {requested.status} for agent {agent_id} (job run {requested.run_id})"
        raise ApiError(409, f"{message}; wait for it to finish", [("path.job", message)])
    try:
        send_job_run(state.celery, job, requested.run_id, settings.maintenance_task_expires_s)
    except Exception as error:
        logger.warning("could not enqueue %s for %s: %s: %s", job, agent_id, type(error).__name__, error)
        with state.sessions.begin() as session:
            skip_queued_run(session, requested.run_id, f"could not be sent to the broker: {type(error).__name__}")
        unavailable = "the broker is unavailable: the job was not queued; try again"
        raise ApiError(503, unavailable, [("broker", "did not accept the task")]) from None
    return answer(
        202,
        {"job_run_id": str(requested.run_id), "agent_id": agent_id, "job": job, "status": "queued", "trigger": "api"},
    )


@router.get(
    "/v1/agents/{agent_id}/jobs",
    dependencies=[READ],
    response_model=JobRunPage,
    responses=_LIST_RESPONSES,
    summary="Recent maintenance runs",
)
def get_jobs(
    request: Request, agent_id: AgentId, limit: Limit = DEFAULT_PAGE_SIZE, job: JobFilter = None
) -> JSONResponse:
    """The agent's most recent maintenance runs, newest first, from Beat and from the API (of one ``job``)."""
    if job is not None and job not in JOB_NAMES:
        raise validation_failed([("query.job", f"must be one of {', '.join(JOB_NAMES)}")])
    with get_state(request).sessions() as session:
        runs = list_runs(session, agent_id, limit=limit, job=job)
    return answer(200, {"runs": [run_view(run) for run in runs]})

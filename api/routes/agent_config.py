"""``/v1/agents/{agent_id}/config``: an agent's MemoryConfig overrides, stored in PostgreSQL.

``PUT`` replaces the agent's overrides with ``{"overrides": {field: value}}`` after checking them
against the service config (a 422 names ``body.overrides.<field>``: an unknown field, a value
out of bounds, a pair that does not fit together); ``GET`` answers the stored overrides and the
effective config; ``DELETE`` removes them, so the agent runs on the service config again. The
write pipeline, retrieval and every maintenance job of the agent read the row as they start
(:mod:`memory_core.agent_config`), so a change applies to work that starts after the answer, in
every process. Reading needs the read permission, changing it the admin permission.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError
from starlette.responses import JSONResponse

from api.auth import ADMIN, READ, require_api_key
from api.dependencies import JsonBody, answer, body_doc, get_state
from api.errors import raise_for_pydantic, validation_failed
from api.routes.messages import ERROR_RESPONSES, AgentId
from api.schemas import AgentConfigIn, AgentConfigOut
from memory_core.agent_config import (
    ConfigResolver,
    StoredAgentConfig,
    check_agent_overrides,
    delete_agent_config,
    read_agent_config,
    store_agent_config,
)
from memory_core.config import ConfigOverrideError

router = APIRouter(tags=["agents"], dependencies=[Depends(require_api_key)])

_PATH = "/v1/agents/{agent_id}/config"


def config_resolver(request: Request) -> ConfigResolver:
    """The app's resolver of agents' configs on the service config (made once)."""
    resolver: ConfigResolver | None = getattr(request.app.state, "agent_configs", None)
    if resolver is None:
        resolver = ConfigResolver(get_state(request).settings.memory)
        request.app.state.agent_configs = resolver
    return resolver


def _body(agent_id: str, stored: StoredAgentConfig | None, request: Request) -> dict[str, Any]:
    # The stored overrides were checked when put; a service config changed since may refuse them,
    # and the agent's work then runs on the service config, as shown here.
    overrides = stored.overrides if stored is not None else {}
    effective = config_resolver(request).for_agent(overrides)
    return {
        "agent_id": agent_id,
        "overrides": overrides,
        "config_effective": effective.effective(),
        "updated_at": stored.updated_at.isoformat() if stored is not None else None,
    }


@router.get(
    _PATH,
    dependencies=[READ],
    response_model=AgentConfigOut,
    responses=ERROR_RESPONSES,
    summary="The agent's config overrides and effective config",
)
def get_agent_config(request: Request, agent_id: AgentId) -> JSONResponse:
    """The agent's stored overrides (``{}`` when none) and the config its work runs on."""
    with get_state(request).sessions() as session:
        stored = read_agent_config(session, agent_id)
    return answer(200, _body(agent_id, stored, request))


@router.put(
    _PATH,
    dependencies=[ADMIN],
    response_model=AgentConfigOut,
    responses=ERROR_RESPONSES,
    openapi_extra=body_doc(AgentConfigIn),
    summary="Set the agent's config overrides",
)
def put_agent_config(request: Request, agent_id: AgentId, body: JsonBody) -> JSONResponse:
    """Replace the agent's overrides; each is checked against the service config (422 naming the field)."""
    try:
        payload = AgentConfigIn.model_validate_json(body)
    except ValidationError as error:
        raise_for_pydantic(error)
    state = get_state(request)
    try:
        check_agent_overrides(state.settings.memory, payload.overrides)
    except ConfigOverrideError as error:
        raise validation_failed(
            [(f"body.overrides.{problem.path}", problem.message) for problem in error.problems]
        ) from None
    with state.sessions.begin() as session:
        stored = store_agent_config(session, agent_id, payload.overrides)
    return answer(200, _body(agent_id, stored, request))


@router.delete(
    _PATH,
    dependencies=[ADMIN],
    response_model=AgentConfigOut,
    responses=ERROR_RESPONSES,
    summary="Remove the agent's config overrides",
)
def delete_agent_config_route(request: Request, agent_id: AgentId) -> JSONResponse:
    """Remove the agent's overrides: its work runs on the service config again (200 whether it had some or not)."""
    with get_state(request).sessions.begin() as session:
        delete_agent_config(session, agent_id)
    return answer(200, _body(agent_id, None, request))

"""Memory management: list, read and delete an agent's facts; list its entities and read one.

Every read and delete is scoped to the agent in the path: another agent's fact id is a 404,
exactly like an unknown one, so ids reveal nothing across agents. Deletes are hard deletes
(the fact's entity links go with it; relationships and facts that cited it keep a NULL; the
entities' fact counts are recomputed).
``DELETE .../facts/{fact_id}`` answers ``200 {"deleted": 1}``, the same shape as deleting all.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import JSONResponse

from api.auth import READ, WRITE, require_api_key
from api.dependencies import answer, get_state
from api.errors import ApiError, validation_failed
from api.routes.messages import AgentId
from api.schemas import (
    DEFAULT_PAGE_SIZE,
    MAX_ENTITY_KEYS,
    MAX_NAME_CHARS,
    MAX_PAGE_SIZE,
    Deleted,
    EntityPage,
    ErrorBody,
    FactPage,
)
from memory_core.read.management import (
    delete_all_facts,
    delete_fact,
    get_entity,
    get_fact,
    list_entities,
    list_facts,
)
from memory_core.read.schemas import EntityProfile, FactDetail

router = APIRouter(tags=["memory"], dependencies=[Depends(require_api_key)])

Limit = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description=f"Page size, 1 to {MAX_PAGE_SIZE}.")]
Offset = Annotated[int, Query(ge=0, description="Items to skip.")]
EntityKeys = Annotated[
    str | None,
    Query(description="Comma-separated canonical entity keys (e.g. person:ana,place:lisbon): only their facts."),
]

_LIST_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    422: {"model": ErrorBody, "description": "bad agent id, limit, offset or entity_keys"},
}
_ONE_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    404: {"model": ErrorBody, "description": "no such fact for this agent"},
    422: {"model": ErrorBody, "description": "malformed fact id or agent id"},
}


def split_keys(raw: str | None) -> list[str] | None:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; None when no key is given; 422 for bad keys."""
    if raw is None:
        return None
    keys = list(dict.fromkeys(key.strip() for key in raw.split(",") if key.strip()))
    if not keys:
        return None
    if len(keys) > MAX_ENTITY_KEYS:
        raise validation_failed([("query.entity_keys", f"at most {MAX_ENTITY_KEYS} keys")])
    for key in keys:
        if "\x00" in key:
            raise validation_failed([("query.entity_keys", "must not contain NUL characters")])
        if len(key) > MAX_NAME_CHARS:
            raise validation_failed([("query.entity_keys", f"a key is at most {MAX_NAME_CHARS} characters")])
    return keys


def _fact_not_found(fact_id: uuid.UUID) -> ApiError:
    return ApiError(404, f"fact {fact_id} not found", [("path.fact_id", "no such fact for this agent")])


def _facts(facts: list[FactDetail]) -> list[dict[str, Any]]:
    return [fact.model_dump(mode="json") for fact in facts]


@router.get(
    "/v1/agents/{agent_id}/facts",
    dependencies=[READ],
    response_model=FactPage,
    responses=_LIST_RESPONSES,
    summary="List facts",
)
def get_facts(
    request: Request,
    agent_id: AgentId,
    limit: Limit = DEFAULT_PAGE_SIZE,
    offset: Offset = 0,
    entity_keys: EntityKeys = None,
) -> JSONResponse:
    """The agent's active facts, newest first; ``total`` counts them all (with the filter).

    ``entity_keys`` (canonical keys or aliases, comma-separated) keeps the facts linked to any of
    them; keys the agent does not know match nothing.
    """
    keys = split_keys(entity_keys)
    with get_state(request).sessions() as session:
        facts, total = list_facts(session, agent_id, limit=limit, offset=offset, entity_keys=keys)
    return answer(200, {"facts": _facts(facts), "total": total})


@router.get(
    "/v1/agents/{agent_id}/facts/{fact_id}",
    dependencies=[READ],
    response_model=FactDetail,
    responses=_ONE_RESPONSES,
    summary="One fact",
)
def get_one_fact(request: Request, agent_id: AgentId, fact_id: uuid.UUID) -> JSONResponse:
    """One fact with its validity window and provenance; superseded facts too (``is_active`` false)."""
    with get_state(request).sessions() as session:
        fact = get_fact(session, agent_id, str(fact_id))
    if fact is None:
        raise _fact_not_found(fact_id)
    return answer(200, fact.model_dump(mode="json"))


@router.delete(
    "/v1/agents/{agent_id}/facts/{fact_id}",
    dependencies=[WRITE],
    response_model=Deleted,
    responses=_ONE_RESPONSES,
    summary="Delete a fact",
)
def delete_one_fact(request: Request, agent_id: AgentId, fact_id: uuid.UUID) -> JSONResponse:
    """Delete the fact for good (its entity links go with it): ``{"deleted": 1}``, or 404."""
    with get_state(request).sessions.begin() as session:
        deleted = delete_fact(session, agent_id, str(fact_id))
    if not deleted:
        raise _fact_not_found(fact_id)
    return answer(200, {"deleted": 1})


@router.delete(
    "/v1/agents/{agent_id}/facts",
    dependencies=[WRITE],
    response_model=Deleted,
    responses=_LIST_RESPONSES,
    summary="Delete all",
)
def delete_every_fact(request: Request, agent_id: AgentId) -> JSONResponse:
    """Delete every fact of the agent, history included: ``{"deleted": n}``. Entities (with no facts) and
    events stay."""
    with get_state(request).sessions.begin() as session:
        deleted = delete_all_facts(session, agent_id)
    return answer(200, {"deleted": deleted})


@router.get(
    "/v1/agents/{agent_id}/entities",
    dependencies=[READ],
    response_model=EntityPage,
    responses=_LIST_RESPONSES,
    summary="List entities",
)
def get_entities(
    request: Request, agent_id: AgentId, limit: Limit = DEFAULT_PAGE_SIZE, offset: Offset = 0
) -> JSONResponse:
    """The agent's active entities, most recently seen first, with fact counts, importance, summary and profile."""
    with get_state(request).sessions() as session:
        entities, total = list_entities(session, agent_id, limit=limit, offset=offset)
    return answer(200, {"entities": [entity.model_dump(mode="json") for entity in entities], "total": total})


_ENTITY_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    404: {"model": ErrorBody, "description": "no such entity for this agent"},
    422: {"model": ErrorBody, "description": "bad agent id or entity key"},
}


@router.get(
    "/v1/agents/{agent_id}/entities/{entity_key:path}",
    dependencies=[READ],
    response_model=EntityProfile,
    responses=_ENTITY_RESPONSES,
    summary="One entity",
)
def get_one_entity(request: Request, agent_id: AgentId, entity_key: str) -> JSONResponse:
    """One active entity by canonical key (``person:ana``) or alias (``Ana``): its summary, profile,
    aliases and strongest relationships. Its facts: ``GET .../facts?entity_keys=<canonical_key>``."""
    if not entity_key.strip() or "\x00" in entity_key or len(entity_key) > MAX_NAME_CHARS:
        raise validation_failed([("path.entity_key", f"1 to {MAX_NAME_CHARS} characters, no NUL")])
    with get_state(request).sessions() as session:
        entity = get_entity(session, agent_id, entity_key.strip())
    if entity is None:
        raise ApiError(404, f"entity {entity_key!r} not found", [("path.entity_key", "no such entity for this agent")])
    return answer(200, entity.model_dump(mode="json"))

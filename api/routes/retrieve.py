"""``POST /v1/agents/{agent_id}/retrieve``: ranked facts and a prompt-ready context for a query.

Retrieval runs synchronously in the request (a sync handler, so in the threadpool): it reads
PostgreSQL, embeds the query and may call the LLM reranker, and answers with the result.
Overrides are checked against the deployment's base config before anything runs, so a bad
value is a 422 naming ``body.config_overrides.<key>``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError
from starlette.responses import Response

from api.auth import READ, require_api_key
from api.dependencies import ApiState, JsonBody, body_doc, get_state
from api.errors import ApiError, problems_from_pydantic, validation_failed
from api.heavy_work import is_heavy
from api.routes.messages import ERROR_RESPONSES, AgentId, cap_warnings
from api.schemas import AS_OF_TAGS, FIXED_CONFIG_KEYS, ErrorBody, Problem, RetrieveIn
from memory_core.config import ConfigOverrideError
from memory_core.providers.errors import ProviderError, RetryableProviderError
from memory_core.read.pipeline import RetrievalRequestError, retrieve
from memory_core.read.schemas import RetrieveResult

router = APIRouter(tags=["retrieval"], dependencies=[Depends(require_api_key)])

_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    502: {"model": ErrorBody, "description": "the model provider refused the request"},
    503: {"model": ErrorBody, "description": "the model provider is unavailable; try again later"},
}


def _without_tags(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # ("as_of", "window", "end") -> ("as_of", "end"): the union's branch tag is not a field.
    if len(loc) >= 2 and loc[0] == "as_of" and loc[1] in AS_OF_TAGS:
        return (loc[0], *loc[2:])
    return loc


def parse_retrieve(body: bytes) -> RetrieveIn:
    """The validated body, or the 422 naming every bad field."""
    try:
        return RetrieveIn.model_validate_json(body)
    except ValidationError as error:
        errors = [{**item, "loc": _without_tags(tuple(item["loc"]))} for item in error.errors(include_url=False)]
        raise validation_failed(problems_from_pydantic(errors, ("body",))) from None


def _override_problems(error: ConfigOverrideError) -> list[Problem]:
    return [(f"body.config_overrides.{problem.path}", problem.message) for problem in error.problems]


def check_overrides(state: ApiState, overrides: dict[str, Any]) -> list[str]:
    """Warnings about ignored keys; 422 naming ``body.config_overrides.<key>`` for bad values."""
    problems: list[Problem] = [
        (f"body.config_overrides.{key}", "cannot be overridden per request: it is fixed when the database is created")
        for key in overrides
        if key in FIXED_CONFIG_KEYS
    ]
    _, warnings, invalid = state.overrides.check(overrides)
    problems.extend((f"body.config_overrides.{path}", message) for path, message in invalid)
    if problems:
        raise validation_failed(problems)
    return warnings


@router.post(
    "/v1/agents/{agent_id}/retrieve",
    dependencies=[READ],
    response_model=RetrieveResult,
    responses=_RESPONSES,
    openapi_extra=body_doc(RetrieveIn),
    summary="Retrieve what the agent knows about a query",
)
def post_retrieve(request: Request, agent_id: AgentId, body: JsonBody) -> Response:
    """Ranked facts (with every signal's score), the context string, and the effective config.

    ``as_of`` is an instant (facts valid then) or ``{start, end}`` (facts valid at some point of
    the window). ``entity_keys`` restricts the answer to those entities; unknown keys come back in
    ``warnings``. ``verbose`` adds ``trace``, what every stage did.
    """
    state = get_state(request)
    payload = parse_retrieve(body)
    limit = state.settings.max_query_bytes
    if len(payload.query) * 4 > limit and len(payload.query.encode("utf-8")) > limit:
        problem = ("body.query", f"query is larger than the limit of {limit} bytes (UTF-8, ARANDU_MAX_QUERY_BYTES)")
        raise validation_failed([problem])
    warnings = check_overrides(state, payload.config_overrides) if payload.config_overrides else []
    as_of: datetime | tuple[datetime, datetime] | None
    if payload.as_of is None or isinstance(payload.as_of, datetime):
        as_of = payload.as_of
    else:
        as_of = (payload.as_of.start, payload.as_of.end)
    # A long query takes its turn among the process's heavy requests (api.heavy_work).
    turn: AbstractContextManager[None] = state.heavy.turn() if is_heavy(payload.query) else nullcontext()
    try:
        with turn:
            result = retrieve(
                state.read_context(),
                agent_id=agent_id,
                query=payload.query,
                entity_keys=payload.entity_keys,
                session_id=payload.session_id,
                as_of=as_of,
                config_overrides=payload.config_overrides,
                verbose=payload.verbose,
                include_directives=payload.include_directives,
                persona=payload.persona or "",
            )
    except ConfigOverrideError as error:  # the pipeline's own check; the checker above normally catches it
        raise validation_failed(_override_problems(error)) from None
    except RetrievalRequestError as error:  # the body was validated above; kept as a 422, not a 500
        raise validation_failed([("body", str(error))]) from None
    except RetryableProviderError as error:
        headers = {"Retry-After": str(max(1, round(error.retry_after_s)))} if error.retry_after_s else None
        raise ApiError(
            503, f"the model provider is unavailable, try again later: {error.message}", headers=headers
        ) from None
    except ProviderError as error:
        raise ApiError(502, f"the model provider refused the request: {error.message}") from None
    capped = cap_warnings([*result.warnings, *warnings])
    if capped != result.warnings:
        result = result.model_copy(update={"warnings": capped})
    # Serialised by pydantic-core straight to bytes: a dict round trip through the json module
    # cost the single API process's event loop thread a few hundred microseconds per answer.
    # Absent rather than null when not asked for: an answer keeps the shape it had before them.
    absent = {name for name in ("trace", "directives") if getattr(result, name) is None}
    body = result.model_dump_json(exclude=absent or None)
    return Response(body, status_code=200, media_type="application/json")

"""``POST /v1/agents/{agent_id}/messages`` (one message) and ``.../messages/batch`` (up to 1,000).

Both store the events and their runs, commit, answer, and only then publish the pipeline: a
worker never looks for an event that is not committed, the caller does not wait for the
broker, and an event is never lost to a broker outage or to a process that dies between the
answer and the publish (the sweeper re-enqueues idle runs). A single message is written
together with those of concurrent requests (one statement, one commit: :mod:`api.event_writer`)
and queued for a collector that starts it in a chunk with its neighbours in time
(:mod:`workers.intake`). The single-message handler is on the hot path: it runs on the event
loop, parses once and builds nothing it could reuse.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from api.auth import WRITE, require_api_key
from api.dependencies import ApiState, JsonBody, answer, body_doc, get_state, parse_json
from api.errors import ApiError, validation_failed
from api.heavy_work import is_heavy
from api.schemas import (
    AGENT_ID_PATTERN,
    BatchAccepted,
    BatchIn,
    DryRunAnswer,
    ErrorBody,
    MessageAccepted,
    MessageIn,
    prepare_messages,
)
from memory_core.providers.errors import ProviderError, RetryableProviderError
from memory_core.usage import UsageCounts, record_usage
from memory_core.write.intake import IncomingMessage, accept_messages
from memory_core.write.pipeline import dry_run
from memory_core.write.schemas import TokenCount, WriteResult

AgentId = Annotated[
    str, Path(pattern=AGENT_ID_PATTERN, description="1 to 128 characters: letters, digits and . _ : - @")
]

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    413: {"model": ErrorBody, "description": "a message (or the body) is larger than the limit"},
    415: {"model": ErrorBody, "description": "the body is not JSON"},
    422: {"model": ErrorBody, "description": "invalid request; `detail` names every bad field"},
}

logger = logging.getLogger("arandu.api")

router = APIRouter(tags=["messages"], dependencies=[Depends(require_api_key)])

MAX_WARNINGS = 50
# A dry run extracts in the API process, on the request's time: a preview of a message, not of a
# document (offline extraction of a 256 KiB message took 5.7 s of the API's CPU).
MAX_DRY_RUN_BYTES = 16 * 1024


def _single(index: int) -> str:
    return "body"


def _batch_item(index: int) -> str:
    return f"body.messages[{index}]"


def cap_warnings(warnings: list[str]) -> list[str]:
    """At most :data:`MAX_WARNINGS` distinct warnings, and how many more there were."""
    distinct = list(dict.fromkeys(warnings))
    if len(distinct) <= MAX_WARNINGS:
        return distinct
    return [*distinct[:MAX_WARNINGS], f"... and {len(distinct) - MAX_WARNINGS} more warnings"]


@router.post(
    "/v1/agents/{agent_id}/messages",
    dependencies=[WRITE],
    status_code=202,
    response_model=MessageAccepted,
    responses={
        200: {"model": MessageAccepted | DryRunAnswer, "description": "known message_id (nothing queued), or dry run"},
        **ERROR_RESPONSES,
    },
    openapi_extra=body_doc(MessageIn),
    summary="Send one message",
)
async def post_message(request: Request, agent_id: AgentId, body: JsonBody) -> JSONResponse:
    """Store a message as an event and queue its processing; answers at once with the event id.

    The same ``message_id`` again for the agent returns the first event (200, ``duplicate``) and
    queues nothing. ``dry_run`` computes the write result synchronously and stores nothing.
    """
    state = get_state(request)
    payload = parse_json(MessageIn, body)
    messages, warnings = prepare_messages(
        (payload,),
        _single,
        checker=state.overrides,
        max_message_bytes=state.settings.max_message_bytes,
        default_source="api",
    )
    incoming = messages[0]
    if payload.dry_run:
        if _too_large_for_dry_run(incoming.message):
            problem = ("body.message", f"a dry run's message is limited to {MAX_DRY_RUN_BYTES} bytes (UTF-8)")
            raise validation_failed([problem])
        return await run_in_threadpool(_dry_run, state, agent_id, incoming, warnings)
    # Written with the messages of concurrent requests in one statement and one commit, then
    # published (api.event_writer): the handler never leaves the event loop.
    accepted = await state.event_writer.accept(agent_id, incoming)
    content = {
        "event_id": str(accepted.event_id),
        "status": accepted.status,
        "duplicate": not accepted.created,
        "warnings": warnings,
    }
    return answer(202 if accepted.created else 200, content)


def _too_large_for_dry_run(message: str) -> bool:
    return len(message) * 4 > MAX_DRY_RUN_BYTES and len(message.encode("utf-8")) > MAX_DRY_RUN_BYTES


def _dry_run(state: ApiState, agent_id: str, incoming: IncomingMessage, warnings: list[str]) -> JSONResponse:
    # Extraction runs here, in the API process: a long message takes its turn (api.heavy_work).
    turn: AbstractContextManager[None] = state.heavy.turn() if is_heavy(incoming.message) else nullcontext()
    try:
        with turn:
            result = _dry_run_result(state, agent_id, incoming)
    except RetryableProviderError as error:
        headers = {"Retry-After": str(max(1, round(error.retry_after_s)))} if error.retry_after_s else None
        raise ApiError(
            503, f"the model provider is unavailable, try again later: {error.message}", headers=headers
        ) from None
    except ProviderError as error:
        raise ApiError(502, f"the model provider refused the request: {error.message}") from None
    _record_dry_run_usage(state, agent_id, result.tokens_used)
    return answer(200, {"dry_run": True, "result": result.model_dump(mode="json"), "warnings": warnings})


def _record_dry_run_usage(state: ApiState, agent_id: str, tokens: TokenCount) -> None:
    """Count a dry run's LLM calls for the agent: they were made (and paid for) even if nothing is kept."""
    counts = {
        (agent_id, item.skill, item.model): UsageCounts(
            calls=item.calls,
            failures=item.failures,
            input_tokens=item.input_tokens,
            output_tokens=item.output_tokens,
            cached_input_tokens=item.cached_input_tokens,
        )
        for item in tokens.by_skill
    }
    if not counts:
        return
    try:
        with state.sessions.begin() as session:
            record_usage(session, counts)
    except Exception:  # accounting must not cost the caller the answer it waited for
        logger.warning("could not record the LLM usage of a dry run for agent %s", agent_id, exc_info=True)


def _dry_run_result(state: ApiState, agent_id: str, incoming: IncomingMessage) -> WriteResult:
    return dry_run(
        state.write_context(),
        agent_id=agent_id,
        message=incoming.message,
        speaker=incoming.speaker_name,
        session_id=incoming.session_id,
        occurred_at=incoming.occurred_at,
        options=incoming.options,
    )


@router.post(
    "/v1/agents/{agent_id}/messages/batch",
    dependencies=[WRITE],
    status_code=202,
    response_model=BatchAccepted,
    responses=ERROR_RESPONSES,
    openapi_extra=body_doc(BatchIn),
    summary="Send up to 1,000 messages",
)
def post_batch(request: Request, agent_id: AgentId, body: JsonBody) -> JSONResponse:
    """Store every message (all or none) and queue them; event ids come back in input order.

    Messages whose ``message_id`` is already known keep their first event and are counted in
    ``duplicates``; nothing is queued for them.
    """
    state = get_state(request)
    payload = parse_json(BatchIn, body)
    messages, warnings = prepare_messages(
        payload.messages,
        _batch_item,
        checker=state.overrides,
        max_message_bytes=state.settings.max_message_bytes,
        default_source="api",
    )
    with state.sessions.begin() as session:
        accepted = accept_messages(session, agent_id, messages)
    created = list(dict.fromkeys(str(item.event_id) for item in accepted if item.created))
    return answer(
        202,
        {
            "event_ids": [str(item.event_id) for item in accepted],
            "duplicates": sum(1 for item in accepted if not item.created),
            "warnings": cap_warnings(warnings),
        },
        then=lambda: state.enqueue(created),
    )

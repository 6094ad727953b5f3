"""Historical imports: ``POST /v1/agents/{agent_id}/imports`` (JSON or NDJSON) and their progress.

An import is up to 10,000 dated messages stored in one transaction under one import id;
progress is counted from the runs of the events it created. Messages whose ``message_id``
the agent already has create nothing and are counted as duplicates, so re-sending a file is
safe.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError
from starlette.responses import JSONResponse

from api.auth import READ, WRITE, may_see, require_api_key
from api.dependencies import ImportBody, answer, body_doc, get_state, import_body, parse_json
from api.errors import ApiError, problems_from_pydantic, validation_failed
from api.routes.messages import ERROR_RESPONSES, AgentId, cap_warnings
from api.schemas import (
    MAX_IMPORT_MESSAGES,
    ErrorBody,
    ImportAccepted,
    ImportIn,
    ImportMessageIn,
    ImportStatus,
    Problem,
    prepare_messages,
)
from memory_core.write.intake import AcceptedMessage, accept_messages, create_import, finish_import_intake
from memory_core.write.runs import ImportProgress, import_owner, import_progress

router = APIRouter(tags=["imports"], dependencies=[Depends(require_api_key)])

# Rows per INSERT: keeps every statement far below PostgreSQL's 65,535 bind parameters.
INSERT_CHUNK = 1_000
MAX_NDJSON_PROBLEMS = 1_000
_BOM = b"\xef\xbb\xbf"


def parse_ndjson(data: bytes) -> tuple[list[ImportMessageIn], list[int]]:
    """The messages of an NDJSON body and their line numbers (1-based); 422 naming bad lines."""
    messages: list[ImportMessageIn] = []
    line_numbers: list[int] = []
    problems: list[Problem] = []
    described: list[str] = []
    for number, raw in enumerate(data.removeprefix(_BOM).split(b"\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        if len(line_numbers) >= MAX_IMPORT_MESSAGES:
            raise validation_failed(
                [("body", f"an import holds at most {MAX_IMPORT_MESSAGES} messages (line {number} is one more)")]
            )
        line_numbers.append(number)
        try:
            messages.append(ImportMessageIn.model_validate_json(line))
        except ValidationError as error:
            prefix = f"body.line[{number}]"
            for field, message in problems_from_pydantic(error.errors(include_url=False), ("body", f"line[{number}]")):
                text = message.replace(" at line 1 column ", " at column ")
                problems.append((field, text))
                inner = field.removeprefix(prefix).lstrip(".")
                described.append(f"line {number}" + (f" {inner}" if inner else "") + f": {text}")
            if len(problems) >= MAX_NDJSON_PROBLEMS:
                break
    if problems:
        shown = "; ".join(described[:3]) + (f" (and {len(described) - 3} more)" if len(described) > 3 else "")
        raise ApiError(422, f"NDJSON body: {shown}", problems)
    if not line_numbers:
        raise validation_failed([("body", "the import holds no messages (every line is blank)")])
    return messages, line_numbers


def _store_import(
    request: Request,
    agent_id: str,
    items: list[ImportMessageIn],
    field_of: Callable[[int], str],
    source: str,
) -> tuple[uuid.UUID, list[AcceptedMessage], list[str]]:
    state = get_state(request)
    messages, warnings = prepare_messages(
        items,
        field_of,
        checker=state.overrides,
        max_message_bytes=state.settings.max_message_bytes,
        default_source="import",
    )
    accepted: list[AcceptedMessage] = []
    with state.sessions.begin() as session:
        import_id = create_import(session, agent_id, source)
        for offset in range(0, len(messages), INSERT_CHUNK):
            accepted.extend(
                accept_messages(session, agent_id, messages[offset : offset + INSERT_CHUNK], import_id=import_id)
            )
        finish_import_intake(session, import_id, accepted)
    return import_id, accepted, warnings


@router.post(
    "/v1/agents/{agent_id}/imports",
    dependencies=[WRITE],
    status_code=202,
    response_model=ImportAccepted,
    responses=ERROR_RESPONSES,
    openapi_extra=body_doc(ImportIn, ndjson=True),
    summary="Import up to 10,000 dated messages (JSON or NDJSON)",
)
def post_import(request: Request, agent_id: AgentId, body: Annotated[ImportBody, Depends(import_body)]) -> JSONResponse:
    """Store a conversation history (every message with its ``occurred_at``) and queue it.

    JSON: ``{"messages": [...]}``. NDJSON (``Content-Type: application/x-ndjson``): one message
    object per line, blank lines ignored; errors name the line. All or nothing: one bad message
    refuses the whole import. ``total`` counts the new events, ``duplicates`` the messages whose
    ``message_id`` was already known.
    """
    if body.kind == "ndjson":
        items, lines = parse_ndjson(body.data)

        def field_of(index: int) -> str:
            return f"body.line[{lines[index]}]"

        source = "ndjson"
    else:
        items = parse_json(ImportIn, body.data).messages

        def field_of(index: int) -> str:
            return f"body.messages[{index}]"

        source = "api"
    import_id, accepted, warnings = _store_import(request, agent_id, items, field_of, source)
    created = sum(1 for item in accepted if item.created)
    queued = list(dict.fromkeys(str(item.event_id) for item in accepted if item.created))
    state = get_state(request)
    return answer(
        202,
        {
            "import_id": str(import_id),
            "total": created,
            "duplicates": len(accepted) - created,
            "status": "running" if created else "done",
            "warnings": cap_warnings(warnings),
        },
        then=lambda: state.enqueue(queued),
    )


def _progress_answer(progress: ImportProgress) -> dict[str, Any]:
    return {
        "import_id": str(progress.import_id),
        "agent_id": progress.agent_id,
        "total": progress.total,
        "duplicates": progress.duplicates,
        "done": progress.done,
        "failed": progress.failed,
        "pending": progress.pending,
        "status": progress.status,
        "created_at": progress.created_at.isoformat(),
    }


def _load(request: Request, import_id: uuid.UUID, agent_id: str | None) -> ImportProgress:
    not_found = ApiError(404, f"import {import_id} not found", [("path.import_id", "no such import")])
    with get_state(request).sessions() as session:
        # The owner first, by primary key: another tenant's import costs what an unknown id costs.
        owner = import_owner(session, import_id)
        if owner is None or (agent_id is not None and owner != agent_id) or not may_see(request, owner):
            raise not_found
        progress = import_progress(session, import_id)
    if progress is None:
        raise not_found
    return progress


_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    404: {"model": ErrorBody, "description": "no such import"},
    422: {"model": ErrorBody, "description": "malformed import id"},
}


@router.get(
    "/v1/imports/{import_id}",
    dependencies=[READ],
    response_model=ImportStatus,
    responses=_NOT_FOUND,
    summary="Import progress",
)
def get_import(request: Request, import_id: uuid.UUID) -> JSONResponse:
    """How many of an import's messages are done, failed and pending; ``status`` is ``running``,
    ``done`` or ``failed`` (finished with some failed)."""
    return answer(200, _progress_answer(_load(request, import_id, None)))


@router.get(
    "/v1/agents/{agent_id}/imports/{import_id}",
    dependencies=[READ],
    response_model=ImportStatus,
    responses=_NOT_FOUND,
    summary="Import progress (agent-scoped)",
)
def get_agent_import(request: Request, agent_id: AgentId, import_id: uuid.UUID) -> JSONResponse:
    """As ``GET /v1/imports/{import_id}``, and 404 unless the import belongs to ``agent_id``."""
    return answer(200, _progress_answer(_load(request, import_id, agent_id)))

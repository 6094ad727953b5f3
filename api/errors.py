"""One error shape for every failure: ``{"error": "...", "detail": [{"field": ..., "message": ...}]}``.

``error`` is a sentence a person can act on and names the offending field; ``detail`` lists
every problem with its field written as a path (``body.messages[3].speaker_name``,
``path.agent_id``, ``body.config_overrides.topk_facts``). Unexpected failures answer 500 with
an ``error_id`` under which the traceback was logged, never the exception text.

A database that cannot be reached (down, restarting, refusing connections, a pool with no
free connection) is not a bug of the request: it answers 503 with ``Retry-After``, so clients
retry instead of dropping the message. Errors about the statement itself (a constraint, a
type, SQL the server rejects) stay 500s with their ``error_id``.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from api.schemas import InvalidRequestError, Problem

logger = logging.getLogger("arandu.api")

MAX_DETAIL_ITEMS = 100
_SUMMARY_ITEMS = 3

# pydantic's wording, made plainer where it talks about Python rather than JSON.
_FRIENDLY_MESSAGES = {
    "missing": "field required",
    "extra_forbidden": "unknown field",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
    "list_type": "must be a JSON array",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "int_type": "must be an integer",
    "uuid_parsing": "must be a UUID such as 123e4567-e89b-12d3-a456-426614174000",
    "uuid_type": "must be a UUID such as 123e4567-e89b-12d3-a456-426614174000",
}
# What a client should wait before sending again while the database is unreachable: a restart of
# PostgreSQL takes a few seconds, and a shorter wait would only add load to the one coming back.
DATABASE_RETRY_AFTER_S = 2
DATABASE_UNAVAILABLE = "the database is unavailable, try again later (nothing was stored)"

_FIELD_MESSAGES = {
    ("path.agent_id", "string_pattern_mismatch"): "must be 1 to 128 characters: letters, digits and . _ : - @",
}


class ApiError(Exception):
    """An error answer: status, human message, problems and extra headers."""

    def __init__(
        self,
        status_code: int,
        error: str,
        detail: Sequence[Problem] = (),
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(error)
        self.status_code = status_code
        self.error = error
        self.detail = list(detail)
        self.headers = dict(headers or {})


def field_path(loc: Iterable[Any]) -> str:
    """``("body", "messages", 3, "speaker_name")`` -> ``body.messages[3].speaker_name``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "body"


def problems_from_pydantic(errors: Iterable[Mapping[str, Any]], prefix: Sequence[Any] = ()) -> list[Problem]:
    """(field, message) pairs from pydantic errors; the input values are never echoed."""
    problems: list[Problem] = []
    for item in errors:
        kind = str(item.get("type", ""))
        message = _FRIENDLY_MESSAGES.get(kind) or str(item.get("msg", "invalid value")).removeprefix("Value error, ")
        if kind == "json_invalid":
            reason = (item.get("ctx") or {}).get("error")
            message = f"invalid JSON: {reason}" if reason else "invalid JSON"
        loc = [*prefix, *item.get("loc", ())]
        if kind == "json_invalid":
            loc = [*prefix] or ["body"]
        field = field_path(loc)
        problems.append((field, _FIELD_MESSAGES.get((field, kind), message)))
    return problems


def summarise(problems: Sequence[Problem], *, intro: str = "") -> str:
    """The ``error`` sentence: the first problems with their fields, and how many more there are."""
    if not problems:
        return intro or "invalid request"
    shown = "; ".join(f"{field}: {message}" for field, message in problems[:_SUMMARY_ITEMS])
    more = len(problems) - _SUMMARY_ITEMS
    if more > 0:
        shown += f" (and {more} more)"
    return f"{intro}{shown}"


def error_response(
    status_code: int,
    error: str,
    detail: Sequence[Problem] = (),
    *,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Response:
    """The JSON answer of an error."""
    items = [{"field": field, "message": message} for field, message in detail[:MAX_DETAIL_ITEMS]]
    body: dict[str, Any] = {"error": error, "detail": items}
    if len(detail) > MAX_DETAIL_ITEMS:
        body["detail_truncated"] = len(detail) - MAX_DETAIL_ITEMS
    if extra:
        body.update(extra)
    return JSONResponse(body, status_code=status_code, headers=dict(headers or {}))


def validation_failed(problems: Sequence[Problem], status_code: int = 422, *, intro: str = "") -> ApiError:
    """An :class:`ApiError` for request problems (422 invalid, 413 too large)."""
    return ApiError(status_code, summarise(problems, intro=intro), problems)


def raise_for_pydantic(error: ValidationError, prefix: Sequence[Any] = ("body",), *, intro: str = "") -> NoReturn:
    """Raise the 422 for a model that did not validate."""
    raise validation_failed(problems_from_pydantic(error.errors(include_url=False), prefix), intro=intro) from None


async def _api_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status_code, exc.error, exc.detail, headers=exc.headers)


async def _request_problems(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidRequestError)
    return error_response(exc.status_code, summarise(exc.problems), exc.problems)


async def _request_validation(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = problems_from_pydantic(exc.errors())
    return error_response(422, summarise(problems), problems)


async def _http_exception(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail
    message = detail if isinstance(detail, str) else json.dumps(detail, default=str)
    return error_response(exc.status_code, message, headers=exc.headers)


def database_unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or an exception it was raised from) says the database cannot be reached.

    SQLAlchemy's ``OperationalError`` and ``InterfaceError`` wrap the driver's errors about the
    connection (refused, closed by an administrator's shutdown, server starting up) rather than
    about the statement; its ``TimeoutError`` is a pool without a free connection; and any DB-API
    error that invalidated its connection lost it mid-statement.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError):
            return True
        if isinstance(current, sa_exc.DBAPIError) and current.connection_invalidated:
            return True
        if isinstance(current, psycopg.OperationalError | psycopg.InterfaceError):
            return True
        current = current.__cause__ or current.__context__
    return False


def database_unavailable_response() -> Response:
    """The 503 of a request that met an unreachable database."""
    return error_response(503, DATABASE_UNAVAILABLE, headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)})


async def _database_error(request: Request, exc: Exception) -> Response:
    if database_unreachable(exc):
        # Expected while the database restarts: one line per request, not a traceback.
        logger.warning("database unavailable on %s %s: %s", request.method, request.url.path, type(exc).__name__)
        return database_unavailable_response()
    return await _unexpected(request, exc)


async def _unexpected(request: Request, exc: Exception) -> Response:
    if database_unreachable(exc):  # a database error wrapped in another exception
        logger.warning("database unavailable on %s %s: %s", request.method, request.url.path, type(exc).__name__)
        return database_unavailable_response()
    error_id = uuid.uuid4().hex
    logger.error(
        "unhandled error %s on %s %s",
        error_id,
        request.method,
        request.url.path,
        exc_info=(type(exc), exc, exc.__traceback__),
    )
    return error_response(500, "internal error", extra={"error_id": error_id})


def install_error_handlers(app: FastAPI) -> None:
    """Route every exception the API can meet to the one error shape."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(InvalidRequestError, _request_problems)
    app.add_exception_handler(RequestValidationError, _request_validation)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(sa_exc.SQLAlchemyError, _database_error)
    app.add_exception_handler(psycopg.Error, _database_error)
    app.add_exception_handler(Exception, _unexpected)

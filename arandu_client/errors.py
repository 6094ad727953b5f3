"""Exceptions of the client: one per kind of failure, all under :class:`AranduError`.

Every error answer of the API has one shape, ``{"error": "...", "detail": [{"field", "message"}]}``;
:class:`ApiError` carries it (``status``, ``message``, ``details``) and a subclass per status
lets callers catch what they can act on::

    try:
        client.get_fact(agent, fact_id)
    except NotFoundError:
        ...
    except InvalidRequestError as error:
        print(error.fields)   # ['path.fact_id']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class AranduError(Exception):
    """Base class of every error the client raises."""


class TransportError(AranduError):
    """The request did not get an answer: connection refused or reset, DNS, timeout."""


class WaitTimeoutError(AranduError, TimeoutError):
    """A ``wait_for_*`` call gave up before the work finished (also a built-in ``TimeoutError``)."""


@dataclass(frozen=True)
class FieldError:
    """One problem of a request: the field as a path (``body.messages[3].speaker_name``) and what is wrong."""

    field: str
    message: str


class ApiError(AranduError):
    """The API answered with an error status."""

    def __init__(
        self,
        status: int,
        message: str,
        details: list[FieldError] | None = None,
        *,
        error_id: str | None = None,
        retry_after: float | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.details: list[FieldError] = list(details or [])
        self.error_id = error_id
        self.retry_after = retry_after
        self.body = body

    @property
    def fields(self) -> list[str]:
        """The fields named by :attr:`details`, in the server's order."""
        return [item.field for item in self.details]


class AuthenticationError(ApiError):
    """401: the API key is missing or wrong."""


class PermissionDeniedError(ApiError):
    """403: the key may not act for this agent, or lacks the permission (read, write, admin)."""


class RateLimitedError(ApiError):
    """429: the key's rate limit is reached; :attr:`retry_after` says when to try again."""


class NotFoundError(ApiError):
    """404: no such agent-scoped fact, event or import, or an unknown path."""


class ConflictError(ApiError):
    """409: the request does not fit the current state (retry of an event that is not failed)."""


class PayloadTooLargeError(ApiError):
    """413: a message or the whole body is over the server's limit."""


class InvalidRequestError(ApiError):
    """422: invalid input; :attr:`fields` names every bad field."""


class ServerError(ApiError):
    """5xx: the server failed (``error_id`` names the logged traceback) or is unavailable."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: InvalidRequestError,
    429: RateLimitedError,
}


def error_class(status: int) -> type[ApiError]:
    """The exception class for an error status."""
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, ApiError)


def api_error(status: int, body: Any, headers: Mapping[str, str] | None = None) -> ApiError:
    """The exception for an error answer, from its decoded JSON body (anything else is tolerated)."""
    message = f"HTTP {status}"
    details: list[FieldError] = []
    error_id: str | None = None
    if isinstance(body, Mapping):
        if isinstance(body.get("error"), str) and body["error"]:
            message = body["error"]
        for item in body.get("detail") or []:
            if isinstance(item, Mapping):
                details.append(FieldError(field=str(item.get("field", "")), message=str(item.get("message", ""))))
        if isinstance(body.get("error_id"), str):
            error_id = body["error_id"]
    elif isinstance(body, str) and body.strip():
        message = body.strip()[:500]
    retry_after: float | None = None
    raw = (headers or {}).get("retry-after")
    if raw:
        try:
            retry_after = float(raw)
        except ValueError:
            retry_after = None
    return error_class(status)(status, message, details, error_id=error_id, retry_after=retry_after, body=body)


__all__ = [
    "ApiError",
    "AranduError",
    "AuthenticationError",
    "ConflictError",
    "FieldError",
    "InvalidRequestError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "ServerError",
    "TransportError",
    "WaitTimeoutError",
    "api_error",
    "error_class",
]

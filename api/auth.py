"""Bearer-key authentication of every ``/v1`` endpoint.

Keys come from ``ARANDU_API_KEYS`` and are service-wide (any key may act for any agent).
Every configured key is compared in constant time, so the answer time tells nothing about
how much of a guess was right. With no key configured every ``/v1`` request is refused:
an API left open by mistake is worse than one that says how to configure it.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from fastapi import Request

from api.errors import ApiError

_CHALLENGE = {"WWW-Authenticate": "Bearer"}

# How the OpenAPI document describes the scheme (the "Authorize" button of /docs).
SECURITY_SCHEME_NAME = "bearer"
SECURITY_SCHEME = {"type": "http", "scheme": "bearer", "description": "A key from ARANDU_API_KEYS."}


def encode_keys(keys: Sequence[str]) -> tuple[bytes, ...]:
    """Keys as bytes, ready for :func:`hmac.compare_digest` (which refuses non-ASCII str)."""
    return tuple(key.encode("utf-8") for key in keys)


def key_matches(candidate: bytes, keys: Sequence[bytes]) -> bool:
    """Whether ``candidate`` is one of ``keys``; every key is compared, whatever the outcome."""
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(candidate, key)
    return matched


async def require_api_key(request: Request) -> None:
    """Refuse the request with 401 unless it carries ``Authorization: Bearer <configured key>``.

    A plain function of the header rather than FastAPI's ``HTTPBearer``: it runs on every
    request of the hot path, and one dependency fewer is measurably cheaper.
    """
    keys: tuple[bytes, ...] = request.app.state.api.api_keys
    if not keys:
        raise ApiError(401, "no API keys configured: set ARANDU_API_KEYS", headers=_CHALLENGE)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "missing API key: send the header 'Authorization: Bearer <key>'", headers=_CHALLENGE)
    # Starlette decodes headers as latin-1; encoding back gives the bytes the client sent.
    candidate = token.encode("latin-1", errors="replace")
    if not key_matches(candidate, keys):
        raise ApiError(401, "invalid API key", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})

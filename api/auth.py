"""Bearer-key authentication and per-agent, per-permission authorisation of every ``/v1`` endpoint.

Two kinds of keys (:mod:`memory_core.api_keys`):

- the operator's, ``ARANDU_API_KEYS``: every agent, every permission, and key management. Every
  configured key is compared in constant time, so the answer time tells nothing about how much
  of a guess was right;
- tenant keys, stored as SHA-256 in ``api_keys``: their agents (a list or an ``agent_id``
  prefix), their permissions (``read``, ``write``, ``admin``), an optional expiry, a rate limit.
  A process keeps what it read of a key for ``api_key_cache_s`` seconds (2 by default), so a
  revocation takes effect within that on every API process.

Each route declares the permission it needs (:data:`READ`, :data:`WRITE`, :data:`ADMIN`,
:data:`OPERATOR_ONLY`); an ``agent_id`` in the path must be one the key covers (403 otherwise,
the same answer whether that agent has memory or not). Routes that address a row by id alone
(an event, an import) load it first and answer 404 when its agent is not covered, exactly as
for an id that does not exist (:func:`may_see`).

With no operator key configured every ``/v1`` request is refused: an API left open by mistake
is worse than one that says how to configure it.
"""

from __future__ import annotations

import hmac
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from api.errors import ApiError
from api.rate_limit import RateLimiter
from memory_core.api_keys import OPERATOR, KeyScope, Permission, find_key, hash_key

_CHALLENGE = {"WWW-Authenticate": "Bearer"}
_INVALID = {"WWW-Authenticate": 'Bearer error="invalid_token"'}

# How the OpenAPI document describes the scheme (the "Authorize" button of /docs).
SECURITY_SCHEME_NAME = "bearer"
SECURITY_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "An operator key from ARANDU_API_KEYS, or a tenant key from `arandu keys create`.",
}

# What a process remembers of tenant keys, unknown ones included (a flood of random keys must
# not become a flood of queries); past this many entries the memory starts over.
_CACHE_ENTRIES = 10_000


def encode_keys(keys: Sequence[str]) -> tuple[bytes, ...]:
    """Keys as bytes, ready for :func:`hmac.compare_digest` (which refuses non-ASCII str)."""
    return tuple(key.encode("utf-8") for key in keys)


def key_matches(candidate: bytes, keys: Sequence[bytes]) -> bool:
    """Whether ``candidate`` is one of ``keys``; every key is compared, whatever the outcome."""
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(candidate, key)
    return matched


@dataclass
class KeyResolver:
    """Turns a bearer token into the :class:`KeyScope` it grants, or an ApiError (401, 429)."""

    operator_keys: tuple[bytes, ...]
    sessions: sessionmaker[Session]
    limiter: RateLimiter
    cache_s: float = 2.0
    default_rate_per_s: float = 50.0
    _known: dict[str, tuple[KeyScope | None, float]] = field(default_factory=dict, repr=False)

    async def resolve(self, token: str) -> KeyScope:
        """The scope of ``token``; 401 for an unknown, revoked or expired key, 429 past its rate."""
        if not self.operator_keys:
            raise ApiError(401, "no API keys configured: set ARANDU_API_KEYS", headers=_CHALLENGE)
        # Starlette decodes headers as latin-1; encoding back gives the bytes the client sent.
        if key_matches(token.encode("latin-1", errors="replace"), self.operator_keys):
            return OPERATOR
        key_hash = hash_key(token)
        scope = await self._stored(token, key_hash)
        if scope is None:
            raise ApiError(401, "invalid API key", headers=_INVALID)
        if scope.expired():
            raise ApiError(401, f"API key {scope.name!r} has expired", headers=_INVALID)
        rate = scope.rate_limit_per_s if scope.rate_limit_per_s is not None else self.default_rate_per_s
        wait = await self.limiter.take(key_hash, rate)
        if wait is not None:
            retry_after = max(1, math.ceil(wait))
            raise ApiError(
                429,
                f"rate limit of API key {scope.name!r} reached ({rate:g} requests/s): retry in {retry_after} s",
                headers={"Retry-After": str(retry_after)},
            )
        return scope

    async def _stored(self, token: str, key_hash: str) -> KeyScope | None:
        now = time.monotonic()
        known = self._known.get(key_hash)
        if known is not None and now - known[1] < self.cache_s:
            return known[0]
        scope = await run_in_threadpool(self._read, token)
        if len(self._known) >= _CACHE_ENTRIES:
            self._known.clear()
        self._known[key_hash] = (scope, now)
        return scope

    def _read(self, token: str) -> KeyScope | None:
        with self.sessions() as session:
            return find_key(session, token)


def bearer_token(request: Request) -> str:
    """The token of ``Authorization: Bearer <token>``; 401 when there is none."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "missing API key: send the header 'Authorization: Bearer <key>'", headers=_CHALLENGE)
    return token


async def require_api_key(request: Request) -> KeyScope:
    """Authenticate the request (401 otherwise) and keep its scope on ``request.state.key_scope``.

    A plain function of the header rather than FastAPI's ``HTTPBearer``: it runs on every
    request of the hot path, and one dependency fewer is measurably cheaper.
    """
    scope: KeyScope | None = getattr(request.state, "key_scope", None)
    if scope is None:
        resolver: KeyResolver = request.app.state.api.keys
        scope = await resolver.resolve(bearer_token(request))
        request.state.key_scope = scope
    return scope


def key_scope(request: Request) -> KeyScope:
    """The scope :func:`require_api_key` found for this request."""
    scope: KeyScope = request.state.key_scope
    return scope


def may_see(request: Request, agent_id: str) -> bool:
    """Whether the request's key covers ``agent_id`` (for rows addressed by id alone: else a 404)."""
    return key_scope(request).covers(agent_id)


def _permission_check(permission: Permission) -> Callable[[Request], Awaitable[None]]:
    async def check(request: Request) -> None:
        scope = await require_api_key(request)
        agent_id = request.path_params.get("agent_id")
        if isinstance(agent_id, str) and not scope.covers(agent_id):
            raise ApiError(
                403,
                f"API key {scope.name!r} may not act for agent {agent_id!r} (it covers {scope.describe_agents()})",
                [("path.agent_id", "not covered by this API key")],
            )
        if not scope.allows(permission):
            held = ", ".join(sorted(scope.permissions))
            raise ApiError(403, f"API key {scope.name!r} lacks the {permission!r} permission (it has {held})")

    check.__name__ = f"require_{permission}"
    return check


async def _operator_only(request: Request) -> None:
    scope = await require_api_key(request)
    if not scope.operator:
        raise ApiError(403, "managing API keys needs an operator key (one of ARANDU_API_KEYS)")


READ = Depends(_permission_check("read"))
WRITE = Depends(_permission_check("write"))
ADMIN = Depends(_permission_check("admin"))
OPERATOR_ONLY = Depends(_operator_only)

"""Tenant API keys: create, list, revoke (operator keys only, the ones of ``ARANDU_API_KEYS``).

``POST /v1/keys`` answers the new key once; only its SHA-256 is stored, so it cannot be shown
again. A revocation takes effect within ``ARANDU_API_KEY_CACHE_S`` seconds (2 by default) on
every API process.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.responses import JSONResponse

from api.auth import OPERATOR_ONLY, require_api_key
from api.dependencies import JsonBody, answer, body_doc, get_state, parse_json
from api.errors import ApiError
from api.schemas import AGENT_ID_PATTERN, ErrorBody
from memory_core.api_keys import PERMISSIONS, KeyNameTakenError, Permission, create_key, list_keys, revoke_key

router = APIRouter(tags=["keys"], dependencies=[Depends(require_api_key), OPERATOR_ONLY])

KEY_NAME_PATTERN = r"^[A-Za-z0-9._:@-]{1,128}$"
MAX_KEY_AGENTS = 1000

_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    403: {"model": ErrorBody, "description": "not an operator key"},
}


class KeyIn(BaseModel):
    """A key to create: its name, its agents (a list or a prefix), permissions, expiry and rate."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=KEY_NAME_PATTERN, description="Unique among keys not revoked.")
    tenant: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="Default: the agent prefix without its ':', else the name.",
    )
    agent_ids: list[Annotated[str, Field(pattern=AGENT_ID_PATTERN)]] | None = Field(
        default=None, min_length=1, max_length=MAX_KEY_AGENTS
    )
    agent_prefix: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:@-]{1,128}$")
    permissions: list[Permission] = Field(default_factory=lambda: ["read", "write"], min_length=1)
    expires_at: datetime | None = None
    rate_limit_per_s: float | None = Field(default=None, gt=0, le=1_000_000)

    @model_validator(mode="after")
    def _agents_by_list_or_prefix(self) -> KeyIn:
        if (self.agent_ids is None) == (self.agent_prefix is None):
            raise ValueError("give exactly one of agent_ids (a list of agents) and agent_prefix (e.g. 'acme:')")
        return self

    @field_validator("expires_at")
    @classmethod
    def _aware_and_future(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("needs a time zone (e.g. 2027-01-31T00:00:00Z)")
        if value <= datetime.now(UTC):
            raise ValueError("is in the past")
        return value

    def tenant_name(self) -> str:
        """The tenant given, else derived from the prefix (``acme:`` -> ``acme``), else the key's name."""
        if self.tenant:
            return self.tenant
        if self.agent_prefix and self.agent_prefix.rstrip(":"):
            return self.agent_prefix.rstrip(":")
        return self.name


class KeyOut(BaseModel):
    """A key as listed: never the key itself, its first characters (``key_hint``) instead."""

    name: str
    tenant: str
    key_hint: str
    permissions: list[str]
    agent_ids: list[str] | None = None
    agent_prefix: str | None = None
    rate_limit_per_s: float | None = None
    expires_at: datetime | None = None
    created_at: datetime
    revoked_at: datetime | None = None
    status: str = Field(description="active, expired or revoked")


class KeyCreated(KeyOut):
    """A created key: ``key`` is shown this once."""

    key: str


class KeyList(BaseModel):
    """The keys, newest first."""

    keys: list[KeyOut]


@router.post(
    "/v1/keys",
    status_code=201,
    response_model=KeyCreated,
    responses={**_RESPONSES, 409: {"model": ErrorBody, "description": "a key with this name exists"}},
    openapi_extra=body_doc(KeyIn),
    summary="Create a tenant key",
)
def create(request: Request, body: JsonBody) -> JSONResponse:
    """A new key for some agents (``agent_ids``, or ``agent_prefix`` such as ``acme:``) with some of the
    permissions ``read``, ``write`` and ``admin``. The answer holds the key; it is not stored and
    cannot be shown again."""
    wanted = parse_json(KeyIn, body)
    with get_state(request).sessions.begin() as session:
        try:
            key, info = create_key(
                session,
                name=wanted.name,
                tenant=wanted.tenant_name(),
                permissions=wanted.permissions,
                agent_ids=wanted.agent_ids,
                agent_prefix=wanted.agent_prefix,
                expires_at=wanted.expires_at,
                rate_limit_per_s=wanted.rate_limit_per_s,
            )
        except KeyNameTakenError as taken:
            raise ApiError(409, str(taken), [("body.name", "a key that is not revoked has this name")]) from None
    return answer(201, {**info.as_dict(), "key": key})


@router.get("/v1/keys", response_model=KeyList, responses=_RESPONSES, summary="List tenant keys")
def list_all(
    request: Request,
    include_revoked: Annotated[bool, Query(description="List revoked keys too.")] = False,
) -> JSONResponse:
    """Every key not revoked (or every key), newest first, without the keys themselves."""
    with get_state(request).sessions() as session:
        keys = list_keys(session, include_revoked=include_revoked)
    return answer(200, {"keys": [key.as_dict() for key in keys]})


@router.delete(
    "/v1/keys/{name}",
    response_model=KeyOut,
    responses={**_RESPONSES, 404: {"model": ErrorBody, "description": "no key of this name that is not revoked"}},
    summary="Revoke a tenant key",
)
def revoke(request: Request, name: Annotated[str, Path(pattern=KEY_NAME_PATTERN)]) -> JSONResponse:
    """Revoke the key: every API process refuses it within ``ARANDU_API_KEY_CACHE_S`` seconds (2 by default)."""
    with get_state(request).sessions.begin() as session:
        info = revoke_key(session, name)
    if info is None:
        raise ApiError(404, f"no key named {name!r} that is not revoked", [("path.name", "no such key")])
    return answer(200, info.as_dict())


__all__ = ["PERMISSIONS", "KeyCreated", "KeyIn", "KeyList", "KeyOut", "router"]

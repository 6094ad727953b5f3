"""API keys scoped to a tenant's agents and permissions (table ``api_keys``, migration 0015).

A key is 32 random bytes, URL-safe, behind the prefix ``ak_``; the database keeps only its
SHA-256 (a fast hash is right for a random secret of that size: nothing to guess from it) and
its first characters (``key_hint``), so listings tell keys apart. A key acts for the agents it
names, an explicit list or an ``agent_id`` prefix such as ``acme:``, with its permissions:

- ``read``: retrieve, list and read facts, entities, events, imports and job runs;
- ``write``: send messages and imports, delete facts;
- ``admin``: run maintenance jobs, re-drive events (one or in bulk), re-process and erase agents.

The operator's keys (``ARANDU_API_KEYS``) are not in the table: they act for every agent with
every permission and are the only ones that manage keys (:data:`OPERATOR`).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

Permission = Literal["read", "write", "admin"]
PERMISSIONS: tuple[Permission, ...] = ("read", "write", "admin")
KEY_PREFIX = "ak_"
_HINT_CHARS = 10


class KeyNameTakenError(ValueError):
    """A key that is not revoked already has this name."""


@dataclass(frozen=True)
class KeyScope:
    """What one key may do: for which agents, with which permissions, until when."""

    name: str
    tenant: str
    permissions: frozenset[str]
    agent_ids: frozenset[str] | None = None
    agent_prefix: str | None = None
    expires_at: datetime | None = None
    rate_limit_per_s: float | None = None
    operator: bool = field(default=False)

    def covers(self, agent_id: str) -> bool:
        """Whether the key may act for ``agent_id`` at all."""
        if self.operator:
            return True
        if self.agent_ids is not None:
            return agent_id in self.agent_ids
        return self.agent_prefix is not None and agent_id.startswith(self.agent_prefix)

    def allows(self, permission: Permission) -> bool:
        """Whether the key has ``permission`` (on the agents it covers)."""
        return self.operator or permission in self.permissions

    def expired(self, now: datetime | None = None) -> bool:
        """Whether the key's expiry has passed."""
        return self.expires_at is not None and self.expires_at <= (now or datetime.now(UTC))

    def describe_agents(self) -> str:
        """``agents acme:*`` / ``agents a, b`` / ``every agent``, for error messages."""
        if self.operator:
            return "every agent"
        if self.agent_prefix is not None:
            return f"agents {self.agent_prefix}*"
        return "agents " + ", ".join(sorted(self.agent_ids or ()))


# The scope of the operator's keys (ARANDU_API_KEYS).
OPERATOR = KeyScope(name="operator", tenant="*", permissions=frozenset(PERMISSIONS), operator=True)


@dataclass(frozen=True)
class KeyInfo:
    """A stored key as listings show it (never the key itself)."""

    name: str
    tenant: str
    key_hint: str
    permissions: list[str]
    agent_ids: list[str] | None
    agent_prefix: str | None
    rate_limit_per_s: float | None
    expires_at: datetime | None
    created_at: datetime
    revoked_at: datetime | None

    @property
    def status(self) -> str:
        """``active``, ``expired`` or ``revoked``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= datetime.now(UTC):
            return "expired"
        return "active"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields, ``status`` included."""
        return {
            "name": self.name,
            "tenant": self.tenant,
            "key_hint": self.key_hint,
            "permissions": self.permissions,
            "agent_ids": self.agent_ids,
            "agent_prefix": self.agent_prefix,
            "rate_limit_per_s": self.rate_limit_per_s,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "status": self.status,
        }


def hash_key(key: str) -> str:
    """The SHA-256 of a key, as stored (hex)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """A fresh random key: ``ak_`` and 43 URL-safe characters (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


_INSERT_SQL = """
INSERT INTO api_keys (id, name, tenant, key_hash, key_hint, permissions, agent_ids, agent_prefix, expires_at,
                      rate_limit_per_s)
VALUES (:id, :name, :tenant, :hash, :hint, :permissions, :agent_ids, :agent_prefix, :expires_at, :rate)
RETURNING name, tenant, key_hint, permissions, agent_ids, agent_prefix, rate_limit_per_s,
       expires_at, created_at, revoked_at
"""
_LIST_SQL = """
SELECT name, tenant, key_hint, permissions, agent_ids, agent_prefix, rate_limit_per_s,
       expires_at, created_at, revoked_at
FROM api_keys WHERE revoked_at IS NULL OR :include_revoked ORDER BY created_at DESC, name
"""
_REVOKE_SQL = """
UPDATE api_keys SET revoked_at = now() WHERE name = :name AND revoked_at IS NULL
RETURNING name, tenant, key_hint, permissions, agent_ids, agent_prefix, rate_limit_per_s,
       expires_at, created_at, revoked_at
"""


def _info(row: Any) -> KeyInfo:
    return KeyInfo(
        name=str(row.name),
        tenant=str(row.tenant),
        key_hint=str(row.key_hint),
        permissions=list(row.permissions),
        agent_ids=list(row.agent_ids) if row.agent_ids is not None else None,
        agent_prefix=row.agent_prefix,
        rate_limit_per_s=float(row.rate_limit_per_s) if row.rate_limit_per_s is not None else None,
        expires_at=row.expires_at,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


def create_key(
    session: Session,
    *,
    name: str,
    tenant: str,
    permissions: Sequence[Permission],
    agent_ids: Sequence[str] | None = None,
    agent_prefix: str | None = None,
    expires_at: datetime | None = None,
    rate_limit_per_s: float | None = None,
) -> tuple[str, KeyInfo]:
    """Store a new key and return it (the only time it is known) with its stored description.

    Exactly one of ``agent_ids`` (non-empty) and ``agent_prefix`` (non-empty) names its agents.
    Raises :class:`KeyNameTakenError` when a key that is not revoked has ``name``.
    """
    if (agent_ids is None) == (agent_prefix is None):
        raise ValueError("a key acts for an explicit list of agents or for an agent_id prefix, exactly one")
    if agent_ids is not None and not agent_ids:
        raise ValueError("the list of agents is empty")
    if agent_prefix is not None and not agent_prefix:
        raise ValueError("the agent prefix is empty")
    unknown = sorted(set(permissions) - set(PERMISSIONS))
    if unknown or not permissions:
        raise ValueError(f"permissions are some of {', '.join(PERMISSIONS)}")
    key = new_key()
    params = {
        "id": uuid.uuid4(),
        "name": name,
        "tenant": tenant,
        "hash": hash_key(key),
        "hint": key[:_HINT_CHARS],
        "permissions": sorted(set(permissions), key=PERMISSIONS.index),
        "agent_ids": sorted(set(agent_ids)) if agent_ids is not None else None,
        "agent_prefix": agent_prefix,
        "expires_at": expires_at,
        "rate": rate_limit_per_s,
    }
    try:
        with session.begin_nested():
            row = session.execute(text(_INSERT_SQL), params).one()
    except IntegrityError as error:
        raise KeyNameTakenError(f"a key named {name!r} exists (revoke it first, or choose another name)") from error
    return key, _info(row)


def list_keys(session: Session, *, include_revoked: bool = False) -> list[KeyInfo]:
    """Every key, newest first; revoked ones only when asked."""
    rows = session.execute(text(_LIST_SQL), {"include_revoked": include_revoked})
    return [_info(row) for row in rows]


def revoke_key(session: Session, name: str) -> KeyInfo | None:
    """Revoke the key named ``name`` that is not revoked yet; None when there is none."""
    row = session.execute(text(_REVOKE_SQL), {"name": name}).first()
    return _info(row) if row is not None else None


def find_key(session: Session, key: str) -> KeyScope | None:
    """The scope of a stored key that is not revoked (expired ones included: the caller says so), else None."""
    row = session.execute(
        text(
            "SELECT name, tenant, permissions, agent_ids, agent_prefix, expires_at, rate_limit_per_s "
            "FROM api_keys WHERE key_hash = :hash AND revoked_at IS NULL"
        ),
        {"hash": hash_key(key)},
    ).first()
    if row is None:
        return None
    return KeyScope(
        name=str(row.name),
        tenant=str(row.tenant),
        permissions=frozenset(row.permissions),
        agent_ids=frozenset(row.agent_ids) if row.agent_ids is not None else None,
        agent_prefix=row.agent_prefix,
        expires_at=row.expires_at,
        rate_limit_per_s=float(row.rate_limit_per_s) if row.rate_limit_per_s is not None else None,
    )


__all__ = [
    "KEY_PREFIX",
    "OPERATOR",
    "PERMISSIONS",
    "KeyInfo",
    "KeyNameTakenError",
    "KeyScope",
    "Permission",
    "create_key",
    "find_key",
    "hash_key",
    "list_keys",
    "new_key",
    "revoke_key",
]
